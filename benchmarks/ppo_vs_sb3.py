"""PPO side by side: msrl vs Stable-Baselines3, same hyperparameters, whole-process wall time.

    pip install torch==2.13.0                       # first: the CPU wheel on this disk
    pip install stable-baselines3 sb3-contrib "numpy<2"
    python benchmarks/ppo_vs_sb3.py --seeds 0 --total-timesteps 100000
    python benchmarks/ppo_vs_sb3.py --config configs/ppo/Pendulum-v1.yaml --seeds 0 --total-timesteps 200000
    python benchmarks/ppo_vs_sb3.py --seeds 0 1 --repeats 2 --json runs/ppo_vs_sb3.json
    python benchmarks/ppo_vs_sb3.py --pipelines sequential overlap     # msrl with each env.pipeline
    python benchmarks/ppo_vs_sb3.py --config configs/ppo/MultiSensorReach-v0.yaml --total-timesteps 49152

Each training is its own process, one after the other, timed from outside (Python start-up,
imports and graph compilation included):
    python benchmarks/ppo_vs_sb3.py --worker sb3 --threads 1 --config C --seed S --total-timesteps N
    python benchmarks/ppo_vs_sb3.py --worker sb3 --threads 0 ...   # torch's default thread count
    msrl train C --seed S --total-timesteps N --run-dir DIR --quiet --set eval.episodes=10 --set eval.freq=0
The SB3 hyperparameters are read from C's env/policy/algo sections (yaml.safe_load); a config
with policy.recurrent runs sb3-contrib's RecurrentPPO (MlpLstmPolicy, separate actor and critic
LSTMs of policy.lstm_hidden_size units); a Dict observation space runs SB3's MultiInputPolicy
with msrl's CNN for each image key (the `small` or `nature` trunk msrl's policy.cnn picks, in
SB3's CombinedExtractor layout: each key's features concatenated in sorted key order). Both
sides end with the same evaluation: deterministic episodes reset with seeds
seed + eval.seed_offset + i (msrl's final eval; SB3's evaluate_policy on seeded envs).
msrl's periodic evaluations are off (eval.freq=0) unless --periodic-eval, since SB3 does none.
--repeats K alternates the order: sb3-1, sb3-N, msrl, then msrl, sb3-N, sb3-1, ...
msrl's phase breakdown (summary.json phase_seconds, startup_s) is printed when present.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ACTIVATIONS = {"tanh": "Tanh", "relu": "ReLU", "elu": "ELU", "gelu": "GELU"}


def load_cfg(path):
    import yaml

    with open(path) as f:
        cfg = yaml.safe_load(f)
    if not isinstance(cfg, dict) or cfg.get("algorithm", "ppo") != "ppo":
        raise SystemExit(f"ppo_vs_sb3: error: {path} is not a PPO config")
    return cfg


def sb3_worker(args):
    t0 = time.perf_counter()
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3 import __version__ as sb3_version
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize
    from torch import nn

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    cfg = load_cfg(args.config)
    env, pol, algo = cfg.get("env", {}), cfg.get("policy", {}), cfg.get("algo", {})
    if "NoVel" in env.get("id", ""):
        import msrl_consistent.envs.masked  # noqa: F401  (registers the velocity-masked tasks; gymnasium only)
    if env.get("id", "").startswith("MultiSensorReach"):
        import msrl_consistent.envs.sensors  # noqa: F401  (registers the several-sensor task; gymnasium only)
    algo_cls, policy_name = PPO, "MlpPolicy"
    if pol.get("recurrent"):  # sb3-contrib's RecurrentPPO, its default layout: separate actor and critic LSTMs
        from sb3_contrib import RecurrentPPO
        algo_cls, policy_name = RecurrentPPO, "MlpLstmPolicy"
    if pol.get("shared"):
        raise SystemExit("ppo_vs_sb3: error: policy.shared has no SB3 2.x counterpart")

    def sched(value, kind):
        v = float(value)
        return (lambda progress_remaining: progress_remaining * v) if kind == "linear" else v

    env_kwargs = {"max_episode_steps": int(env["max_episode_steps"])} if env.get("max_episode_steps") else None
    seed = args.seed
    venv = make_vec_env(env.get("id", "CartPole-v1"), n_envs=int(env.get("n_envs", 1)), seed=seed,
                        vec_env_cls=DummyVecEnv, env_kwargs=env_kwargs)
    clip = float(env.get("normalize_obs_clip", 10.0))
    if env.get("normalize_obs") or env.get("normalize_reward"):
        # RL-Zoo's normalize: true is VecNormalize (obs and reward; the reward's gamma is the algorithm's)
        venv = VecNormalize(venv, norm_obs=bool(env.get("normalize_obs")), norm_reward=bool(env.get("normalize_reward")),
                            clip_obs=clip, clip_reward=float(env.get("normalize_reward_clip", 10.0)),
                            gamma=float(algo.get("gamma", 0.99)))
    net = [int(x) for x in pol.get("net_arch", [64, 64])]
    policy_kwargs = {"net_arch": {"pi": net, "vf": [int(x) for x in pol.get("critic_arch") or net]},
                     "activation_fn": getattr(nn, ACTIVATIONS[pol.get("activation", "tanh")]),
                     "ortho_init": bool(pol.get("ortho_init", True)),
                     "optimizer_kwargs": {"eps": float(algo.get("adam_eps", 1e-5))}}
    if "log_std_init" in pol:
        policy_kwargs["log_std_init"] = float(pol["log_std_init"])
    from gymnasium import spaces
    if isinstance(venv.observation_space, spaces.Dict):
        policy_name = "MultiInputPolicy"
        policy_kwargs.update(features_extractor_class=msrl_cnn_extractor(pol.get("cnn", "auto")))
    if pol.get("recurrent"):
        policy_kwargs.update(lstm_hidden_size=int(pol.get("lstm_hidden_size", 256)), enable_critic_lstm=True,
                             shared_lstm=False)
    opt = {k: algo[k] for k in ("clip_range_vf", "target_kl") if algo.get(k) is not None}
    if algo.get("use_sde"):
        opt["use_sde"] = True
        opt["sde_sample_freq"] = int(algo.get("sde_sample_freq", -1))
    model = algo_cls(policy_name, venv, learning_rate=sched(algo.get("learning_rate", 3e-4), algo.get("lr_schedule")),
                n_steps=int(algo.get("n_steps", 2048)), batch_size=int(algo.get("batch_size", 64)),
                n_epochs=int(algo.get("n_epochs", 10)), gamma=float(algo.get("gamma", 0.99)),
                gae_lambda=float(algo.get("gae_lambda", 0.95)),
                clip_range=sched(algo.get("clip_range", 0.2), algo.get("clip_range_schedule")),
                normalize_advantage=bool(algo.get("normalize_advantage", True)),
                ent_coef=float(algo.get("ent_coef", 0.0)), vf_coef=float(algo.get("vf_coef", 0.5)),
                max_grad_norm=float(algo.get("max_grad_norm", 0.5)), policy_kwargs=policy_kwargs,
                seed=seed, device="cpu", verbose=0, **opt)
    phases = {"rollout": 0.0, "update": 0.0}  # SB3's two phases, timed around its own methods

    def timer(name, f):
        def timed(*a, **k):
            t = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                phases[name] += time.perf_counter() - t
        return timed

    model.collect_rollouts = timer("rollout", model.collect_rollouts)
    model.train = timer("update", model.train)
    t1 = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps)
    t2 = time.perf_counter()
    minibatches = model._n_updates * -(-model.n_steps * model.n_envs // model.batch_size)  # epochs x minibatches
    steps = model.num_timesteps // model.n_envs
    n_eval = args.eval_episodes
    base = seed + int(cfg.get("eval", {}).get("seed_offset", 10000))
    eval_env = make_vec_env(env.get("id", "CartPole-v1"), n_envs=n_eval, vec_env_cls=DummyVecEnv,
                            env_kwargs=env_kwargs)
    if env.get("normalize_obs"):
        eval_env = VecNormalize(eval_env, training=False, norm_obs=True, norm_reward=False, clip_obs=clip)
        eval_env.obs_rms = venv.obs_rms.copy()
    eval_env.seed(base)  # env i is reset with base + i: one episode each (n_envs == episodes)
    returns, _ = evaluate_policy(model, eval_env, n_eval_episodes=n_eval, deterministic=True, return_episode_rewards=True)
    t3 = time.perf_counter()
    print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__, "sb3": sb3_version,
                      "setup_s": t1 - t0, "train_s": t2 - t1, "eval_s": t3 - t2,
                      "steps": int(model.num_timesteps), "steps_per_second": model.num_timesteps / (t2 - t1),
                      "mean_return": float(sum(returns) / len(returns)), "returns": [float(r) for r in returns],
                      "phase_seconds": phases, "update_ms_per_minibatch": phases["update"] / minibatches * 1e3,
                      "rollout_ms_per_vector_step": phases["rollout"] / steps * 1e3}))


def msrl_cnn_extractor(cnn):
    """SB3's CombinedExtractor with msrl's CNN trunk on each image key (networks/image.py
    CNN_LAYERS: 'small' below 64x64 pixels, else 'nature'; ReLU after every conv, flatten, Linear,
    ReLU) and the other keys flattened, concatenated in the Dict's sorted key order."""
    import numpy as np
    import torch
    from stable_baselines3.common.preprocessing import is_image_space
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from torch import nn

    layers_of = {"nature": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), 512), "small": (((16, 4, 4), (32, 2, 2)), 128)}

    class Extractor(BaseFeaturesExtractor):
        def __init__(self, observation_space):
            parts, total = {}, 0
            for key, sub in observation_space.spaces.items():
                if is_image_space(sub):  # channels first here (SB3's VecTransposeImage)
                    c, h, w = sub.shape
                    layers, feat = layers_of[cnn if cnn != "auto" else ("nature" if min(h, w) >= 64 else "small")]
                    mods, ch = [], c
                    for out, k, st in layers:
                        mods += [nn.Conv2d(ch, out, k, st), nn.ReLU()]
                        ch = out
                    trunk = nn.Sequential(*mods, nn.Flatten())
                    with torch.no_grad():
                        n_flat = trunk(torch.zeros(1, c, h, w)).shape[1]
                    parts[key] = nn.Sequential(trunk, nn.Linear(n_flat, feat), nn.ReLU())
                    total += feat
                else:
                    parts[key] = nn.Flatten()
                    total += int(np.prod(sub.shape))
            super().__init__(observation_space, features_dim=total)
            self.extractors = nn.ModuleDict(parts)

        def forward(self, observations):
            return torch.cat([self.extractors[k](observations[k]) for k in self.extractors], dim=1)

    return Extractor


def run(label, cmd, env=None):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        raise SystemExit(f"ppo_vs_sb3: error: {label} exited {proc.returncode}: {last}")
    return wall, proc.stdout


def run_sb3(args, seed, threads):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "sb3", "--threads", str(threads), "--config",
           args.config, "--seed", str(seed), "--total-timesteps", str(args.total_timesteps),
           "--eval-episodes", str(args.eval_episodes)]
    wall, out = run(f"SB3 worker (threads {threads}, seed {seed})", cmd)
    lines = [ln for ln in out.splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"ppo_vs_sb3: error: SB3 worker (threads {threads}, seed {seed}) printed no JSON line")
    r = json.loads(lines[-1])
    return dict(r, side=f"sb3-{threads or 'default'}", seed=seed, wall_s=wall)


def run_msrl(args, seed, work, pipeline="sequential"):
    run_dir = tempfile.mkdtemp(prefix=f"msrl-seed{seed}-{pipeline}-", dir=work)
    exe = os.path.join(os.path.dirname(sys.executable), "msrl")
    cmd = [exe] if os.path.isfile(exe) else [shutil.which("msrl") or "msrl"]
    cmd += ["train", args.config, "--seed", str(seed), "--total-timesteps", str(args.total_timesteps),
            "--run-dir", run_dir, "--quiet", "--set", f"eval.episodes={args.eval_episodes}",
            "--set", f"env.pipeline={pipeline}"]
    if not args.periodic_eval:
        cmd += ["--set", "eval.freq=0"]
    wall, _ = run(f"msrl train (seed {seed})", cmd, env=dict(os.environ, GLOG_v="3"))
    with open(os.path.join(run_dir, "summary.json")) as f:
        s = json.load(f)
    r = {"side": MSRL[pipeline], "seed": seed, "wall_s": wall, "run_dir": run_dir, "train_s": s.get("wall_time_s"),
         "steps": s.get("num_timesteps"), "steps_per_second": s.get("steps_per_second"),
         "params_sha256": s.get("params_sha256"), "mean_return": s.get("final_eval", {}).get("mean_return")}
    for k in ("phase_seconds", "startup_s", "first_update_s", "n_updates"):
        if k in s:
            r[k] = s[k]
    n_envs = int(cfg_get(args.config, "env", "n_envs", 1))
    ph = s.get("phase_seconds") or {}
    if s.get("n_updates") and s.get("first_update_s") is not None and "update" in ph:
        c = load_cfg(args.config)["algo"]
        first_mbs = int(c.get("n_epochs", 10)) * -(-int(c.get("n_steps", 2048)) * n_envs // int(c.get("batch_size", 64)))
        later = max(s["n_updates"] - first_mbs, 1)  # the first phase includes graph compilation
        r["update_ms_per_minibatch"] = (ph["update"] - s["first_update_s"]) / later * 1e3
    if "acting" in ph and s.get("num_timesteps"):
        r["acting_ms_per_vector_step"] = ph["acting"] / (s["num_timesteps"] / n_envs) * 1e3
    return r


MSRL = {"sequential": "msrl", "overlap": "msrl-overlap"}
"""msrl's side per env.pipeline."""


def cfg_get(path, section, key, default):
    return (load_cfg(path).get(section) or {}).get(key, default)


def fmt(v, nd=1):
    return "n/a" if v is None else f"{v:.{nd}f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=os.path.join("configs", "ppo", "CartPole-v1.yaml"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--total-timesteps", type=int, default=100000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--periodic-eval", action="store_true", help="keep the config's eval.freq for msrl")
    p.add_argument("--pipelines", nargs="+", choices=sorted(MSRL), default=["sequential"],
                   help="msrl's env.pipeline settings (one msrl run each)")
    p.add_argument("--json", metavar="OUT", help="write the raw results here")
    p.add_argument("--workdir", help="where msrl run dirs go (default: a new temp dir)")
    p.add_argument("--worker", choices=["sb3"], help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if not os.path.isfile(args.config):
        raise SystemExit(f"ppo_vs_sb3: error: config {args.config} not found")
    if args.worker:
        return sb3_worker(args)
    cfg = load_cfg(args.config)
    work = args.workdir or tempfile.mkdtemp(prefix="ppo-vs-sb3-")
    os.makedirs(work, exist_ok=True)
    jobs = {"sb3-1": lambda s: run_sb3(args, s, 1), "sb3-default": lambda s: run_sb3(args, s, 0)}
    for pipeline in args.pipelines:
        jobs[MSRL[pipeline]] = lambda s, p=pipeline: run_msrl(args, s, work, p)
    sides = [MSRL[p] for p in args.pipelines]
    results, groups = [], []
    for rep in range(args.repeats):
        for seed in args.seeds:
            order = list(jobs) if len(groups) % 2 == 0 else list(reversed(jobs))
            group = {"seed": seed, "repeat": rep, "order": order}
            for name in order:
                r = dict(jobs[name](seed), repeat=rep)
                group[name] = r
                results.append(r)
                print(f"# {name} seed {seed} rep {rep}: {r['wall_s']:.1f} s, return {fmt(r['mean_return'])}",
                      file=sys.stderr, flush=True)
            groups.append(group)
    report(args, cfg, groups, results, sides, work)


def report(args, cfg, groups, results, sides, work):  # noqa: C901 - one table after another
    n_thr = groups[0]["sb3-default"]["threads"]
    work_name = f"{cfg.get('env', {}).get('id', '?')} {args.total_timesteps} steps"
    print(f"\nPPO {work_name}, whole-process wall time (s), eval = mean return over {args.eval_episodes} "
          f"deterministic episodes; torch {groups[0]['sb3-1']['torch']}, SB3 {groups[0]['sb3-1']['sb3']}, "
          f"{os.cpu_count()} CPUs\n")
    print(f"| work | seed | SB3 1 thread | SB3 default threads ({n_thr}) | "
          + " | ".join(f"{m} | {m} / faster SB3" for m in sides)
          + f" | eval SB3 1 thread | eval SB3 {n_thr} threads | " + " | ".join(f"eval {m}" for m in sides) + " |")
    print("|" + " --- |" * (6 + 3 * len(sides)))
    for g in groups:
        a, b = g["sb3-1"], g["sb3-default"]
        for m in sides:
            g[f"ratio {m}"] = g[m]["wall_s"] / min(a["wall_s"], b["wall_s"])
        g["ratio"] = g[f"ratio {sides[0]}"]
        label = work_name if args.repeats == 1 else f"{work_name}, rep {g['repeat']}"
        print(f"| {label} | {g['seed']} | {a['wall_s']:.1f} | {b['wall_s']:.1f} | "
              + " | ".join(f"{g[m]['wall_s']:.1f} | {g[f'ratio {m}']:.2f}" for m in sides)
              + f" | {fmt(a['mean_return'])} | {fmt(b['mean_return'])} | "
              + " | ".join(fmt(g[m]["mean_return"]) for m in sides) + " |")
    print("\nIn-process training time (s) and steps/s (SB3: learn(); msrl: summary.json wall_time_s):\n")
    print("| seed | side | process wall | training | steps/s | outside training |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        rest = None if r.get("train_s") is None else r["wall_s"] - r["train_s"]
        print(f"| {r['seed']} | {r['side']} | {r['wall_s']:.1f} | {fmt(r.get('train_s'))} | "
              f"{fmt(r.get('steps_per_second'), 0)} | {fmt(rest)} |")
    phased = [r for r in results if r["side"] in sides and ("phase_seconds" in r or "startup_s" in r)]
    if phased:
        keys = ["update", "acting", "eval", "env", "other"]
        keys += sorted({k for r in phased for k in (r.get("phase_seconds") or {})} - set(keys))
        print("\nmsrl phases (s, summary.json; startup = process start to the loop, first update includes "
              "graph compilation; per-minibatch and per-step costs exclude the first update):\n")
        print("| seed | rep | side | startup | first update | " + " | ".join(keys)
              + " | update ms/minibatch | acting ms/vector step |")
        print("|" + " --- |" * (len(keys) + 7))
        for r in phased:
            ph = r.get("phase_seconds") or {}
            print(f"| {r['seed']} | {r['repeat']} | {r['side']} | {fmt(r.get('startup_s'))} | "
                  f"{fmt(r.get('first_update_s'))} | "
                  + " | ".join(fmt(ph.get(k)) for k in keys)
                  + f" | {fmt(r.get('update_ms_per_minibatch'), 2)} | {fmt(r.get('acting_ms_per_vector_step'), 3)} |")
    else:
        print("\n(msrl summary.json has no phase_seconds/startup_s yet: no phase breakdown)")
    sb3_phased = [r for r in results if r["side"].startswith("sb3") and "phase_seconds" in r]
    if sb3_phased:
        print("\nSB3 phases (s, around its collect_rollouts and train; rollout = acting + env, msrl's acting + env; "
              "update per minibatch includes the first):\n")
        print("| seed | rep | side | rollout | update | update ms/minibatch | rollout ms/vector step |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for r in sb3_phased:
            ph = r["phase_seconds"]
            print(f"| {r['seed']} | {r['repeat']} | {r['side']} | {fmt(ph['rollout'])} | {fmt(ph['update'])} | "
                  f"{fmt(r['update_ms_per_minibatch'], 2)} | {fmt(r['rollout_ms_per_vector_step'], 3)} |")
    for m in sides:
        ratios = [g[f"ratio {m}"] for g in groups]
        print(f"\n{m} wall / min(SB3 1 thread, SB3 {n_thr} threads): median {statistics.median(ratios):.2f} "
              f"over {len(ratios)} comparison(s) (msrl run dirs in {work})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"config": args.config, "total_timesteps": args.total_timesteps,
                       "eval_episodes": args.eval_episodes, "periodic_eval": args.periodic_eval,
                       "cpus": os.cpu_count(), "groups": groups}, f, indent=2)


if __name__ == "__main__":
    main()
