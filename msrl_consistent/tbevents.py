"""TensorBoard event files written without tensorboardX or TensorFlow.

The format TensorBoard reads: ``events.out.tfevents.<seconds>.<host>`` holding TFRecords (length,
masked CRC-32C of the length, an ``Event`` protocol buffer, masked CRC-32C of it); the first event
carries the file version, each later one a step and a ``Summary`` of scalar values. The few
protobuf fields needed are encoded here by hand.

Why not tensorboardX's SummaryWriter: it imports PyTorch when PyTorch is installed (seconds of
start-up) and sends every scalar through a multiprocessing queue to a writer thread, a cost a
short run notices (docs/benchmarks.md measures both). Here one ``scalars`` call is one event,
written in the calling thread.
"""
from __future__ import annotations

import os
import socket
import struct
import time
from typing import Iterable, Tuple


def _crc_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum TFRecords use."""
    crc = 0xFFFFFFFF
    table = _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_event(wall_time: float, step: int = 0, scalars: Iterable[Tuple[str, float]] = (),
                 file_version: str = "") -> bytes:
    """An ``Event``: wall_time (1, double), step (2, int64), file_version (3, string) or summary
    (5: ``Summary`` whose repeated value (1) holds tag (1, string) and simple_value (2, float))."""
    out = b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint(int(step) & 0xFFFFFFFFFFFFFFFF)
    if file_version:
        out += _field(3, file_version.encode())
    values = b"".join(_field(1, _field(1, tag.encode()) + b"\x15" + struct.pack("<f", float(v)))
                      for tag, v in scalars)
    if values:
        out += _field(5, values)
    return out


def record(data: bytes) -> bytes:
    """One TFRecord around ``data``."""
    header = struct.pack("<Q", len(data))
    return header + struct.pack("<I", masked_crc32c(header)) + data + struct.pack("<I", masked_crc32c(data))


class EventFile:
    """A new event file in ``logdir`` (created if needed); a resumed run adds a second file
    beside the first, as TensorBoard expects."""

    def __init__(self, logdir: str):
        os.makedirs(logdir, exist_ok=True)
        now = time.time()
        self.path = os.path.join(logdir, f"events.out.tfevents.{int(now)}.{socket.gethostname()}")
        self._fh = open(self.path, "ab")
        self._fh.write(record(encode_event(now, file_version="brain.Event:2")))
        self._fh.flush()
        self._flushed = time.monotonic()

    def scalars(self, step: int, items: Iterable[Tuple[str, float]]) -> None:
        """One event at ``step`` with the (tag, value) pairs of ``items``."""
        self._fh.write(record(encode_event(time.time(), step, items)))

    def flush_every(self, seconds: float) -> None:
        """Flush to the OS when the last flush is ``seconds`` old (a TensorBoard watching the run
        sees it within that time)."""
        if time.monotonic() - self._flushed >= seconds:
            self._fh.flush()
            self._flushed = time.monotonic()

    def close(self) -> None:
        self._fh.close()
