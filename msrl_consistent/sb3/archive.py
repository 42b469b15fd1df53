"""A Stable-Baselines3 model zip, or an RL Zoo log folder, read as plain data.

``read_model(path)`` returns :class:`SB3Model`: the ``data`` JSON's plain fields (every
``:serialized:`` cloudpickle blob dropped; the policy class and the policy kwargs' classes named
from their blobs' opcodes, never loaded), the spaces as dicts of their plain fields, and the
tensors of ``policy.pth`` and ``pytorch_variables.pth`` (unpickle.read_torch_tensors). RL Zoo's
folder ``logs/ALGO/ENV_1/`` adds its ``ENV/vecnormalize.pkl`` and ``ENV/config.yml`` (read with a
SafeLoader that turns python tags into plain data). Every failure is a ConfigError naming the
file and what was expected.
"""
from __future__ import annotations

import base64
import binascii
import glob
import json
import os
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import yaml

from ..config import ConfigError
from .unpickle import pickle_globals, read_torch_tensors

SERIALIZED = ":serialized:"

POLICY_CLASSES = {
    # (module, class) of the saved policy -> (SB3 algorithm family, image policy)
    ("stable_baselines3.common.policies", "ActorCriticPolicy"): ("actor_critic", False),
    ("stable_baselines3.common.policies", "ActorCriticCnnPolicy"): ("actor_critic", True),
    ("stable_baselines3.sac.policies", "SACPolicy"): ("sac", False),
    ("stable_baselines3.td3.policies", "TD3Policy"): ("td3", False),
    ("stable_baselines3.dqn.policies", "DQNPolicy"): ("dqn", False),
}
REFUSED_POLICIES = {
    "RecurrentActorCriticPolicy": "sb3-contrib RecurrentPPO (msrl's recurrent PPO has another LSTM layout)",
    "RecurrentActorCriticCnnPolicy": "sb3-contrib RecurrentPPO", "RecurrentMultiInputActorCriticPolicy": "sb3-contrib RecurrentPPO",
    "MultiInputActorCriticPolicy": "MultiInputPolicy (Dict observations)", "MultiInputPolicy": "MultiInputPolicy (Dict observations)",
    "CnnPolicy": "CnnPolicy of an off-policy algorithm (msrl's SAC, TD3 and DQN take Box observations)",
    "QRDQNPolicy": "sb3-contrib QRDQN", "TQCPolicy": "sb3-contrib TQC", "ARSPolicy": "sb3-contrib ARS",
    "MaskableActorCriticPolicy": "sb3-contrib MaskablePPO",
}


@dataclass
class SB3Model:
    """What msrl import reads from an SB3 zip (plain data and arrays only)."""
    path: str
    family: str                      # actor_critic | sac | td3 | dqn
    algorithm: str                   # ppo | a2c | sac | td3 | dqn
    policy_class: str
    image: bool
    data: Dict[str, Any]             # the plain fields of `data`
    policy_kwargs: Dict[str, Any]    # plain fields of policy_kwargs
    kwarg_classes: List[Tuple[str, str]]  # classes the policy_kwargs blob names (from its opcodes)
    observation_space: Dict[str, Any]
    action_space: Dict[str, Any]
    state: Dict[str, np.ndarray]     # policy.pth
    variables: Dict[str, np.ndarray]  # pytorch_variables.pth
    sb3_version: str = ""
    vecnormalize: Optional[str] = None  # an RL Zoo folder's vecnormalize.pkl
    zoo_env: Optional[str] = None       # an RL Zoo folder's environment id
    zoo_config: Dict[str, Any] = field(default_factory=dict)


def _plain(value: Any) -> Any:
    """A data field without its cloudpickle blob (the plain fields SB3 writes beside it stay)."""
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != SERIALIZED}
    return value


def _blob_globals(value: Any, where: str) -> List[Tuple[str, str]]:
    if not isinstance(value, dict) or SERIALIZED not in value:
        return []
    try:
        blob = base64.b64decode(value[SERIALIZED], validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise ConfigError(f"{where}: its {SERIALIZED} field is not base64") from None
    return pickle_globals(blob, where)


_NUMBER = re.compile(r"[-+]?(?:inf|nan|\d+\.?\d*(?:e[-+]?\d+)?|\.\d+(?:e[-+]?\d+)?)", re.I)


def parse_array(text: Any) -> Optional[np.ndarray]:
    """A NumPy array from the repr SB3 writes for a space's low/high/nvec ("[-4.8 -inf 0.42]"), or
    None when it was summarized ("...") or is not such a text."""
    if isinstance(text, (int, float)):
        return np.asarray([text], np.float64)
    if isinstance(text, list):
        return np.asarray(text, np.float64).ravel()
    if not isinstance(text, str) or "..." in text:
        return None
    return np.asarray([float(t) for t in _NUMBER.findall(text)], np.float64)


def space_fields(value: Any, where: str) -> Dict[str, Any]:
    """A space's plain fields: kind (Box, Discrete, MultiDiscrete, MultiBinary, Dict, ...), dtype,
    shape, and low/high (None when SB3 summarized them), n, nvec."""
    if not isinstance(value, dict) or ":type:" not in value:
        raise ConfigError(f"{where}: expected a saved space with a ':type:' field")
    m = re.search(r"spaces\.[a-z_]+\.(\w+)'", str(value[":type:"]))
    out: Dict[str, Any] = {"kind": m.group(1) if m else str(value[":type:"]), "dtype": value.get("dtype"),
                           "shape": tuple(int(s) for s in (value.get("_shape") or ()))}
    for key in ("low", "high", "nvec"):
        if key in value:
            out[key] = parse_array(value[key])
    if "n" in value:
        out["n"] = int(value["n"])
    start = parse_array(value.get("start", "0"))
    if start is None or start.any():
        raise ConfigError(f"{where}: a Discrete space starting at {value['start']} (msrl's actions start at 0)")
    return out


def _algorithm(family: str, data: Dict[str, Any], where: str) -> str:
    if family != "actor_critic":
        return family
    if "cg_max_steps" in data:
        raise ConfigError(f"{where}: an sb3-contrib TRPO model; msrl import reads PPO, A2C, SAC, TD3 and DQN")
    return "ppo" if "clip_range" in data else "a2c"


def _read_zip(path: str) -> Tuple[zipfile.ZipFile, Dict[str, Any]]:
    if not os.path.isfile(path):
        raise ConfigError(f"no such SB3 model file: {path}")
    try:
        zf = zipfile.ZipFile(path)
        names = set(zf.namelist())
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigError(f"{path}: not an SB3 model zip ({exc})") from None
    for need in ("data", "policy.pth"):
        if need not in names:
            raise ConfigError(f"{path}: has no '{need}' entry (an SB3 model zip holds data and policy.pth)")
    try:
        data = json.loads(zf.read("data").decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: its 'data' entry is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: its 'data' entry is not a JSON object")
    return zf, data


def read_model(path: str) -> SB3Model:
    """An SB3 model zip, or an RL Zoo log folder (logs/ALGO/ENV_1/), as an SB3Model."""
    if os.path.isdir(path):
        return read_zoo_folder(path)
    zf, data = _read_zip(path)
    classes = _blob_globals(data.get("policy_class"), f"{path}: data.policy_class")
    if len(classes) != 1:
        raise ConfigError(f"{path}: data.policy_class names {classes or 'no class'}, expected one policy class")
    module, name = classes[0]
    if (module, name) not in POLICY_CLASSES:
        why = REFUSED_POLICIES.get(name, "not one msrl import maps (PPO/A2C MlpPolicy and CnnPolicy, SAC, TD3 and "
                                         "DQN MlpPolicy)")
        raise ConfigError(f"{path}: policy class {module}.{name} is refused: {why}")
    family, image = POLICY_CLASSES[(module, name)]
    rb = str(_plain(data.get("replay_buffer_class") or {}).get(":type:", "")) + str(data.get("replay_buffer_class", ""))
    if "HerReplayBuffer" in rb:
        raise ConfigError(f"{path}: a model trained with HerReplayBuffer (goal-conditioned Dict observations) is refused")
    kwargs = data.get("policy_kwargs") or {}
    model = SB3Model(
        path=path, family=family, algorithm=_algorithm(family, data, path), policy_class=name, image=image,
        data={k: _plain(v) for k, v in data.items()}, policy_kwargs=_plain(kwargs) if isinstance(kwargs, dict) else {},
        kwarg_classes=_blob_globals(kwargs, f"{path}: data.policy_kwargs"),
        observation_space=space_fields(data.get("observation_space"), f"{path}: data.observation_space"),
        action_space=space_fields(data.get("action_space"), f"{path}: data.action_space"),
        state=read_torch_tensors(zf.read("policy.pth"), f"{path}: policy.pth"),
        variables=(read_torch_tensors(zf.read("pytorch_variables.pth"), f"{path}: pytorch_variables.pth")
                   if "pytorch_variables.pth" in zf.namelist() else {}),
        sb3_version=zf.read("_stable_baselines3_version").decode("utf-8", "replace").strip()
        if "_stable_baselines3_version" in zf.namelist() else "")
    return model


class _PlainLoader(yaml.SafeLoader):
    """yaml.SafeLoader that reads a node under an unknown tag (RL Zoo's python tags) as the plain
    mapping, list or string beneath it: nothing is constructed from a tag."""


def _plain_node(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_PlainLoader.add_multi_constructor("", _plain_node)


def read_zoo_config(path: str) -> Dict[str, Any]:
    """RL Zoo's config.yml (an OrderedDict dumped with python tags) as a plain dict."""
    try:
        with open(path, encoding="utf-8") as fh:
            loader = _PlainLoader(fh)  # a SafeLoader: no object is constructed from a tag
            try:
                doc = loader.get_single_data()
            finally:
                loader.dispose()
    except (yaml.YAMLError, OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as YAML ({exc})") from None
    if isinstance(doc, list) and len(doc) == 1 and isinstance(doc[0], list):
        doc = doc[0]  # OrderedDict's apply arguments: [[(key, value), ...]]
    if isinstance(doc, list) and all(isinstance(p, list) and len(p) == 2 for p in doc):
        doc = {str(k): v for k, v in doc}
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: expected a mapping of hyperparameters, found {type(doc).__name__}")
    return doc


def read_zoo_folder(folder: str) -> SB3Model:
    """An RL Zoo log folder logs/ALGO/ENV_1/: ENV.zip, ENV/vecnormalize.pkl, ENV/config.yml."""
    zips = sorted(p for p in glob.glob(os.path.join(folder, "*.zip"))
                  if os.path.isdir(os.path.splitext(p)[0]))
    if len(zips) != 1:
        raise ConfigError(f"{folder}: expected an RL Zoo log folder holding ENV.zip beside its ENV/ directory "
                          f"(found {[os.path.basename(z) for z in zips] or 'none'})")
    env_dir = os.path.splitext(zips[0])[0]
    model = read_model(zips[0])
    cfg_path = os.path.join(env_dir, "config.yml")
    model.zoo_config = read_zoo_config(cfg_path) if os.path.isfile(cfg_path) else {}
    for key in ("frame_stack", "env_wrapper"):
        if model.zoo_config.get(key):
            raise ConfigError(f"{cfg_path}: key '{key}' is {model.zoo_config[key]!r}; msrl import does not rebuild "
                              f"RL Zoo's environment wrappers")
    vn = os.path.join(env_dir, "vecnormalize.pkl")
    model.vecnormalize = vn if os.path.isfile(vn) else None
    model.zoo_env = os.path.basename(env_dir)
    zoo_algo = os.path.basename(os.path.dirname(os.path.abspath(folder)))
    if zoo_algo in ("ppo", "a2c", "sac", "td3", "dqn") and zoo_algo != model.algorithm:
        raise ConfigError(f"{folder}: the folder is under {zoo_algo}/, but {zips[0]} holds a {model.algorithm} model")
    return model
