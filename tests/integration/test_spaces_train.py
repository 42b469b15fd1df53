"""Train, export and verify policies on the observation and action spaces beyond Box/Discrete,
through the CLI as a user runs it."""
import json
import os

import numpy as np
import pytest

from msrl_consistent.cli import main
from msrl_consistent.deploy import check as check_export
from msrl_consistent.manifest import read_manifest
from msrl_consistent.runtime import load_policy


def _train(tmp_path, config, steps, *sets):
    run = str(tmp_path / "run")
    args = ["train", config, "--run-dir", run, "--total-timesteps", str(steps), "--quiet", "--set", "eval.freq=0",
            "--set", "eval.episodes=2"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return run


def _export_and_verify(run, out, capsys, episodes=2):
    assert main(["export", run, "--out", out, "--format", "mindir,onnx", "--golden", "256"]) == 0
    capsys.readouterr()
    reports = {}
    for backend in ("mindspore", "onnxruntime"):
        rc = main(["verify", out, "--backend", backend, "--episodes", str(episodes), "--json"])
        r = json.loads(capsys.readouterr().out)
        assert rc == 0 and r["passed"], r
        assert r["golden"]["agreement"] == 1.0
        reports[backend] = r
    assert reports["mindspore"]["golden"]["bit_identical"]
    return reports


@pytest.fixture(scope="module")
def frozenlake_export(tmp_path_factory, configs_dir):
    tmp = tmp_path_factory.mktemp("frozenlake")
    run = _train(tmp, os.path.join(configs_dir, "ppo", "FrozenLake-v1.yaml"), 4096, "algo.n_steps=64")
    return run, str(tmp / "export")


def test_frozenlake_discrete_observations_train_export_verify(frozenlake_export, capsys):
    run, out = frozenlake_export
    _export_and_verify(run, out, capsys)
    m = read_manifest(out)
    assert m.spaces["observation"]["type"] == "Discrete" and m.spaces["observation"]["n"] == 16
    assert m.io["input"]["shape"] == [None, 1]
    with np.load(os.path.join(out, "golden.npz"), allow_pickle=False) as g:
        obs = g["obs"]
    assert set(np.unique(obs)) <= set(range(16)) and len(np.unique(obs)) > 8
    # the runtime takes indices; the export and the training cell agree on every state
    exported = load_policy(out, backend="onnxruntime")
    train = load_policy(run)
    states = np.arange(16)
    assert np.array_equal(exported.act(states), train.act(states))
    assert exported.act(5) == train.act(5)
    with pytest.raises(ValueError, match=r"Discrete\(16\) observations"):
        exported.act(16)


def test_frozenlake_bundle_checks_itself(frozenlake_export):
    import subprocess
    import sys
    _, out = frozenlake_export
    proc = subprocess.run([sys.executable, "policy.py", "check", "--backend", "onnxruntime"], cwd=out,
                          capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


MULTI_CONFIG = """algorithm: ppo
seed: 0
total_timesteps: 8192
env:
  id: {env_id}
  n_envs: 4
policy:
  net_arch: [64, 64]
algo:
  learning_rate: 1.0e-3
  n_steps: 128
  batch_size: 128
  n_epochs: 10
  gamma: 0.0
eval:
  freq: 0
  episodes: 20
"""


@pytest.mark.parametrize("env_id,optimum,dims", [("MsrlTestMultiDiscrete-v0", 24.0, 3),
                                                 ("MsrlTestMultiBinary-v0", 32.0, 4)])
@pytest.mark.slow
def test_multi_actions_learn_export_verify(env_id, optimum, dims, tmp_path, capsys):
    import spaces_envs  # noqa: F401  (registers the test envs)
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text(MULTI_CONFIG.format(env_id=env_id))
    run = str(tmp_path / "run")
    assert main(["train", str(cfg), "--run-dir", run, "--quiet"]) == 0
    with open(os.path.join(run, "summary.json")) as fh:
        summary = json.load(fh)
    # 8192 steps reach the optimum (random play: 8.67 and 16)
    assert summary["final_eval"]["mean_return"] == optimum
    out = str(tmp_path / "export")
    _export_and_verify(run, out, capsys)
    m = read_manifest(out)
    assert m.io["output"]["shape"] == [None, dims] and m.io["output"]["dtype"] == "int32"
    with np.load(os.path.join(out, "golden.npz"), allow_pickle=False) as g:
        assert g["actions"].shape == (256, dims) and g["actions"].dtype == np.int32
    pol = load_policy(out, backend="onnxruntime")
    obs = np.zeros(dims if dims == 4 else 3, np.float32)
    a = pol.act(obs)
    assert a.shape == (dims,) and a.dtype.kind == "i"
    assert np.array_equal(pol.act(obs[None])[0], load_policy(run).act(obs))


@pytest.mark.slow
def test_dict_observations_learn_export_verify(tmp_path, capsys):
    import subprocess
    import sys

    import spaces_envs  # noqa: F401  (registers the test envs)
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text(MULTI_CONFIG.format(env_id="MsrlTestDict-v0"))
    run = str(tmp_path / "run")
    assert main(["train", str(cfg), "--run-dir", run, "--quiet"]) == 0
    with open(os.path.join(run, "summary.json")) as fh:
        assert json.load(fh)["final_eval"]["mean_return"] == 8.0  # optimum (random play: 1.33)
    out = str(tmp_path / "export")
    _export_and_verify(run, out, capsys)
    m = read_manifest(out)
    assert m.spaces["observation"]["keys"] == ["goal", "pos", "sign"]  # the fixed, sorted order of the row
    assert m.io["input"]["shape"] == [None, 8]
    one = {"goal": 1, "sign": np.array([1.0], np.float32), "pos": np.zeros((2, 3), np.float32)}
    batch = {"goal": np.array([0, 1, 2, 0]), "sign": np.array([[-1.0], [-1.0], [1.0], [1.0]], np.float32),
             "pos": np.zeros((4, 2, 3), np.float32)}
    train = load_policy(run)
    for backend in ("mindspore", "onnxruntime"):
        pol = load_policy(out, backend=backend)
        assert pol.act(one) == 4  # goal + 3 * (sign > 0): the learned optimum
        assert pol.act(batch).tolist() == [0, 1, 5, 3] == train.act(batch).tolist()
        with pytest.raises(ValueError, match=r"missing keys \['sign'\]"):
            pol.act({"goal": 1, "pos": np.zeros((2, 3), np.float32)})
    # the bundle alone (policy.py with msrl_deploy.zip) checks the golden set of packed Dict rows
    proc = subprocess.run([sys.executable, "policy.py", "check", "--backend", "onnxruntime"], cwd=out,
                          capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


DOT_CONFIG = """algorithm: ppo
seed: 0
total_timesteps: {steps}
env:
  id: MsrlTestDot-v0
  n_envs: 8
  frame_stack: {k}
  max_and_skip: {skip}
policy:
  net_arch: []
  activation: relu
algo:
  learning_rate: 1.0e-3
  n_steps: 32
  batch_size: 128
  n_epochs: 4
  gamma: 0.9
  ent_coef: 0.01
eval:
  freq: 0
  episodes: 50
"""


def _dot_run(tmp_path, steps, k, skip=1):
    import spaces_envs  # noqa: F401  (registers the test envs)
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text(DOT_CONFIG.format(steps=steps, k=k, skip=skip))
    run = str(tmp_path / "run")
    assert main(["train", str(cfg), "--run-dir", run, "--quiet"]) == 0
    with open(os.path.join(run, "summary.json")) as fh:
        return run, json.load(fh)


@pytest.mark.slow
def test_image_policy_learns_and_exports_from_raw_uint8_frames(tmp_path, capsys):
    run, summary = _dot_run(tmp_path, 8192, 1)
    # optimum ~1.27 (1 + 0.1 x the mean grid distance); random play ~0.06 (measured: docs/benchmarks.md)
    assert summary["final_eval"]["mean_return"] >= 1.2
    out = str(tmp_path / "export")
    reports = _export_and_verify(run, out, capsys, episodes=5)
    assert reports["onnxruntime"]["rollouts"]["identical_episodes"] == 5
    m = read_manifest(out)
    assert m.io["input"] == {"name": "obs", "shape": [None, 32 * 32 * 3], "dtype": "uint8"}
    assert m.spaces["observation"]["type"] == "Image" and m.spaces["observation"]["layout"] == "HWC"
    assert m.export.onnx["batch"] == "dynamic"
    with np.load(os.path.join(out, "golden.npz"), allow_pickle=False) as g:
        assert g["obs"].dtype == np.uint8 and g["obs"].shape == (256, 3072)
    import spaces_envs
    env = spaces_envs.DotToTarget()
    frame, _ = env.reset(seed=3)
    train = load_policy(run)
    for backend in ("mindspore", "onnxruntime"):
        pol = load_policy(out, backend=backend)
        assert pol.act(frame) == train.act(frame)  # one raw (32, 32, 3) uint8 frame
        batch = np.stack([frame, np.zeros_like(frame)])
        assert np.array_equal(pol.act(batch), train.act(batch))
        with pytest.raises(ValueError, match=r"Image\(32, 32, 3\) uint8 frames"):
            pol.act(frame[:, :, :1])


@pytest.mark.slow
def test_frame_stacking_is_reproduced_by_the_deployed_policy(tmp_path, capsys):
    run, _ = _dot_run(tmp_path, 1024, 2, skip=2)
    out = str(tmp_path / "export")
    reports = _export_and_verify(run, out, capsys, episodes=3)
    # rollouts identical: load_policy stacked the frames (behind the env's max-and-skip) as the training loop did
    assert reports["mindspore"]["rollouts"]["identical_episodes"] == 3
    m = read_manifest(out)
    assert m.spaces["observation"]["frame_stack"] == {"kind": "frame_stack", "k": 2, "order": "oldest_first"}
    assert m.spaces["observation"]["max_and_skip"] == {"kind": "max_and_skip", "skip": 2, "pool": "max_last_2"}
    assert load_policy(out, backend="onnxruntime").max_and_skip.skip == 2  # for the deploying loop
    assert m.io["input"]["shape"] == [None, 2 * 3072]
    import spaces_envs
    env = spaces_envs.DotToTarget()
    frames = [env.reset(seed=1)[0]] + [env.step(a)[0] for a in (0, 3, 1)]
    pols = [load_policy(run), load_policy(out, backend="onnxruntime"), load_policy(out, backend="mindspore")]
    acts = [[int(p.act(f)) for f in frames] for p in pols]
    assert acts[0] == acts[1] == acts[2]
    # the same sequence through the cell on explicitly stacked rows (zeros, then oldest first)
    from msrl_consistent.deploy import FrameStack
    st = FrameStack(2, 3072)
    rows = np.concatenate([st.push(f.reshape(1, -1)) for f in frames])
    assert pols[1].act_at_batch(rows, 1).tolist() == acts[0]
    # the bundle alone (policy.py with msrl_deploy.zip, NumPy + onnxruntime) checks the uint8 golden set
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "policy.py", "check", "--backend", "onnxruntime"], cwd=out,
                          capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a manifest whose max_and_skip record is not one: refused naming the field, no traceback
    with open(os.path.join(out, "manifest.json")) as fh:
        manifest = json.load(fh)
    manifest["spaces"]["observation"]["max_and_skip"]["skip"] = 1
    with open(os.path.join(out, "manifest.json"), "w") as fh:
        json.dump(manifest, fh)
    assert main(["verify", out, "--backend", "onnxruntime"]) == 2
    assert "field 'spaces.observation.max_and_skip' is" in capsys.readouterr().err


@pytest.mark.slow
def test_image_ppo_is_bit_reproducible_and_resumes_exactly(tmp_path):
    # the pre-encoded rollout (the buffer holds the cell's preprocessed frames) keeps the project's
    # determinism: the same config and seed twice give the same parameters, and two resumes from
    # the same checkpoint end equal (frame stacking and max-and-skip on)
    import spaces_envs  # noqa: F401
    from helpers import copy_run_at_checkpoint

    from msrl_consistent.algorithms import PPO
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text(DOT_CONFIG.format(steps=512, k=2, skip=2) + "checkpoint:\n  freq: 256\n  keep: 5\n")
    hashes = []
    for name in ("a", "b"):
        run = str(tmp_path / name)
        assert main(["train", str(cfg), "--run-dir", run, "--quiet", "--set", "eval.episodes=1"]) == 0
        with open(os.path.join(run, "summary.json")) as fh:
            hashes.append(json.load(fh)["params_sha256"])
    assert hashes[0] == hashes[1]
    resumed = []
    for name in ("r1", "r2"):
        d = copy_run_at_checkpoint(str(tmp_path / "a"), tmp_path / name, "step-000000256.safetensors")
        algo = PPO.resume(d)
        assert algo.num_timesteps == 256
        resumed.append(algo.learn(d, progress=False)["params_sha256"])
    assert resumed[0] == resumed[1]


def test_the_frame_wise_rollout_trains_the_parameters_of_the_whole_stack_rollout(tmp_path, monkeypatch):
    # a stacked image policy's rollout preprocesses only each step's new frame and keeps the k - 1
    # before it (zeroed where an episode ended), and takes the bootstrap values (the rollout's last
    # rows, truncated episodes' final rows) from its acting graph; the whole-stack rollout
    # preprocesses all k frames at every step and has a value graph. Same frames, same bits: the
    # same trained parameters. A 6-step time limit truncates episodes inside the rollouts.
    import spaces_envs  # noqa: F401

    from msrl_consistent.algorithms import on_policy, ppo
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text(DOT_CONFIG.format(steps=768, k=3, skip=1))
    learn_loop, used = ppo.PPO.learn_loop, []

    def either(self, run):
        if whole:  # the rollout as built: PreEncodedRollout, every stacked frame preprocessed per step
            on_policy.OnPolicyAlgorithm.learn_loop(self, run)
        else:
            learn_loop(self, run)
        used.append(self.frame_wise)

    monkeypatch.setattr(ppo.PPO, "learn_loop", either)
    stepped, restarts = on_policy.FrameCarry.stepped, []

    def counted(self, done, cols):
        restarts.append(int(done.sum()))
        stepped(self, done, cols)

    monkeypatch.setattr(on_policy.FrameCarry, "stepped", counted)
    set_final, truncated = on_policy.RolloutBuffer.set_final_values, []

    def final_values(self, t, idx, values):
        truncated.append(len(idx))
        set_final(self, t, idx, values)

    monkeypatch.setattr(on_policy.RolloutBuffer, "set_final_values", final_values)
    hashes = []
    for whole in (False, True):
        run = str(tmp_path / f"run-{whole}")
        assert main(["train", str(cfg), "--run-dir", run, "--quiet", "--set", "eval.episodes=1",
                     "--set", "env.max_episode_steps=6"]) == 0
        with open(os.path.join(run, "summary.json")) as fh:
            hashes.append(json.load(fh)["params_sha256"])
    assert used == [True, False]
    assert sum(restarts) > 8 * 3  # episodes ended inside the rollouts: the carry restarted envs
    assert sum(truncated) > 8  # ... and time limits truncated some: their final values were used
    assert hashes[0] == hashes[1]


ATARI_FRAME_CONFIG = """algorithm: ppo
seed: 0
total_timesteps: 64
env:
  id: MsrlTestAtariFrame-v0
  n_envs: 2
  frame_stack: 4
  max_and_skip: 2
policy:
  net_arch: []
  activation: relu
  cnn: nature
  grayscale: true
  resize: [84, 84]
algo:
  n_steps: 32
  batch_size: 32
  n_epochs: 1
eval:
  freq: 0
  episodes: 1
"""


@pytest.mark.slow
def test_full_size_atari_frames_export_and_verify(tmp_path, capsys):
    # the raw 210x160x3 uint8 frame, stacked 4 times (403,200 bytes per model input row), as the
    # shipped Breakout config has it: train, export, verify on both backends, the bundle's check
    import subprocess
    import sys

    import spaces_envs  # noqa: F401

    from msrl_consistent.deploy import MAX_ROW_BYTES, Export, ExportError
    cfg = tmp_path / "ppo.yaml"
    cfg.write_text(ATARI_FRAME_CONFIG)
    run, out = str(tmp_path / "run"), str(tmp_path / "export")
    assert main(["train", str(cfg), "--run-dir", run, "--quiet"]) == 0
    assert main(["export", run, "--out", out, "--format", "mindir,onnx", "--golden", "48"]) == 0
    capsys.readouterr()
    assert main(["verify", out, "--episodes", "1"]) == 0
    assert "PASS" in capsys.readouterr().out
    assert main(["verify", out, "--backend", "onnxruntime", "--episodes", "1"]) == 0
    # fp16 (the grayscale and resize MatMuls' constants in the frames' dtype): exported and checked
    out16 = str(tmp_path / "fp16")
    assert main(["export", run, "--out", out16, "--golden", "16", "--precision", "fp16"]) == 0
    assert check_export(out16, "mindspore", latency_seconds=0, write_report=False)["golden"]["agreement"] >= 0.5
    m = read_manifest(out)
    assert m.spaces["observation"]["shape"] == [210, 160, 3]
    assert m.io["input"] == {"name": "obs", "shape": [None, 4 * 210 * 160 * 3], "dtype": "uint8"}
    proc = subprocess.run([sys.executable, "policy.py", "check", "--backend", "onnxruntime", "--latency-seconds", "0"],
                          cwd=out, capture_output=True, text=True, env=dict(os.environ, GLOG_v="3"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the validator's limit is in bytes: a 4K RGB camera stacked 4 times (99.5 MB a row) is accepted,
    # a row that cannot be held is refused naming the field
    with open(os.path.join(out, "manifest.json")) as fh:
        manifest = json.load(fh)

    def declare(shape, k):
        d = json.loads(json.dumps(manifest))
        d["spaces"]["observation"]["shape"] = shape
        d["spaces"]["observation"]["frame_stack"]["k"] = k
        d["io"]["input"]["shape"] = [None, int(np.prod(shape)) * k]
        return d
    big = Export(out, declare([2160, 3840, 3], 4))
    assert big.obs_dim * 1 == 2160 * 3840 * 3 * 4 <= MAX_ROW_BYTES
    with pytest.raises(ExportError, match=r"field 'spaces.observation.shape' is \[65536, 65536, 3\]"):
        Export(out, declare([65536, 65536, 3], 4))
