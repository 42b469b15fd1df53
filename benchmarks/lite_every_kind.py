"""Every export kind on MindSpore Lite (CPU target, the real runtime), beside ONNX Runtime.

    msrl lite install && python benchmarks/lite_every_kind.py [--shipped] [--only TEXT ...] [--workdir DIR]
                                                              [--out results.json] [--runs RUN_DIR ...]

Trains a short run of each kind (what is measured is the runtimes' arithmetic on the exported
policy, not what it learned), exports it with `--format mindir,onnx,lite,om --preflight-only`
and runs `msrl verify` on Lite and on ONNX Runtime: golden-set agreement (discrete), max abs
error (continuous), the recurrent golden sequences' state errors, and the ATC pre-flight's
verdict under its default precision mode. The kinds: PPO CartPole (Discrete), PPO Pendulum
(Box, observation normalization), SAC and TD3 Pendulum, FrozenLake (Discrete observations),
recurrent PPO CartPoleNoVel, MultiSensorReach (Dict with a camera: two graph inputs), a member of
a 2-seed CartPole population, and the test envs of tests/spaces_envs.py (Dict observations,
MultiDiscrete and MultiBinary actions, uint8 frames stacked 2 with an action repeat); with
``--shipped`` also every other shipped config (Breakout, the gSDE and HalfCheetah recipes,
InvertedPendulum, PendulumNoVel: `pip install -e ".[atari,mujoco]"`). The figures in
docs/benchmarks.md come from this script. ``--runs`` measures trained runs instead (e.g. the zoo's
``--out`` directories): each run directory is one row. For a continuous action, each backend's row
also gives verify's float64 reference: the training cell's, ONNX's float32 reference evaluator's and
the backend's distance from the exported graph evaluated in float64.
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("GLOG_v", "3")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests"))  # spaces_envs: the test envs (registered on import)

TEST_ENV = """algorithm: ppo
seed: 0
total_timesteps: {steps}
env:
  id: {env_id}
  n_envs: 4
{extra}policy:
  net_arch: [64, 64]
algo:
  n_steps: 64
  batch_size: 128
  n_epochs: 2
eval:
  freq: 0
  episodes: 1
"""
SHORT = ["--set", "eval.freq=0", "--set", "eval.episodes=1"]
KINDS = {
    "ppo CartPole-v1 (Discrete)": ("ppo/CartPole-v1", 4096, []),
    "ppo Pendulum-v1 (Box, normalized)": ("ppo/Pendulum-v1", 4096, []),
    "sac Pendulum-v1": ("sac/Pendulum-v1", 600, []),
    "td3 Pendulum-v1": ("td3/Pendulum-v1", 600, []),
    "ppo FrozenLake-v1 (Discrete obs)": ("ppo/FrozenLake-v1", 4096, []),
    "ppo CartPoleNoVel-v1 LSTM (recurrent)": ("ppo/CartPoleNoVel-v1-lstm", 2048, []),
    "ppo MultiSensorReach-v0 (Dict + camera)": ("ppo/MultiSensorReach-v0", 2048, []),
    "ppo Dict obs (test env)": ("MsrlTestDict-v0", 1024, ""),
    "ppo MultiDiscrete (test env)": ("MsrlTestMultiDiscrete-v0", 1024, ""),
    "ppo MultiBinary (test env)": ("MsrlTestMultiBinary-v0", 1024, ""),
    "ppo uint8 frames, stack 2, repeat 2 (test env)": ("MsrlTestDot-v0", 1024, "  frame_stack: 2\n  max_and_skip: 2\n"),
    "ppo CartPole-v1 population member (--seeds 0-1)": ("ppo/CartPole-v1", 4096, ["--seeds", "0-1"]),
}
SHIPPED = {  # the other shipped configs (--shipped): the atari and mujoco extras
    "ppo Breakout-v5 (84x84 frames, 4 stacked)": ("ppo/Breakout-v5", 1024, []),
    "ppo Pendulum-v1 gSDE": ("ppo/Pendulum-v1-gsde", 2048, []),
    "ppo PendulumNoVel-v1 LSTM (recurrent, gSDE)": ("ppo/PendulumNoVel-v1-lstm", 2048, []),
    "ppo InvertedPendulum-v5": ("ppo/InvertedPendulum-v5", 2048, []),
    "ppo HalfCheetah-v5": ("ppo/HalfCheetah-v5", 2048, []),
    "sac HalfCheetah-v5": ("sac/HalfCheetah-v5", 600, ["--set", "algo.learning_starts=100"]),
    "td3 HalfCheetah-v5": ("td3/HalfCheetah-v5", 600, ["--set", "algo.learning_starts=100"]),
}


def train(name, spec, workdir):
    from msrl_consistent.cli import main
    config, steps, extra = spec
    run = os.path.join(workdir, name.split(" (")[0].replace(" ", "_"))
    if isinstance(extra, str):  # a test env: its config written here
        import spaces_envs  # noqa: F401
        path = run + ".yaml"
        with open(path, "w") as fh:
            fh.write(TEST_ENV.format(steps=steps, env_id=config, extra=extra))
        config, extra = path, []
    if not os.path.isdir(run):
        assert main(["train", config, "--total-timesteps", str(steps), "--run-dir", run, "--quiet", *SHORT, *extra]) == 0
    return os.path.join(run, "seed1") if "--seeds" in extra else run


def measure(run, out, episodes=3):
    from msrl_consistent.export.exporter import export_run
    from msrl_consistent.export.verify import verify_export
    t0 = time.perf_counter()
    m = export_run(run, out, formats=["mindir", "onnx", "lite", "om"], preflight_only=True, force=True)
    row = {"export_seconds": round(time.perf_counter() - t0, 1), "lite_convert_seconds": m.export.conversion["lite"]["seconds"],
           "lite_rewrites": {k: len(v) for k, v in m.export.conversion["lite"]["onnx_rewrites"].items() if v},
           "atc_preflight": m.export.conversion["atc_preflight"]["passed"],
           "atc_float16_on_device": sorted({f.split()[0] for f in m.export.conversion["atc_preflight"]["float16_on_device"]})}
    for backend in ("lite", "onnxruntime"):
        r = verify_export(out, backend=backend, episodes=episodes)
        g = r["golden"]
        row[backend] = {"passed": r["passed"], "golden": g.get("count"),
                        **{k: g[k] for k in ("agreement", "max_abs_error", "max_h_error", "max_c_error") if k in g},
                        "identical_episodes": (r["rollouts"] or {}).get("identical_episodes")}
        if "float64_reference" in g and "skipped" not in g["float64_reference"]:
            row[backend]["float64_reference"] = g["float64_reference"]
    return row


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--workdir", default=None)
    p.add_argument("--out", default=None, help="write the rows as JSON here")
    p.add_argument("--shipped", action="store_true", help="also every other shipped config (atari and mujoco extras)")
    p.add_argument("--only", nargs="+", default=None, metavar="TEXT",
                   help="only the kinds whose name contains one of these (e.g. sac td3)")
    p.add_argument("--runs", nargs="+", default=None, metavar="RUN_DIR", help="measure these trained runs instead")
    args = p.parse_args()
    workdir = args.workdir or tempfile.mkdtemp(prefix="msrl-lite-kinds-")
    rows = {}
    kinds = {**KINDS, **(SHIPPED if args.shipped else {})}
    if args.runs:
        kinds = {os.path.basename(os.path.normpath(r)): r for r in args.runs}
    for name, spec in kinds.items():
        if args.only and not any(t in name for t in args.only):
            continue
        run = spec if args.runs else train(name, spec, workdir)
        # Breakout: the golden set only; an untrained policy never presses FIRE, its episodes last 27,000 steps
        rows[name] = measure(run, os.path.join(workdir, "exports", str(len(rows))),
                             episodes=0 if "Breakout" in name else 3)
        print(json.dumps({name: rows[name]}), flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"date": time.strftime("%Y-%m-%d"), "rows": rows}, fh, indent=1)
    print("\n| export kind | Lite: golden set | ONNX Runtime: golden set | Lite rollouts identical | ATC pre-flight |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in rows.items():
        def cell(g):
            action = f"{g['agreement']:.4f} agree" if "agreement" in g else f"max error {g['max_abs_error']:.2g}"
            ref = g.get("float64_reference")
            if ref and "max_abs_error" in ref["backend"]:  # from float64: training cell / float32 reference / backend
                action += (f" (from float64: {ref['training_cell']['max_abs_error']:.2g} / "
                           f"{ref['float32_reference']['max_abs_error']:.2g} / {ref['backend']['max_abs_error']:.2g})")
            return action + (f"; h {g['max_h_error']:.2g}, c {g['max_c_error']:.2g}" if "max_h_error" in g else "")
        pre = "pass" + (f" ({', '.join(r['atc_float16_on_device'])} in float16)" if r["atc_float16_on_device"] else "")
        rollouts = "-" if r["lite"]["identical_episodes"] is None else f"{r['lite']['identical_episodes']}/3"
        print(f"| {name} | {cell(r['lite'])} | {cell(r['onnxruntime'])} | {rollouts} | "
              f"{pre if r['atc_preflight'] else 'refused'} |")


if __name__ == "__main__":
    main()
