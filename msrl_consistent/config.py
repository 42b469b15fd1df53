"""Typed, validated configuration: dataclasses, YAML loading (``yaml.safe_load`` only), ``--set``.

A config file looks like ``{algorithm: ppo, total_timesteps: 100000, env: {id: CartPole-v1},
algo: {n_steps: 32}}`` (``algo``: the algorithm's own dataclass). Every field is declared once,
with a one-line docstring (a string literal under the field), which ``msrl`` prints in its config
reference. Nothing is evaluated as Python.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import os
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Literal, Optional, Tuple, Type

import yaml

from . import registry
from .configs import SHIPPED_PACKAGE, resolve_config, shipped_configs  # noqa: F401  (their home is the package of the configs)
from .envs.atari import AtariConfig


class ConfigError(ValueError):
    """A configuration or usage error: reported without a traceback, exit code 2."""


Check = Tuple[Callable[[Any], bool], str]
"""A range check of one field: (predicate on a non-None value, what was expected)."""
POSITIVE: Check = (lambda v: v > 0, "a positive number")
NON_NEGATIVE: Check = (lambda v: v >= 0, "a number >= 0")
UNIT_INTERVAL: Check = (lambda v: 0 <= v <= 1, "a number in [0, 1]")
SIZES_OR_EMPTY: Check = (lambda v: all(x > 0 for x in v), "a list of positive sizes (empty: the heads sit on the features)")
RESIZE: Check = (lambda v: len(v) == 2 and all(x > 0 for x in v), "[height, width], two positive sizes")


# Sections shared by every algorithm --------------------------------------------------------
@dataclass
class WrapperConfig:
    entry: str = ""
    """The wrapper as module:Class (or module:factory taking the env first), e.g. gymnasium.wrappers:TimeAwareObservation."""
    kwargs: Dict[str, Any] = field(default_factory=dict)
    """Its keyword arguments after the env."""


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"
    """A registered gymnasium id, module:EnvId (imports module, which registers it) or module.path:callable (a class or
    factory returning a gymnasium.Env); the current directory is importable (docs/environments.md)."""
    kwargs: Dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment's constructor (gymnasium.make's, or the callable's)."""
    wrappers: List[WrapperConfig] = field(default_factory=list)
    """gymnasium wrappers applied in order after make and before msrl's own: [{entry: module:Class, kwargs: {..}}];
    those that change observations or actions are host preprocessing the board repeats (msrl export lists them)."""
    packages: List[str] = field(default_factory=list)
    """Modules imported before the environment is made (they register its id), as RL Zoo's --gym-packages."""
    n_envs: int = 1
    """Number of parallel environments in the training vector env."""
    vectorization: Literal["sync", "async"] = "sync"
    """gymnasium vector env class: sync (one process) or async (one process per env)."""
    pipeline: Literal["sequential", "overlap"] = "sequential"
    """sequential: act on every env, then step them all. overlap (n_envs >= 2): each half steps in a worker thread
    while the policy acts on the other half; the same envs, seeds and buffer rows (msrl_consistent.pipeline)."""
    normalize_obs: bool = False
    """Keep a running mean/std of observations inside the policy cell (exported with it)."""
    normalize_obs_clip: float = 10.0
    """Clip normalized observations to [-clip, clip]."""
    normalize_reward: bool = False
    """PPO: scale rewards by the running std of the discounted return (SB3's VecNormalize norm_reward; host-side, not exported)."""
    normalize_reward_clip: float = 10.0
    """Clip scaled rewards to [-clip, clip]."""
    max_episode_steps: Optional[int] = None
    """Override the environment's time limit (None keeps the registered one)."""
    frame_stack: int = 1
    """PPO: stack the k latest observations, oldest first, zeros after a reset (deploy.FrameStack, in the manifest)."""
    max_and_skip: int = 1
    """Image observations: send each action k times, sum the rewards, observe the pixel-wise max of the last two frames
    (SB3's MaxAndSkipEnv; deploy.MaxAndSkip, in the manifest; ALE ids get frameskip=1). 1: off."""
    atari: AtariConfig = field(default_factory=AtariConfig)
    """Atari as RL Zoo runs it: no-op starts, FIRE reset, life-loss episodes, clipped rewards (msrl_consistent.atari)."""

    checks: ClassVar[Dict[str, Check]] = {"n_envs": POSITIVE, "frame_stack": POSITIVE, "max_and_skip": POSITIVE,
                                          "normalize_obs_clip": POSITIVE,
                                          "normalize_reward_clip": POSITIVE, "max_episode_steps": POSITIVE}


@dataclass
class PolicyConfig:
    net_arch: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer sizes of the actor (and critic unless critic_arch is set). Left out, each algorithm's SB3 default:
    PPO and DQN [64, 64], SAC [256, 256], TD3 [400, 300] (`msrl configs --defaults ALGO`)."""
    critic_arch: Optional[List[int]] = None
    """Hidden layer sizes of the critic; None uses net_arch."""
    activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh"
    """Activation function of the hidden layers (left out: tanh for PPO, relu for DQN, SAC and TD3, as SB3)."""
    shared: bool = False
    """PPO only: actor and critic share the hidden trunk."""
    log_std_init: float = 0.0
    """Initial log standard deviation of Gaussian policies."""
    ortho_init: bool = True
    """Orthogonal initialization (gain sqrt(2) hidden, 0.01 policy head, 1 value head); false: PyTorch's default Linear
    initialization (left out: true for PPO, false for DQN, SAC and TD3, as SB3)."""
    cnn: Literal["auto", "nature", "small"] = "auto"
    """Image observations: conv trunk shared by actor and critic (auto: NatureCNN from 64x64 after resize, else small)."""
    grayscale: bool = False
    """Image observations: RGB -> gray inside the policy cell (luma weights 0.299, 0.587, 0.114)."""
    resize: Optional[List[int]] = None
    """Image observations: [height, width] to area-resize to inside the policy cell (None: keep the size)."""
    conv_impl: Literal["auto", "matmul", "conv2d"] = "auto"
    """Image convs: matmul (Gather/Concat/MatMul, fast on the CPU backend), conv2d (nn.Conv2d, for Ascend), auto (by `device`)."""
    recurrent: bool = False
    """PPO only: an LSTM between the normalized observation and each of the actor and critic networks (two
    LSTMs, sb3-contrib RecurrentPPO's default layout); the policy cell takes and returns the actor's state
    (docs/recurrent.md)."""
    lstm_hidden_size: int = 256
    """With recurrent: units of each LSTM (the state is h and c of this size per env)."""

    checks: ClassVar[Dict[str, Check]] = {"net_arch": SIZES_OR_EMPTY, "critic_arch": SIZES_OR_EMPTY,
                                          "resize": RESIZE, "lstm_hidden_size": POSITIVE}


@dataclass
class EvalConfig:
    freq: int = 10000
    """Evaluate the deterministic policy cell every this many environment steps (0: only at the end)."""
    episodes: int = 5
    """Episodes per evaluation."""
    seed_offset: int = 10000
    """Evaluation episodes are seeded with seed + seed_offset + i (disjoint from training seeds)."""
    max_steps: Optional[int] = None
    """Cap on each evaluation episode's steps (None: the environment's own limit), recorded with the results."""

    checks: ClassVar[Dict[str, Check]] = {"freq": NON_NEGATIVE, "episodes": POSITIVE, "max_steps": POSITIVE}


@dataclass
class CheckpointConfig:
    freq: int = 0
    """Write a checkpoint every this many environment steps (0: only the final one)."""
    keep: int = 3
    """Keep the newest this many periodic checkpoints (the final one is always kept)."""

    checks: ClassVar[Dict[str, Check]] = {"freq": NON_NEGATIVE, "keep": POSITIVE}


@dataclass
class LogConfig:
    tensorboard: bool = True
    """Write TensorBoard event files under tb/."""
    window: int = 100
    """Episodes in the moving window of 'recent mean return'."""
    mismatch_threshold: Optional[float] = None
    """Act when the rollout/update mismatch (mismatch_max in metrics.jsonl) exceeds this (None: report only)."""
    mismatch_action: Literal["warn", "stop"] = "warn"
    """Above log.mismatch_threshold: warn (one line on stderr) or stop (checkpoint, then exit 2)."""
    checks: ClassVar[Dict[str, Check]] = {"mismatch_threshold": NON_NEGATIVE}


@dataclass
class Config:
    algorithm: str = "ppo"
    """Algorithm name: one of the registered algorithms (ppo, sac, td3, dqn)."""
    seed: int = 0
    """Seed of every random number generator (Python, NumPy, MindSpore, environments)."""
    total_timesteps: int = 100000
    """Environment steps to train for (summed over the vector envs)."""
    device: Literal["CPU", "GPU", "Ascend"] = "CPU"
    """MindSpore device target."""
    env: EnvConfig = field(default_factory=EnvConfig)
    """Environment section."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Network section."""
    algo: Any = None
    """The algorithm's own section (its dataclass is chosen by `algorithm`)."""
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Evaluation section."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpoint section."""
    log: LogConfig = field(default_factory=LogConfig)
    """Logging section."""

    checks: ClassVar[Dict[str, Check]] = {"total_timesteps": POSITIVE, "seed": NON_NEGATIVE}


# Typed conversion ------------------------------------------------------------------------------------
def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(_type_name(a) for a in args) + " or null"
    if origin in (list, List):
        return f"list of {_type_name(typing.get_args(tp)[0])}"
    if origin in (dict, Dict):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _bad(where: str, key: str, value: Any, tp: Any) -> ConfigError:
    return ConfigError(f"{where}: key '{key}' has value {value!r}, expected {_type_name(tp)}")


def _coerce(value: Any, tp: Any, key: str, where: str) -> Any:  # noqa: C901  (one branch per field type of the dataclasses)
    """Convert a YAML value to the field type ``tp`` or raise ConfigError naming key and value."""
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], key, where)
    if origin is Literal:
        choices = typing.get_args(tp)
        if value in choices and type(value) is type(choices[0]):
            return value
        if isinstance(value, str):
            close = difflib.get_close_matches(value, [str(c) for c in choices], n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(f"{where}: key '{key}' has value {value!r}, expected {_type_name(tp)}{hint}")
        raise _bad(where, key, value, tp)
    if origin in (dict, Dict):
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ConfigError(f"{where}: key '{key}' has value {value!r}, expected a mapping of names to values")
        return {k: _coerce(v, typing.get_args(tp)[1], f"{key}.{k}", where) for k, v in value.items()}
    if tp is Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (list, tuple)):
            return [_coerce(v, Any, f"{key}[{i}]", where) for i, v in enumerate(value)]
        return _coerce(value, Dict[str, Any], key, where)
    if origin in (list, List):
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise _bad(where, key, value, tp)
        return [_coerce(v, item_tp, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise _bad(where, key, value, tp)
    if tp is int:
        if isinstance(value, bool):
            raise _bad(where, key, value, tp)
        if isinstance(value, int):
            return value
        num = _as_number(value)
        # 1e5 is accepted for an integer field when integral.
        if num is not None and math.isfinite(num) and float(num).is_integer():
            return int(num)
        raise _bad(where, key, value, tp)
    if tp is float:
        if isinstance(value, bool):
            raise _bad(where, key, value, tp)
        num = _as_number(value)
        if num is None or math.isnan(num):
            raise _bad(where, key, value, tp)
        return float(num)
    if tp is str:
        if isinstance(value, str):
            return value
        raise _bad(where, key, value, tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, where, prefix=key)
    raise ConfigError(f"{where}: key '{key}': unsupported field type {tp!r}")  # pragma: no cover


def _as_number(value: Any) -> Optional[float]:
    # PyYAML (YAML 1.1) reads `1e-3` and `1e5` as strings; accept them as numbers.
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _hints(cls: Type) -> Dict[str, Any]:
    return typing.get_type_hints(cls)


def build_dataclass(cls: Type, data: Any, where: str, prefix: str = "") -> Any:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys with the closest valid one."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        sect = f"section '{prefix}'" if prefix else "the document"
        raise ConfigError(f"{where}: {sect} must be a mapping, got {type(data).__name__} {data!r}")
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    if cls is Config and data.get("algorithm", "ppo") in registry.names():
        defaults = getattr(registry.config_class(data.get("algorithm", "ppo")), "policy_defaults", {})
        if defaults and (data.get("policy") is None or isinstance(data.get("policy"), dict)):
            data = {**data, "policy": {**defaults, **(data.get("policy") or {})}}  # the algorithm's SB3 network
    kwargs = {}
    for k, v in data.items():
        full = f"{prefix}.{k}" if prefix else str(k)
        if k not in names:
            close = difflib.get_close_matches(str(k), names, n=1, cutoff=0.5)
            hint = f"; did you mean '{(prefix + '.') if prefix else ''}{close[0]}'?" if close else ""
            raise ConfigError(f"{where}: unknown key '{full}'{hint} (valid keys: {', '.join(names)})")
        if k == "algo" and cls is Config:
            continue  # resolved below, once `algorithm` is known
        kwargs[k] = _coerce(v, hints[k], full, where)
    obj = cls(**kwargs)
    if cls is Config:
        known = registry.names()
        if obj.algorithm not in known:
            close = difflib.get_close_matches(obj.algorithm, known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"{where}: key 'algorithm' has value {obj.algorithm!r}, expected one of "
                f"{', '.join(known)}{hint}")
        obj.algo = build_dataclass(registry.config_class(obj.algorithm), data.get("algo"), where, prefix="algo")
    validate_values(obj, where, prefix)
    return obj


def validate_values(obj: Any, where: str, prefix: str = "") -> None:
    """Range checks declared in a dataclass's ``checks`` class variable: {field: (predicate, expectation)}."""
    checks = getattr(type(obj), "checks", {})
    for name, (pred, expect) in checks.items():
        value = getattr(obj, name)
        if value is not None and not pred(value):
            full = f"{prefix}.{name}" if prefix else name
            raise ConfigError(f"{where}: key '{full}' has value {value!r}, expected {expect}")


# Loading ---------------------------------------------------------------------------------------------
def read_yaml(path: str) -> Dict[str, Any]:
    if not os.path.exists(path):
        raise ConfigError(f"config file not found: {path}")
    if os.path.isdir(path):
        raise ConfigError(f"config path is a directory, expected a YAML file: {path}")
    try:
        with open(path, "r", encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: malformed YAML: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the document must be a mapping of keys, got {type(data).__name__}")
    return data


def apply_overrides(data: Dict[str, Any], overrides: List[str], where: str = "--set") -> Dict[str, Any]:
    """Apply ``KEY=VALUE`` dotted overrides; values are parsed as YAML scalars, typed later."""
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"{where}: expected KEY=VALUE, got {item!r}")
        key, raw = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"{where}: invalid key {key!r} in {item!r}")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            nxt = node.get(part)
            if nxt is None:
                nxt = node[part] = {}
            if not isinstance(nxt, dict):
                raise ConfigError(f"{where}: cannot set {key!r}: '{part}' is not a section")
            node = nxt
        node[parts[-1]] = value
    return data


def load_config(path: Optional[str], overrides: Optional[List[str]] = None, data: Optional[Dict[str, Any]] = None,
                origin: str = "--set") -> Config:
    """Read, override and validate a config: ``path`` is a YAML file or the name of a shipped
    config (``ppo/CartPole-v1``, see :func:`shipped_configs`). Raises ConfigError with the file
    and key named, and ``origin`` (where the overrides came from: ``--set``, ``train() arguments``)."""
    if data is None:
        if path is None:
            raise ConfigError("load_config needs a config path or name, or data")
        path = resolve_config(path)
        data = read_yaml(path)
    where = path or "<config>"
    if overrides:
        where = f"{where} (with {origin})"
        data = apply_overrides(data, overrides, origin)
    return build_dataclass(Config, data, where)


def to_dict(cfg: Any) -> Dict[str, Any]:
    return dataclasses.asdict(cfg)


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
