"""`msrl train`: a new run, ``--resume``, data-parallel launches on one host or several (this
node's share of the cluster, cluster.py), each under the run directory's lock (runlock). Errors
are ConfigError (``msrl: error: ...``, exit 2)."""
from __future__ import annotations

import os
import sys

from . import runlock
from .cluster import Cluster, from_args, run_entries
from .config import ConfigError


def cmd_train(args) -> int:
    from .distributed import WORKER_ENV
    from .training import default_run_dir, resolve_with_origins

    if args.workers < 1:
        raise ConfigError(f"--workers {args.workers}: expected a positive number of workers")
    cluster = from_args(args)
    from .init_from import check_args
    check_args(args)
    if args.resume:
        return _resume(args, cluster)
    if getattr(args, "seeds", None) is not None:
        return _train_population(args)
    if getattr(args, "sweep", None):
        raise ConfigError("--sweep needs --seeds (the seeds of every setting, e.g. --seeds 0)")
    if getattr(args, "jobs", 1) != 1:
        raise ConfigError(f"--jobs {args.jobs} needs --seeds (it trains a population's members in that many "
                          f"processes; one run is --workers N)")
    if not args.config:
        raise ConfigError("msrl train needs a CONFIG file, a shipped config name (see `msrl configs`) or an algorithm "
                          "name with --env ID (msrl train ppo --env CartPole-v1), or --resume RUN_DIR")
    worker = bool(os.environ.get(WORKER_ENV))
    overrides = list(args.set or [])
    if args.device is not None:
        overrides.append(f"device={args.device}")
    cfg, origins = resolve_with_origins(args.config, args.seed, args.total_timesteps, overrides, args.env, _origin(args),
                                        "--set", "--env")
    from . import registry
    registry.get(cfg.algorithm).check_workers(cfg, args.workers)
    if cluster.nodes > 1 and not args.run_dir:
        raise ConfigError(f"--nodes {cluster.nodes}: needs --run-dir DIR (the same path on every node; node 0 "
                          f"writes the run there)")
    run_dir = args.run_dir or default_run_dir(cfg)
    created = False
    if not worker:
        if os.path.isdir(run_dir):
            _check_new(run_dir, cluster)
        created = not os.path.isdir(run_dir)
        os.makedirs(run_dir, exist_ok=True)
    with runlock.hold(run_dir, cluster.lock_file):  # a launcher's workers find it held for them
        return _train_locked(args, cfg, origins, run_dir, worker, created, cluster)


def _origin(args) -> str:
    """The options that set config values, as errors name them."""
    given = [("--set", args.set), ("--seed", args.seed), ("--total-timesteps", args.total_timesteps),
             ("--device", args.device), ("--env", getattr(args, "env", None))]
    return ", ".join(name for name, value in given if value is not None and value != []) or "--set"


def _check_new(run_dir: str, cluster: Cluster) -> None:
    """A new run's directory: empty for node 0 (but for what other nodes put there, run_entries),
    and for another node without a run of its own yet (node 0 may have written config.yaml)."""
    import glob
    if cluster.node_rank == 0 and run_entries(run_dir):
        raise ConfigError(f"run directory {run_dir} already exists and is not empty; choose another --run-dir")
    if cluster.node_rank > 0 and (os.path.isfile(os.path.join(run_dir, "summary.json"))
                                  or glob.glob(os.path.join(run_dir, "checkpoints", "*.safetensors"))):
        raise ConfigError(f"run directory {run_dir} already holds a run (checkpoints); --node-rank "
                          f"{cluster.node_rank} joins node 0's new run, or continues this one with --resume {run_dir}")


def _train_locked(args, cfg, origins, run_dir: str, worker: bool, created: bool, cluster: Cluster) -> int:
    from .checkpoint import atomic_write_text
    from .config import dump_config
    from .training import build_algorithm, rounding_note

    if not worker:
        _check_new(run_dir, cluster)  # another process started it a moment ago
        # node 0 writes the run's config.yaml; another node its workers' copy, beside its logs
        config_path = os.path.join(run_dir if cluster.node_rank == 0 else cluster.log_dir(run_dir), "config.yaml")
        os.makedirs(os.path.dirname(config_path), exist_ok=True)
        atomic_write_text(config_path, dump_config(cfg))
        if args.workers > 1:
            entry_args = ["train", os.path.abspath(config_path), "--run-dir", os.path.abspath(run_dir), "--quiet",
                          "--workers", str(args.workers)]
            return _launch(args, cluster, run_dir, entry_args, f"training {cfg.algorithm} on {cfg.env.id}")
    if worker:
        _init_worker(cfg)
    algo = build_algorithm(cfg, origins, run_dir, created, getattr(args, "init_from", None))
    if algo.initialized_from and not args.quiet:
        print(f"msrl: parameters from {algo.initialized_from} (optimizer, counters and RNG fresh)")
    note = rounding_note(algo)
    return _learn(algo, run_dir, args.quiet, f"training {cfg.algorithm} on {cfg.env.id} (seed {cfg.seed}, "
                                             f"{cfg.total_timesteps} steps{'; ' + note if note else ''}) -> {run_dir}")


def _train_population(args) -> int:
    """``msrl train CONFIG --seeds 0-4 [--jobs J]``: the members in one process, or in J (populations.py)."""
    from .populations import (
        default_population_dir,
        member_configs,
        member_settings,
        parse_seeds,
        parse_sweep,
        population_class,
        split_groups,
        train_population,
    )
    from .training import resolve

    if not args.config:
        raise ConfigError("--seeds needs a CONFIG file or shipped config name (see `msrl configs`)")
    if args.seed is not None:
        raise ConfigError("--seeds and --seed: pass one of them")
    seeds = parse_seeds(args.seeds)
    overrides = list(args.set or [])
    if args.device is not None:
        overrides.append(f"device={args.device}")
    cfg = resolve(args.config, None, args.total_timesteps, overrides, args.env, _origin(args))
    sweep = list(args.sweep or [])
    cls = population_class(cfg, seeds, args.workers, sweep)
    k = len(member_configs(cfg, member_settings(seeds, parse_sweep(sweep, cls.sweepable))))  # every member valid, before writing
    split_groups(k, args.jobs)
    run_dir = args.run_dir or default_population_dir(cfg, seeds)
    grid = f", sweep {' '.join(sweep)}" if sweep else ""
    where = "in one process" if args.jobs == 1 else f"in {args.jobs} processes"
    sep = ", "
    if getattr(cls, "reason", ""):  # SequentialPopulation: the stacked graphs cannot train this config
        where, sep = f"{where}, one after another because {cls.reason}", "; "
    what = (f"training {cfg.algorithm} on {cfg.env.id}, seeds {args.seeds}{grid} ({k} members {where}{sep}"
            f"{cfg.total_timesteps} steps each)")
    return _learn_population(lambda: train_population(cfg, seeds, run_dir, progress=not args.quiet, sweep=sweep,
                                                      jobs=args.jobs), run_dir, args.quiet, what)


def _learn_population(learn, run_dir: str, quiet: bool, message: str) -> int:
    from msrl_consistent.run_context import TrainingInterrupted, TrainingStopped

    if not quiet:
        print(f"msrl: {message} -> {run_dir}")
    from .populations import GroupFailed
    try:
        summary = learn()
    except GroupFailed as exc:
        print(f"msrl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except TrainingInterrupted as exc:
        print(f"msrl: interrupted (signal {exc.signum}); every member checkpointed; continue with: "
              f"msrl train --resume {run_dir}", file=sys.stderr)
        return exc.exit_code
    except TrainingStopped as exc:
        print(f"msrl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if not quiet:
        for name, s in summary["members"].items():
            ev = s["final_eval"]
            print(f"msrl: {name}: eval mean return {ev['mean_return']:.2f} +- {ev['std_return']:.2f}")
        print(f"msrl: done in {summary['wall_time_s']:.1f}s; run dirs {run_dir}/<member>/")
    return 0


def _resume(args, cluster: Cluster) -> int:
    run_dir = args.resume
    if args.config or args.set or args.seed is not None or args.total_timesteps is not None \
            or getattr(args, "seeds", None) is not None or getattr(args, "sweep", None):
        raise ConfigError("--resume RUN_DIR takes the run's own config.yaml; do not pass CONFIG, --set, --seed, "
                          "--seeds, --sweep or --total-timesteps with it")
    from .populations import is_population
    if is_population(run_dir):
        return _resume_population(args, run_dir)
    from .directories import RUN, expect
    expect(run_dir, RUN)
    with runlock.hold(run_dir, cluster.lock_file):
        return _resume_locked(args, run_dir, cluster)


def _resume_locked(args, run_dir: str, cluster: Cluster) -> int:
    from . import registry
    from .config import load_config
    from .distributed import WORKER_ENV

    cfg = load_config(os.path.join(run_dir, "config.yaml"))
    registry.get(cfg.algorithm).check_workers(cfg, args.workers)
    if os.environ.get(WORKER_ENV):
        _init_worker(cfg)
    elif not os.path.isfile(os.path.join(run_dir, "summary.json")):  # (a finished run: resume() says so)
        _check_rank_files(run_dir, args.workers, args.quiet)
        if args.workers > 1:
            entry_args = ["train", "--resume", os.path.abspath(run_dir), "--quiet", "--workers", str(args.workers)]
            return _launch(args, cluster, run_dir, entry_args, f"resuming {run_dir}")
    algo = registry.get(cfg.algorithm).resume(run_dir)
    if algo.num_timesteps >= cfg.total_timesteps and os.path.isfile(os.path.join(run_dir, "summary.json")):
        if not args.quiet:
            print(f"msrl: {run_dir} already finished ({algo.num_timesteps} steps); nothing to do")
        return 0
    return _learn(algo, run_dir, args.quiet, f"resuming {run_dir} from {algo.resumed_from} "
                                             f"(step {algo.num_timesteps} of {cfg.total_timesteps})")


def _resume_population(args, run_dir: str) -> int:
    from msrl_consistent.populations.jobs import run_groups

    from .populations import population_groups, population_summary_done, resume_population

    if args.workers > 1:
        raise ConfigError(f"--resume {run_dir} --workers {args.workers}: a population is not data-parallel")
    if args.jobs != 1:
        raise ConfigError(f"--resume {run_dir} --jobs {args.jobs}: a population resumes in the processes it was "
                          f"started with (population.json's groups)")
    if population_summary_done(run_dir):
        if not args.quiet:
            print(f"msrl: {run_dir} already finished; nothing to do")
        return 0
    groups = population_groups(run_dir)
    if groups:
        return _learn_population(lambda: run_groups(run_dir, resume=True, progress=not args.quiet), run_dir,
                                 args.quiet, f"resuming population {run_dir} in {len(groups)} processes")
    population = resume_population(run_dir)
    return _learn_population(lambda: population.learn(progress=not args.quiet), run_dir, args.quiet,
                             f"resuming population {run_dir} ({population.describe()})")


def _check_rank_files(run_dir: str, workers: int, quiet: bool) -> None:
    """Before resuming: a checkpoint written by as many ranks must have every rank's own file
    (else CheckpointError naming them); one written by another count resumes, not exactly."""
    from .checkpoint import CheckpointError, newest_intact, written_by
    path = newest_intact(os.path.join(run_dir, "checkpoints"))
    if path is None:
        return  # resume() names the problem
    world, unreadable = written_by(path)
    if world == workers and unreadable:
        raise CheckpointError(f"{path} was written by {world} workers and its ranks' files are missing or corrupt: "
                              f"{', '.join(unreadable)}; resume with another --workers count (not exact)")
    if world != workers and max(world, workers) > 1 and not quiet:
        print(f"msrl: {path} was written by {world} worker(s), resuming on {workers}: the other ranks' RNG streams "
              f"and replay buffers start afresh (not an exact resume)")


def _launch(args, cluster: Cluster, run_dir: str, entry_args, what: str) -> int:
    """Run ``msrl <entry_args>`` on this node's msrun workers (distributed.launch)."""
    from .distributed import launch
    if not args.quiet:
        where = f" ({cluster.local_workers} here, node {cluster.node_rank} of {cluster.nodes})" if cluster.nodes > 1 else ""
        print(f"msrl: {what} with {args.workers} msrun workers{where} -> {run_dir}")
    rc = launch(entry_args, cluster, run_dir)
    if rc == 0 and not args.quiet:
        print(f"msrl: done; run dir {run_dir} (per-rank results in {run_dir}/ranks/)")
    return rc


def _init_worker(cfg) -> None:
    """In an msrun worker: the device and deterministic computing first (they must be set before
    communication.init(): set_deterministic also fixes the collectives' order, HCCL_DETERMINISTIC),
    then the rank; then every rank checks it trains rank 0's config (on several hosts each node
    resolved the command it was given: another --seed or --set on one node would train apart)."""
    import hashlib

    import numpy as np

    from .config import dump_config
    from .determinism import configure_mindspore
    from .distributed import init_if_worker
    configure_mindspore(cfg.device)
    dist = init_if_worker()
    if dist.enabled:
        digest = int(hashlib.sha256(dump_config(cfg).encode()).hexdigest()[:6], 16)  # exact in float32
        seen = dist.allgather(np.array([digest], np.float32))[:, 0]
        odd = [r for r, d in enumerate(seen) if int(d) != int(seen[0])]
        if odd:
            raise ConfigError(f"rank(s) {odd} resolved another config than rank 0 (another CONFIG, --seed, --set or "
                              f"--total-timesteps on their node); run the same command on every node")


def _learn(algo, run_dir: str, quiet: bool, message: str) -> int:
    from msrl_consistent.run_context import TrainingInterrupted, TrainingStopped

    if not quiet:
        print(f"msrl: {message}")
    try:
        summary = algo.learn(run_dir, progress=not quiet)
    except TrainingInterrupted as exc:
        print(f"msrl: interrupted (signal {exc.signum}); checkpoint written to {exc.checkpoint}; "
              f"continue with: msrl train --resume {run_dir}", file=sys.stderr)
        # a data-parallel worker exits 0 (msrun would SIGKILL the others on a non-zero exit);
        # its launcher, which forwarded the signal, exits 128 + the signal
        return 0 if algo.dist.enabled else exc.exit_code
    except TrainingStopped as exc:
        print(f"msrl: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if not quiet and "final_eval" in summary:
        ev = summary["final_eval"]
        print(f"msrl: done in {summary['wall_time_s']:.1f}s ({summary['steps_per_second']:.0f} steps/s); "
              f"eval mean return {ev['mean_return']:.2f} +- {ev['std_return']:.2f}; run dir {run_dir}")
    return 0
