"""Does the multi-input policy need both sensors? MultiSensorReach-v0 trained three ways.

    python benchmarks/multi_sensor.py [--seeds 5] [--jobs 2] [--episodes 100] [--json FILE] [--out DIR]

The shipped config (configs/ppo/MultiSensorReach-v0.yaml) trained on the same task seen three
ways, every other value equal: the Dict of both sensors (a CNN on the camera key beside the
position key), the camera alone (MultiSensorReachCamera-v0, a CNN) and the position alone
(MultiSensorReachPosition-v0, an MLP). Each run is the zoo's (benchmarks/zoo.py run_one: `msrl
train` in its own process, then `msrl eval RUN --episodes E --seed 1000 --json`). Then seed 0's
Dict run is exported (MindIR + ONNX) and verified on both backends (golden set and 20 rollouts),
and the report's agreement and rollout counts are kept. Optimal play returns 1.27 on average
(1 + 0.1 x the initial distance); the table gives every seed's return and the mean wall time per
run under --jobs concurrency.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import zoo  # noqa: E402  (run_one, msrl, ENV)

CONFIG = "ppo/MultiSensorReach-v0"
VIEWS = (("camera + position (Dict, multi-input)", "MultiSensorReach-v0"),
         ("camera alone (CNN)", "MultiSensorReachCamera-v0"),
         ("position alone (MLP)", "MultiSensorReachPosition-v0"))


def export_and_verify(run_dir: str, out: str) -> dict:
    """Export a run (MindIR + ONNX) and verify it on mindspore and onnxruntime: the reports' figures."""
    export_dir = os.path.join(out, "export")
    subprocess.run(zoo.msrl("export", run_dir, "--out", export_dir, "--format", "mindir,onnx"), check=True,
                   capture_output=True, env=zoo.ENV, cwd=out)
    found = {}
    for backend in ("mindspore", "onnxruntime"):
        proc = subprocess.run(zoo.msrl("verify", export_dir, "--backend", backend, "--episodes", 20, "--json"),
                              capture_output=True, text=True, env=zoo.ENV, cwd=out)
        rep = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1])
        found[backend] = {"exit": proc.returncode, "passed": rep["passed"],
                          "golden_agreement": rep["golden"]["agreement"],
                          "golden_bit_identical": rep["golden"]["bit_identical"],
                          "identical_episodes": rep["rollouts"]["identical_episodes"],
                          "episodes": rep["rollouts"]["episodes"]}
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--episodes", type=int, default=100)
    ap.add_argument("--json", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="multi-sensor-")
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for label, env_id in VIEWS:
            view_out = os.path.join(out, env_id)
            os.makedirs(view_out, exist_ok=True)
            for seed in range(args.seeds):
                jobs.append((label, pool.submit(zoo.run_one, CONFIG, seed, None, [f"env.id={env_id}"],
                                                args.episodes, view_out, False)))
    rows = {}
    for label, fut in jobs:
        rows.setdefault(label, []).append(fut.result())
    result = {"date": datetime.date.today().isoformat(), "config": CONFIG, "seeds": args.seeds,
              "jobs": args.jobs, "eval_episodes": args.episodes, "views": {}}
    print(f"| sensors | returns (seeds 0-{args.seeds - 1}) | mean | wall per run |")
    print("| --- | --- | --- | --- |")
    for label, env_id in VIEWS:
        runs = rows[label]
        bad = [r for r in runs if r["error"]]
        if bad:
            print(f"| {label} | {bad[0]['error']}: {bad[0].get('stderr', '')} | | |")
            continue
        rets = [r["mean_return"] for r in runs]
        wall = statistics.mean(r["wall_s"] for r in runs)
        result["views"][env_id] = {"label": label, "returns": rets, "mean": statistics.mean(rets), "wall_s": wall}
        print(f"| {label} | {', '.join(f'{v:.3f}' for v in rets)} | {statistics.mean(rets):.3f} | {wall:.1f} s |")
    both = rows[VIEWS[0][0]][0]
    if both["error"] is None:
        result["export_seed0"] = export_and_verify(both["run_dir"], out)
        for backend, v in result["export_seed0"].items():
            print(f"{backend}: golden agreement {v['golden_agreement']}, bit-identical {v['golden_bit_identical']}, "
                  f"{v['identical_episodes']}/{v['episodes']} rollouts identical, passed {v['passed']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
