"""PPO acceptance: train seeds with `msrl train`, evaluate with `msrl eval --json`, export and
verify each run (MindIR bit-identity, ONNX Runtime), and print a markdown table.

    python benchmarks/ppo_acceptance.py configs/ppo/CartPole-v1.yaml --seeds 0 1 2 3 4 --threshold 475
    python benchmarks/ppo_acceptance.py configs/ppo/Pendulum-v1.yaml --seeds 0 1 2 3 4 --threshold -250

Runs go to --out (default runs/acceptance); each command is the one a user would type.
"""
import argparse
import json
import os
import subprocess
import sys


def run(cmd):
    env = dict(os.environ, GLOG_v="3")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("config")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--threshold", type=float, required=True)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--verify-episodes", type=int, default=20)
    p.add_argument("--out", default="runs/acceptance")
    p.add_argument("--no-export", action="store_true")
    args = p.parse_args()
    msrl = [sys.executable, "-m", "msrl_consistent"]
    name = os.path.splitext(os.path.basename(args.config))[0]
    algo = os.path.basename(os.path.dirname(args.config))
    rows = []
    for seed in args.seeds:
        run_dir = os.path.join(args.out, f"{algo}-{name}-seed{seed}")
        if not os.path.isfile(os.path.join(run_dir, "summary.json")):
            rc, out, err = run(msrl + ["train", args.config, "--seed", str(seed), "--run-dir", run_dir, "--quiet"])
            if rc != 0:
                print(err, file=sys.stderr)
                raise SystemExit(f"training seed {seed} failed")
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        rc, out, err = run(msrl + ["eval", run_dir, "--episodes", str(args.episodes), "--seed", "1000", "--json"])
        ev = json.loads(out)
        row = {"seed": seed, "mean_return": ev["mean_return"], "std_return": ev["std_return"],
               "steps": summary["num_timesteps"], "wall_s": summary["wall_time_s"],
               "steps_per_s": summary["steps_per_second"], "sha256": summary["params_sha256"][:12]}
        if not args.no_export:
            exp = os.path.join(run_dir, "export")
            if not os.path.isdir(exp):
                rc, out, err = run(msrl + ["export", run_dir, "--out", exp, "--format", "mindir,onnx"])
                if rc != 0:
                    raise SystemExit(f"export failed: {err}")
            for backend in ("mindspore", "onnxruntime"):
                rc, out, err = run(msrl + ["verify", exp, "--backend", backend, "--episodes",
                                           str(args.verify_episodes), "--json"])
                rep = json.loads(out)
                g, r = rep["golden"], rep["rollouts"]
                row[f"{backend}_pass"] = rep["passed"]
                row[f"{backend}_golden"] = (f"agree {g['agreement']:.4f}" if "agreement" in g
                                            else f"max abs {g['max_abs_error']:.2e}")
                row[f"{backend}_identical_rollouts"] = f"{r['identical_episodes']}/{r['episodes']}"
        rows.append(row)
        print(json.dumps(row), flush=True)
    ok = sum(r["mean_return"] >= args.threshold for r in rows)
    print(f"\n{algo} {name}: {ok}/{len(rows)} seeds reach mean eval return >= {args.threshold} "
          f"over {args.episodes} episodes\n")
    cols = list(rows[0].keys())
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{v:.2f}" if isinstance(v, float) else str(v) for v in r.values()) + " |")


if __name__ == "__main__":
    main()
