"""Population directories: K runs of one config, one per seed (and per setting of a
hyperparameter grid), trained in one process (``msrl train CONFIG --seeds 0-4 [--sweep
KEY=V1,V2 ...]``, ``msrl_consistent.train(config, seeds=[...], sweep=[...])``).

A population directory holds ``population.json`` (the members and their seeds),
``seed<S>/`` (one ordinary run directory per member: config.yaml with that seed, metrics,
checkpoints, summary.json) and, once finished, ``summary.json`` (the members' summaries and
the population's wall time). The training itself is the algorithm's ``population`` class
(PPO's: algorithms/ppo/population.py); this module creates, reads and resumes the directories.
"""
from __future__ import annotations

import itertools
import json
import os
import shutil
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from ..config import Config, ConfigError, dump_config, load_config, to_dict

POPULATION_FILE = "population.json"


def parse_seeds(text: str) -> List[int]:
    """``0-4`` or ``0,3,7`` (or both: ``0-2,10``) -> distinct seeds in that order."""
    seeds: List[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.strip().partition("-")
            seeds += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    except ValueError:
        raise ConfigError(f"--seeds {text}: expected seeds as 0-4 or 0,1,2") from None
    check_seeds(seeds, text)
    return seeds


def check_seeds(seeds: Sequence[int], text: str = "") -> None:
    shown = text or ",".join(map(str, seeds))
    if not seeds:
        raise ConfigError(f"--seeds {shown}: expected at least one seed")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds {shown}: expected distinct seeds")
    if any(s < 0 for s in seeds):
        raise ConfigError(f"--seeds {shown}: expected non-negative seeds")


SWEEPABLE = ("algo.learning_rate", "algo.clip_range", "algo.ent_coef", "algo.vf_coef", "algo.gamma",
             "algo.gae_lambda", "algo.max_grad_norm")
"""The keys ``--sweep`` takes: scalars that are per-member values in the population's graphs
(or, gamma and gae_lambda, per-member columns of the host-side GAE)."""


def sweep_key(spec: str) -> str:
    """The config key of one ``--sweep KEY=V1,V2`` (``algo.`` optional)."""
    key = spec.partition("=")[0].strip()
    return key if key.startswith("algo.") else f"algo.{key}"


def parse_sweep(specs: Sequence[str], sweepable: Optional[Sequence[str]] = SWEEPABLE) -> List[Tuple[str, List[Any]]]:
    """``["algo.learning_rate=1e-3,3e-4", ...]`` (``algo.`` optional) -> [(key, values)], one
    axis of the grid each, values read as numbers (``_number``); the keys must be in
    ``sweepable`` (the population class's ``sweepable``: PPO's are SWEEPABLE; None: any key, for
    members trained one after another, whose configs are checked member by member)."""
    axes: List[Tuple[str, List[Any]]] = []
    for spec in specs:
        _, sep, raw = spec.partition("=")
        key = sweep_key(spec)
        if not sep or not raw.strip():
            raise ConfigError(f"--sweep {spec}: expected KEY=VALUE,VALUE,... (for example algo.learning_rate=1e-3,3e-4)")
        if sweepable is not None and key not in sweepable:
            raise ConfigError(f"--sweep {spec}: key '{key}' cannot differ between members; expected one of "
                              f"{', '.join(sweepable)}")
        if key in [k for k, _ in axes]:
            raise ConfigError(f"--sweep {spec}: key '{key}' is swept twice")
        try:
            values = [_number(v) for v in raw.split(",")]
        except ValueError:
            values = []
        if not values or len(set(values)) != len(values):
            raise ConfigError(f"--sweep {spec}: expected distinct numbers")
        axes.append((key, values))
    return axes


def _number(text: str) -> Any:
    """A sweep value: a YAML int or float, or a float in any form Python reads (``1e-3``, which
    YAML 1.1 reads as a string); ValueError otherwise."""
    value = yaml.safe_load(text)
    if isinstance(value, bool):
        raise ValueError(text)
    if isinstance(value, (int, float)):
        return value
    return float(text)


def member_settings(seeds: Sequence[int], axes: Sequence[Tuple[str, List[Any]]]) -> List[Dict[str, Any]]:
    """Every member's overrides: the grid of ``axes`` (in order, last fastest), each with every seed."""
    grid = [dict(zip([k for k, _ in axes], vals)) for vals in itertools.product(*[v for _, v in axes])]
    return [dict(setting, seed=int(s)) for setting in grid for s in seeds]


def member_name(setting: Dict[str, Any]) -> str:
    """A member's directory name: ``seed3``, or ``learning_rate=0.001-clip_range=0.1-seed3``."""
    parts = [f"{k.rpartition('.')[2]}={v}" for k, v in setting.items() if k != "seed"]
    return "-".join(parts + [f"seed{setting['seed']}"])


def member_dir(run_dir: str, seed: int) -> str:
    """The directory of the member of ``seed`` in a population of seeds only."""
    return os.path.join(run_dir, member_name({"seed": seed}))


def is_population(run_dir: str) -> bool:
    return os.path.isfile(os.path.join(run_dir, POPULATION_FILE))


def read_population(run_dir: str) -> Dict[str, Any]:
    """``population.json`` of a population directory (ConfigError when it cannot be read)."""
    path = os.path.join(run_dir, POPULATION_FILE)
    try:
        with open(path) as fh:
            info = json.load(fh)
        [m["run_dir"] for m in info["members"]]
        return info
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path}: not a readable population file ({exc})") from None


def population_members(run_dir: str) -> List[str]:
    """The members' run directories of a population directory, in training order."""
    return [os.path.join(run_dir, m["run_dir"]) for m in read_population(run_dir)["members"]]


def expand_populations(run_dirs: Sequence[str]) -> List[str]:
    """``run_dirs`` with each population directory replaced by its members' run directories."""
    out: List[str] = []
    for d in run_dirs:
        out += population_members(d) if is_population(d) else [d]
    return out


def not_a_member(path: str) -> None:
    """Where one run directory is expected: a population directory is refused (ConfigError)
    naming its members."""
    if is_population(path):
        members = [os.path.basename(d) for d in population_members(path)]
        raise ConfigError(f"{path} is a population directory; pass one of its members: "
                          f"{', '.join(os.path.join(path, m) for m in members[:3])}{' ...' if len(members) > 3 else ''}")


def population_class(cfg: Config, seeds: Sequence[int], workers: int = 1, sweep: Sequence[str] = ()):
    """The algorithm's population class, after refusing what it cannot train (ConfigError): its
    stacked population, or where that cannot train the config (the class's ``refusal``) or the
    ``sweep`` (``--sweep`` specs or keys) varies a key the stacked members share, the members one
    after another (populations.base.SequentialPopulation, whose ``reason`` says why)."""
    from .. import registry
    check_seeds(seeds)
    if workers > 1:
        raise ConfigError(f"--seeds with --workers {workers}: a population is not data-parallel; use one or the "
                          f"other (--jobs N trains its members in N processes)")
    cls = getattr(registry.get(cfg.algorithm), "population", None)
    if cls is None:
        raise ConfigError(f"--seeds: {cfg.algorithm} has no population training (ppo, sac and td3 have); train one "
                          f"run per seed")
    reason = cls.refusal(cfg)
    shared = [k for k in map(sweep_key, sweep) if k not in cls.sweepable]
    if reason is None and shared:
        reason = f"--sweep varies key '{shared[0]}', which stacked members share"
    return cls if reason is None else cls.one_after_another(reason)


def default_population_dir(cfg: Config, seeds: Sequence[int]) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{cfg.algorithm}-{cfg.env.id}-seeds{seeds[0]}-{seeds[-1]}-{stamp}")


def member_configs(cfg: Config, settings: Sequence[Dict[str, Any]]) -> List[Config]:
    """One validated Config per member (ConfigError names the member's key and value)."""
    out = []
    for setting in settings:
        sets = [f"{k}={v}" for k, v in setting.items()]
        try:
            out.append(load_config(None, sets, data=to_dict(cfg)))
        except ConfigError as exc:
            raise ConfigError(f"member {member_name(setting)}: {exc}") from None
    return out


def train_population(cfg: Config, seeds: Sequence[int], run_dir: Optional[str] = None, progress: bool = False,
                     sweep: Sequence[str] = (), jobs: int = 1) -> dict:
    """Train one member per seed of ``cfg`` (and per setting of the ``sweep`` grid, as
    ``--sweep``) into ``run_dir`` (new or empty): in one process, or with ``jobs`` > 1 in that
    many processes of contiguous groups of members (the population class's ``run_groups``,
    PPO's: populations/jobs.py); returns the population
    summary."""
    from ..checkpoint import atomic_write_text
    from ..runlock import new_run_dir

    cls = population_class(cfg, seeds, sweep=sweep)
    axes = parse_sweep(sweep, cls.sweepable)
    settings = member_settings(seeds, axes)
    configs = member_configs(cfg, settings)
    groups = split_groups(len(settings), jobs)
    run_dir = run_dir or default_population_dir(cfg, seeds)
    created = not os.path.isdir(run_dir)
    with new_run_dir(run_dir):
        names = [member_name(s) for s in settings]
        info = {"algorithm": cfg.algorithm, "env": cfg.env.id, "sweep": {k: v for k, v in axes},
                "training": f"one after another ({cls.reason})" if getattr(cls, "reason", "") else "stacked",
                "members": [{"run_dir": name, **setting} for name, setting in zip(names, settings)]}
        if jobs > 1:
            info["groups"] = groups
        dirs = [os.path.join(run_dir, name) for name in names]
        for d, c in zip(dirs, configs):
            os.makedirs(d)
            atomic_write_text(os.path.join(d, "config.yaml"), dump_config(c))
        atomic_write_text(os.path.join(run_dir, POPULATION_FILE), json.dumps(info, indent=2) + "\n")

        def remove_untrained() -> None:
            # nothing was trained (say, the environment's package is missing): leave no directory
            # behind, so the same command works once the cause is fixed
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
            os.remove(os.path.join(run_dir, POPULATION_FILE))
            if created:
                shutil.rmtree(run_dir, ignore_errors=True)

        if jobs > 1:
            try:
                return cls.run_groups(run_dir, resume=False, progress=progress)
            except GroupFailed:
                if not any(os.listdir(os.path.join(d, "checkpoints")) for d in dirs
                           if os.path.isdir(os.path.join(d, "checkpoints"))):
                    remove_untrained()
                raise
        try:
            population = cls.build(configs, dirs, run_dir)
        except BaseException:
            remove_untrained()
            raise
        return population.learn(progress)


class GroupFailed(RuntimeError):
    """A group's process ended with an error (its own message is on stderr above)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def split_groups(k: int, jobs: int) -> List[List[int]]:
    """Member indices 0..k-1 in ``jobs`` contiguous groups, sizes as even as possible, larger first."""
    if jobs < 1:
        raise ConfigError(f"--jobs {jobs}: expected a positive number of processes")
    if jobs > k:
        raise ConfigError(f"--jobs {jobs}: the population has {k} member(s); expected at most {k} processes")
    size, extra = divmod(k, jobs)
    out, start = [], 0
    for j in range(jobs):
        n = size + (1 if j < extra else 0)
        out.append(list(range(start, start + n)))
        start += n
    return out


def population_groups(run_dir: str) -> List[List[int]]:
    """The groups recorded in ``population.json`` ([] for a population trained in one process)."""
    groups = read_population(run_dir).get("groups") or []
    return [[int(i) for i in g] for g in groups]


def group_finished(run_dir: str, group: Sequence[int]) -> bool:
    dirs = population_members(run_dir)
    return all(os.path.isfile(os.path.join(dirs[i], "summary.json")) for i in group)


def population_summary(run_dir: str, run_dirs: Sequence[str], seeds: Sequence[int], summaries: Sequence[dict],
                       wall: float, write: bool = True, groups: Optional[List[List[int]]] = None) -> dict:
    """The population's summary (its members' summaries by directory name, their seeds, the wall
    time, the groups of a ``--jobs`` population), written to ``run_dir``/summary.json when ``write``."""
    from ..checkpoint import atomic_write_text
    summary: Dict[str, Any] = {"population": [os.path.basename(d) for d in run_dirs], "seeds": list(seeds),
                               "wall_time_s": round(wall, 3)}
    if groups is not None:
        summary["groups"] = groups
    summary["members"] = {os.path.basename(d): s for d, s in zip(run_dirs, summaries)}
    if write:
        atomic_write_text(os.path.join(run_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
    return summary


def population_summary_done(run_dir: str) -> bool:
    """True when the population finished (its summary.json is written last)."""
    return os.path.isfile(os.path.join(run_dir, "summary.json"))


def resume_population(run_dir: str):
    """The population of ``run_dir``, every member from its newest intact checkpoint (a stacked
    population's members must share its step; one trained member after member resumes the
    unfinished ones in turn); ``.learn()`` trains it on."""
    dirs = population_members(run_dir)
    groups = read_population(run_dir).get("groups")
    if groups:
        raise ConfigError(f"{run_dir} was trained in {len(groups)} processes (population.json's groups); resume it "
                          f"with: msrl train --resume {run_dir}")
    configs = []
    for d in dirs:
        if not os.path.isfile(os.path.join(d, "config.yaml")):
            raise ConfigError(f"{run_dir}: member {d} has no config.yaml")
        configs.append(load_config(os.path.join(d, "config.yaml")))
    cls = population_class(configs[0], sorted({c.seed for c in configs}),  # a sweep repeats its seeds
                           sweep=list(read_population(run_dir).get("sweep", {})))
    return cls.build(configs, dirs, run_dir, resume=True)
