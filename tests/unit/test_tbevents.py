"""The run's TensorBoard event files, read back with tensorboardX's protobuf classes and its CRC-32C
(an implementation independent of msrl's): the framing, the checksums and every scalar."""
import glob
import os
import struct

import numpy as np
from tensorboardX.crc32c import crc32c as reference_crc32c
from tensorboardX.proto.event_pb2 import Event

from msrl_consistent.logging import RunLogger
from msrl_consistent.tbevents import crc32c


def read_events(path):
    events = []
    with open(path, "rb") as fh:
        data = fh.read()
    pos = 0
    while pos < len(data):
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        payload = data[pos + 12:pos + 12 + length]
        (dcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert hcrc == _masked(reference_crc32c(header))
        assert dcrc == _masked(reference_crc32c(payload))
        ev = Event()
        ev.ParseFromString(payload)
        events.append(ev)
        pos += 16 + length
    return events


def _masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def test_crc32c_matches_the_reference_on_random_bytes():
    rng = np.random.default_rng(0)
    for n in (0, 1, 7, 64, 1000):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert crc32c(data) == reference_crc32c(data)
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value


def test_run_logger_scalars_read_back(tmp_path):
    log = RunLogger(str(tmp_path), 1000, progress=False)
    log.episode(8, 21.0, 21)
    log.scalars(256, {"loss": 0.5, "epochs": 20, "approx_kl": np.float32(0.0125), "name": "skipped"})
    log.scalars(3_000_000_000, {"mean_return": -1234.5}, "eval")  # a step past int32
    log.close()
    files = glob.glob(os.path.join(str(tmp_path), "tb", "events.out.tfevents.*"))
    assert len(files) == 1
    events = read_events(files[0])
    assert events[0].file_version == "brain.Event:2"
    got = [(ev.step, [(v.tag, v.simple_value) for v in ev.summary.value]) for ev in events[1:]]
    assert got == [
        (8, [("rollout/episode_return", 21.0), ("rollout/episode_length", 21.0)]),
        (256, [("train/loss", 0.5), ("train/epochs", 20.0), ("train/approx_kl", float(np.float32(0.0125)))]),
        (3_000_000_000, [("eval/mean_return", -1234.5)]),
    ]
    assert all(ev.wall_time > 1.7e9 for ev in events)


def test_tensorboard_false_writes_no_event_file(tmp_path):
    log = RunLogger(str(tmp_path), 1000, tensorboard=False, progress=False)
    log.scalars(1, {"loss": 1.0})
    log.close()
    assert not os.path.exists(os.path.join(str(tmp_path), "tb"))
