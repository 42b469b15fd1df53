"""The zoo: train every shipped config on a few seeds, evaluate each run, compare with a threshold.

    python benchmarks/zoo.py [--seeds N] [--configs ppo/CartPole-v1 ...] [--budget full|short]
                             [--jobs J] [--json FILE] [--out DIR] [--write-docs] [--sb3]
                             [--thresholds FILE]   # another budgets/thresholds file (tests)

Why: one command that says, for every config in configs/ (`msrl configs`), whether it still
learns what docs/benchmarks.md says it learns, and how long it takes here. Each run is the command
a user types, in its own process, timed from outside (start-up, imports, compilation included):

    msrl train CONFIG --seed S --run-dir DIR [--total-timesteps T] --quiet --set eval.freq=0 --set eval.episodes=1
    msrl eval DIR --episodes E --seed 1000 --json

The training's own evaluations are switched off (periodic) or cut to one episode (the closing
one; eval.episodes must be >= 1) since the zoo evaluates afterwards: E deterministic episodes
seeded 1000..1000+E-1 (the seeds of ppo_acceptance.py and offpolicy_pendulum.py), the same for
every training seed.

Budgets and thresholds live in benchmarks/zoo_thresholds.yaml, each with its source. "full" is
the config's own total_timesteps, except where that does not fit this machine (HalfCheetah 1M for
PPO, SAC and TD3, Breakout 10M: `full_fits: false`), which run their `short` budget and say so in
the table. Wall time is the training process's (mean over seeds); steps/s is the training
loop's own rate (summary.json). `--budget short` runs every config's short budget: a quick
smoke test that each config trains, evaluates and beats a lenient bound (the thresholds file
says which bounds were measured).
A row passes when the mean over seeds of the per-seed eval returns is >= its threshold; the table
also gives how many seeds are >= the threshold. A run that fails is a "FAIL: ..." row with its
stderr tail; the others continue. Exit status 1 if any row does not pass.

--jobs J runs J trainings at a time (2 cores here: 2 may use the machine best); wall times are
then per run under that concurrency, as the output says.

--sb3 (needs the bench extra: stable_baselines3 importable) adds Stable-Baselines3's eval return
at the same budget and seed with 1 torch thread, through the existing workers: ppo_vs_sb3.py for
the MLP PPO configs (CartPole, FrozenLake, InvertedPendulum, Pendulum, Pendulum gSDE, HalfCheetah;
its episodes are seeded seed + eval.seed_offset + i, 10000 + seed + i, not 1000 + i) and
offpolicy_pendulum.py for sac/* and td3/* (10 episodes seeded 1000 + i). ppo/Breakout-v5 shows "-":
atari_vs_sb3.py's worker reports training-episode returns of seed 0 only, not an evaluation.

Time (2 cores; per-run figures and their load in the thresholds file's comments). The default
zoo runs 11 configs: the seven published budgets that fit take, per seed on a quiet machine
(docs/benchmarks.md), CartPole ~70 s, FrozenLake ~105 s, Pendulum gSDE ~60-80 s, SAC Pendulum
~185 s, TD3 Pendulum ~105-145 s, and (measured at load ~5) InvertedPendulum 234 s, Pendulum
~4x its 96 s at 50k; the four short budgets took 121 s (PPO HalfCheetah), 269 s (SAC), 165 s
(TD3) and 110 s (Breakout) at load ~5, roughly half that alone. With the evaluations
that is ~20 minutes per seed quiet: about 60 minutes at N=3 with --jobs 1 (the seven fitting
budgets alone are ~14 minutes per seed) and, expected rather than measured, 40-45 with
--jobs 2. The single runs measured at load ~5 took about twice their quiet time.
`--budget short --seeds 1` took ~27 minutes at load ~5 (its runs' times are in the comments).
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
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
THRESHOLDS = os.path.join(HERE, "zoo_thresholds.yaml")
DOCS = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- zoo:begin -->", "<!-- zoo:end -->"
EVAL_SEED = 1000
ENV = dict(os.environ, GLOG_v="3")
SB3_PPO = {"ppo/CartPole-v1", "ppo/FrozenLake-v1", "ppo/HalfCheetah-v5", "ppo/InvertedPendulum-v5",
           "ppo/Pendulum-v1", "ppo/Pendulum-v1-gsde"}


def msrl(*args):
    """This interpreter's msrl. The children run in the output directory, so that `-m` does not
    put a source tree in the current directory ahead of PYTHONPATH."""
    return [sys.executable, "-m", "msrl_consistent", *map(str, args)]


def load_thresholds(path=THRESHOLDS):
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def config_steps(name):
    from msrl_consistent.config import shipped_configs

    with open(shipped_configs()[name], encoding="utf-8") as f:
        return int(float(yaml.safe_load(f)["total_timesteps"]))


def plan(entry, budget):
    """(steps or None for the config's own total_timesteps, threshold, budget label, extra --set)."""
    if budget == "short" or not entry.get("full_fits", True):
        s = entry["short"]
        return int(s["steps"]), float(s["threshold"]), f"short: {s['reason']}", list(s.get("set", []))
    return None, float(entry["threshold"]), "full", []


def tail(text, n=400):
    text = " ".join(text.strip().split())
    return text[-n:] if text else "(no stderr)"


def sb3_return(name, seed, steps, episodes):
    """SB3's eval return through the existing workers, or None where none applies."""
    from msrl_consistent.config import shipped_configs

    algo, env_id = name.split("/")
    if algo in ("sac", "td3"):
        import offpolicy_pendulum
        with tempfile.TemporaryDirectory(prefix="zoo-sb3-") as work:
            return offpolicy_pendulum.run_sb3(algo, env_id, steps, seed, work, 1, -1)["mean_return"]
    if name in SB3_PPO:
        import ppo_vs_sb3
        ns = argparse.Namespace(config=shipped_configs()[name], total_timesteps=steps, eval_episodes=episodes)
        return ppo_vs_sb3.run_sb3(ns, seed, 1)["mean_return"]
    return None


def run_one(name, seed, steps, overrides, episodes, out, sb3):
    """One seed: train, evaluate (and SB3). A dict with 'error' set when a step failed."""
    run_dir = os.path.join(out, f"{name.replace('/', '-')}-seed{seed}")
    cmd = msrl("train", name, "--seed", seed, "--run-dir", run_dir, "--quiet",
               "--set", "eval.freq=0", "--set", "eval.episodes=1")
    if steps is not None:
        cmd += ["--total-timesteps", str(steps)]
    for kv in overrides:
        cmd += ["--set", kv]
    r = {"config": name, "seed": seed, "run_dir": run_dir, "error": None, "sb3": None}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, cwd=out)
    r["wall_s"] = time.perf_counter() - t0
    if proc.returncode != 0:
        r.update(error=f"FAIL: msrl train exit code {proc.returncode}", stderr=tail(proc.stderr))
        return r
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as f:
        s = json.load(f)
    r.update(steps=s["num_timesteps"], steps_per_s=s["steps_per_second"])
    proc = subprocess.run(msrl("eval", run_dir, "--episodes", episodes, "--seed", EVAL_SEED, "--json"),
                          capture_output=True, text=True, env=ENV, cwd=out)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        r.update(error=f"FAIL: msrl eval exit code {proc.returncode}", stderr=tail(proc.stderr))
        return r
    r["mean_return"] = json.loads(lines[-1])["mean_return"]
    if sb3:
        try:
            r["sb3"] = sb3_return(name, seed, steps or config_steps(name), episodes)
        except (Exception, SystemExit) as exc:  # the workers raise SystemExit / CalledProcessError
            r["sb3_error"] = f"SB3 failed: {exc}"
    return r


def summarize(name, entry, budget, runs):
    steps, threshold, label, _ = plan(entry, budget)
    ok = [r for r in runs if r["error"] is None]
    rets = [r["mean_return"] for r in ok]
    row = {"config": name, "budget": label, "threshold": threshold, "seeds": [r["seed"] for r in runs],
           "returns": rets, "eval_episodes": entry["eval_episodes"],
           "steps": ok[0]["steps"] if ok else steps or config_steps(name),
           "mean": statistics.mean(rets) if rets else None,
           "std": statistics.stdev(rets) if len(rets) > 1 else None,
           "at_threshold": sum(v >= threshold for v in rets),
           "wall_s": statistics.mean(r["wall_s"] for r in runs),
           "steps_per_s": statistics.mean(r["steps_per_s"] for r in ok) if ok else None,
           "sb3": [r["sb3"] for r in ok if r.get("sb3") is not None],
           "errors": [f"seed {r['seed']}: {r['error']}: {r['stderr']}" for r in runs if r["error"]]
           + [f"seed {r['seed']}: {r['sb3_error']}" for r in runs if r.get("sb3_error")]}
    failed = [r for r in runs if r["error"]]
    row["pass"] = not failed and row["mean"] is not None and row["mean"] >= threshold
    row["verdict"] = (f"{failed[0]['error']} (seed {failed[0]['seed']})" if failed
                      else "pass" if row["pass"] else "below threshold")
    return row


def fmt(v, nd=1):
    return "-" if v is None else f"{v:.{nd}f}"


def table(rows):
    lines = ["| config | budget (steps) | seeds | eval episodes | eval return, mean +- std over seeds | threshold "
             "| seeds >= threshold | pass (mean >= threshold) | SB3, same budget | wall per run (s) | steps/s (training loop) |",
             "|" + " --- |" * 11]
    for r in rows:
        nd = 3 if abs(r["threshold"]) < 10 else 1
        ret = fmt(r["mean"], nd) + ("" if r["std"] is None else f" +- {r['std']:.{nd}f}")
        sb3 = f"{statistics.mean(r['sb3']):.{nd}f}" if r["sb3"] else "-"
        lines.append(f"| {r['config']} | {r['steps']}, {r['budget']} | {len(r['seeds'])} | {r['eval_episodes']} | {ret} "
                     f"| {r['threshold']:g} "
                     f"| {r['at_threshold']}/{len(r['seeds'])} | {r['verdict']} | {sb3} | {fmt(r['wall_s'])} "
                     f"| {fmt(r['steps_per_s'], 0)} |")
    return "\n".join(lines)


def report(rows, args, started, load0):
    load1 = os.getloadavg()
    cmd = "python benchmarks/zoo.py " + " ".join(sys.argv[1:])
    head = [f"`{cmd}`", "",
            f"Run {started:%Y-%m-%d %H:%M} - {datetime.datetime.now():%H:%M}, load average {load0[0]:.2f} at the start, "
            f"{load1[0]:.2f} at the end; trainings at a time: {args.jobs}"
            + (" (wall times are per run under that concurrency)" if args.jobs > 1 else "") + ". Eval: the mean return "
            f"of the deterministic policy over each config's eval episodes, seeded {EVAL_SEED}+; +- is the std over seeds.",
            ""]
    errs = [f"- {r['config']} {e}" for r in rows for e in r["errors"]]
    return "\n".join(head) + "\n" + table(rows) + ("\n\n" + "\n".join(errs) if errs else "") + "\n"


def write_docs(text, path=DOCS):
    with open(path, encoding="utf-8") as f:
        doc = f.read()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"zoo: error: {path} has no {BEGIN} ... {END} section")
    head, rest = doc.split(BEGIN, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + BEGIN + "\n" + text + END + rest.split(END, 1)[1])


def rejudge(args, entries):
    """One table from saved runs (``--json`` files of earlier zoo runs), judged by today's thresholds
    file; a config whose saved runs have another step count than its budget is an error, since a
    threshold belongs to one budget."""
    runs, sources = {}, []
    for path in args.from_json:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
        stamp = datetime.datetime.fromtimestamp(os.path.getmtime(path))
        sources.append(f"`python benchmarks/zoo.py {' '.join(saved['command'][1:])}` (finished {stamp:%Y-%m-%d %H:%M})")
        held = {}
        for r in saved["runs"]:
            held.setdefault(r["config"], {})[r["seed"]] = r
        runs.update(held)  # a later file's runs of a config replace an earlier file's
    rows = []
    for name in args.configs or sorted(runs):
        if name not in entries or name not in runs:
            raise SystemExit(f"zoo: error: no saved runs or no threshold for {name}")
        steps, _, _, _ = plan(entries[name], args.budget)
        saved = [runs[name][k] for k in sorted(runs[name])]
        if steps and any(abs(r["steps"] - steps) > max(0.05 * steps, 4096) for r in saved if r["error"] is None):
            raise SystemExit(f"zoo: error: the saved runs of {name} have {saved[0].get('steps')} steps, "
                             f"its {args.budget} budget is {steps}")
        rows.append(summarize(name, entries[name], args.budget, saved))
    text = ("Runs of " + " and ".join(sources) + ", judged against `benchmarks/zoo_thresholds.yaml` by `python "
            "benchmarks/zoo.py " + " ".join(sys.argv[1:]) + "`.\n\n" + table(rows) + "\n")
    errs = [f"- {r['config']} {e}" for r in rows for e in r["errors"]]
    text += ("\n" + "\n".join(errs) + "\n") if errs else ""
    print(text)
    if args.write_docs:
        write_docs(text)
    return 0 if all(r["pass"] for r in rows) else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="train seeds 0..N-1 (default 3)")
    p.add_argument("--configs", nargs="+", metavar="NAME", help="shipped config names (default: all)")
    p.add_argument("--budget", choices=["full", "short"], default="full")
    p.add_argument("--jobs", type=int, default=1, help="trainings at a time (default 1)")
    p.add_argument("--thresholds", default=THRESHOLDS, help="budgets and thresholds (default: benchmarks/zoo_thresholds.yaml)")
    p.add_argument("--out", help="keep the run directories here (default: a temp dir, removed)")
    p.add_argument("--json", metavar="FILE", help="write the rows and per-seed runs here")
    p.add_argument("--write-docs", action="store_true", help=f"replace the zoo section of {os.path.relpath(DOCS, ROOT)}")
    p.add_argument("--sb3", action="store_true", help="add SB3's eval return where a worker exists (bench extra)")
    p.add_argument("--from-json", nargs="+", metavar="FILE",
                   help="train nothing: judge the runs saved by earlier --json FILEs against the thresholds file "
                        "(a config's runs come from the last FILE holding it) and print / --write-docs one table")
    args = p.parse_args(argv)
    entries = load_thresholds(args.thresholds)
    if args.from_json:
        return rejudge(args, entries)
    names = args.configs or sorted(entries)
    unknown = [n for n in names if n not in entries]
    if unknown or args.seeds < 1 or args.jobs < 1:
        p.error(f"unknown config(s) {unknown} (known: {', '.join(sorted(entries))})" if unknown
                else "--seeds and --jobs must be >= 1")
    if args.sb3:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            p.error("--sb3 needs stable_baselines3 (pip install -e .[bench])")
    started, load0 = datetime.datetime.now(), os.getloadavg()
    tmp = None if args.out else tempfile.TemporaryDirectory(prefix="msrl-zoo-")
    out = os.path.abspath(args.out or tmp.name)
    os.makedirs(out, exist_ok=True)
    tasks = [(n, s) for n in names for s in range(args.seeds)]
    runs = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futs = {}
        for n, s in tasks:
            steps, _, _, sets = plan(entries[n], args.budget)
            futs[pool.submit(run_one, n, s, steps, sets, entries[n]["eval_episodes"], out, args.sb3)] = (n, s)
        for fut in concurrent.futures.as_completed(futs):
            n, s = futs[fut]
            try:
                r = fut.result()
            except Exception as exc:  # a bug or an unreadable file: a failed row, not a failed zoo
                r = {"config": n, "seed": s, "error": f"FAIL: {type(exc).__name__}", "stderr": str(exc), "wall_s": 0.0}
            runs[(n, s)] = r
            print(f"# {r['config']} seed {r['seed']}: {r['error'] or 'return %.3f' % r['mean_return']}, "
                  f"{r['wall_s']:.0f} s", file=sys.stderr, flush=True)
    rows = [summarize(n, entries[n], args.budget, [runs[(n, s)] for s in range(args.seeds)]) for n in names]
    text = report(rows, args, started, load0)
    print("\n" + text)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"command": sys.argv, "rows": rows, "runs": list(runs.values())}, f, indent=2)
    if args.write_docs:
        write_docs(text)
    if tmp is not None:
        tmp.cleanup()
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
