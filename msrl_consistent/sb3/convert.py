"""An SB3Model as an msrl config and the msrl agent's parameters.

``config_data(model, env_id, vecnormalize)`` maps SB3's algorithm, net_arch, activation and
VecNormalize settings onto msrl's config (the networks msrl builds are then SB3's, layer for layer);
``parameters(model, agent)`` assigns SB3's tensors to the agent's Parameters in layer order,
checking every shape and that no SB3 tensor is left over. What msrl cannot express is refused by
name (ConfigError): another activation, custom feature extractors, gSDE with expln or without
full_std, a squashed PPO output, old-style shared net_arch layers.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..config import ConfigError, build_dataclass
from .archive import SB3Model

ACTIVATIONS = {"Tanh": "tanh", "ReLU": "relu", "ELU": "elu"}
REFUSED_ACTIVATIONS = {"GELU": "msrl's gelu is MindSpore's tanh approximation, SB3's torch.nn.GELU the exact erf form "
                               "(the actions would differ by ~1e-3)"}
DEFAULT_ACTIVATION = {"actor_critic": "tanh", "sac": "relu", "td3": "relu", "dqn": "relu"}
DEFAULT_ARCH = {"actor_critic": [64, 64], "sac": [256, 256], "td3": [400, 300], "dqn": [64, 64]}
MSRL_ALGORITHM = {"ppo": "ppo", "a2c": "ppo", "sac": "sac", "td3": "td3", "dqn": "dqn"}
"""A2C's actor-critic is PPO's network: msrl trains it further as PPO."""

ADMITTED_CLASSES = ("torch.nn.modules.activation.", "torch.optim.", "stable_baselines3.common.sb2_compat.",
                    "stable_baselines3.common.torch_layers.NatureCNN", "stable_baselines3.common.torch_layers.FlattenExtractor")
IGNORED_KWARGS = {"optimizer_class", "optimizer_kwargs"}
"""Policy kwargs that only concern SB3's optimizer: msrl's optimizer starts fresh."""


def _where(model: SB3Model, key: str) -> str:
    return f"{model.path}: data.policy_kwargs.{key}"


def activation(model: SB3Model) -> str:
    """msrl's activation name for the policy kwargs' activation_fn (read from the blob's opcodes)."""
    for module, name in model.kwarg_classes:
        if not any(f"{module}.{name}".startswith(a) for a in ADMITTED_CLASSES):
            raise ConfigError(f"{model.path}: policy_kwargs name the class {module}.{name}; msrl import maps SB3's "
                              f"own layers only (custom feature extractors and layers are refused)")
    acts = [n for m, n in model.kwarg_classes if m == "torch.nn.modules.activation"]
    if not acts:
        return DEFAULT_ACTIVATION[model.family]
    if acts[0] in REFUSED_ACTIVATIONS:
        raise ConfigError(f"{_where(model, 'activation_fn')} is torch.nn.{acts[0]}: {REFUSED_ACTIVATIONS[acts[0]]}")
    if acts[0] not in ACTIVATIONS:
        raise ConfigError(f"{_where(model, 'activation_fn')} is torch.nn.{acts[0]}; msrl has "
                          f"{', '.join('torch.nn.' + a for a in ACTIVATIONS)}")
    return ACTIVATIONS[acts[0]]


def _sizes(value: Any, where: str) -> List[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise ConfigError(f"{where} is {value!r}, expected a list of layer sizes")
    return list(value)


def net_arch(model: SB3Model) -> Tuple[List[int], List[int]]:
    """(actor layers, critic layers) of SB3's net_arch: a list (both), dict(pi=, vf=) or dict(pi=, qf=)."""
    kw = model.policy_kwargs
    critic_key = "vf" if model.family == "actor_critic" else "qf"
    if "net_arch" not in kw or kw["net_arch"] is None:
        arch = [] if model.image else DEFAULT_ARCH[model.family]
        return list(arch), list(arch)
    value = kw["net_arch"]
    where = _where(model, "net_arch")
    if isinstance(value, dict):
        if model.family == "dqn" or set(value) - {"pi", critic_key}:
            raise ConfigError(f"{where} is {value!r}, expected a list" + ("" if model.family == "dqn" else
                              f" or dict(pi=[...], {critic_key}=[...])"))
        return _sizes(value.get("pi", []), where + ".pi"), _sizes(value.get(critic_key, []), f"{where}.{critic_key}")
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        raise ConfigError(f"{where} is {value!r}: layers shared by actor and critic before a dict (SB3 < 1.8's "
                          f"layout) are refused; SB3 2.x networks are separate")
    return _sizes(value, where), _sizes(value, where)


def _check_kwargs(model: SB3Model, use_sde: bool) -> None:  # noqa: C901  (one refusal per policy kwarg)
    kw = model.policy_kwargs
    known = {"net_arch", "activation_fn", "ortho_init", "log_std_init", "full_std", "use_expln", "squash_output",
             "features_extractor_class", "features_extractor_kwargs", "normalize_images", "share_features_extractor",
             "n_critics", "use_sde", "clip_mean"} | IGNORED_KWARGS
    for key in kw:
        if key not in known and key != ":type:":
            raise ConfigError(f"{_where(model, key)}: msrl import does not map the policy kwarg {key!r}")
    if kw.get("squash_output"):
        raise ConfigError(f"{_where(model, 'squash_output')} is true: a tanh-squashed PPO/A2C output is refused "
                          f"(msrl's PPO clips the Gaussian mean to the Box)")
    if use_sde and kw.get("use_expln"):
        raise ConfigError(f"{_where(model, 'use_expln')} is true; msrl's gSDE uses exp(log_std)")
    if use_sde and kw.get("full_std") is False:
        raise ConfigError(f"{_where(model, 'full_std')} is false; msrl's gSDE has the full (latent, actions) log std")
    if kw.get("n_critics", 2) != 2:
        raise ConfigError(f"{_where(model, 'n_critics')} is {kw['n_critics']}; msrl's SAC and TD3 have 2 critics")
    if kw.get("normalize_images") is False:
        raise ConfigError(f"{_where(model, 'normalize_images')} is false; msrl's image cell divides by 255")
    fe = kw.get("features_extractor_kwargs") or {}
    if fe and (not isinstance(fe, dict) or set(fe) != {"features_dim"} or fe["features_dim"] != 512):
        raise ConfigError(f"{_where(model, 'features_extractor_kwargs')} is {fe!r}; msrl's NatureCNN has 512 features")
    if model.image and kw.get("share_features_extractor") is False:
        raise ConfigError(f"{_where(model, 'share_features_extractor')} is false; msrl's image policy has one CNN "
                          f"for actor and critic")


def _algo_section(model: SB3Model, config_cls: type) -> Tuple[Dict[str, Any], List[str]]:
    """The SB3 fields whose names and meaning msrl's algorithm config shares, each kept only when
    msrl's config accepts its value; returns (section, carried keys)."""
    data = model.data
    section: Dict[str, Any] = {}
    candidates = {f.name: data[f.name] for f in dataclasses.fields(config_cls) if f.name in data}
    clip = data.get("clip_range")
    if isinstance(clip, dict):
        m = re.search(r"ConstantSchedule\(val=([-+0-9.e]+)\)", str(clip.get("value_schedule", "")))
        candidates["clip_range"] = float(m.group(1)) if m else None
    if model.family == "sac":
        ent = data.get("ent_coef")
        if isinstance(ent, (int, float)):
            candidates.update(auto_ent_coef=False, init_ent_coef=float(ent))
        elif isinstance(ent, str) and ent.startswith("auto_"):
            candidates.update(init_ent_coef=float(ent[5:]))
    for key, value in candidates.items():
        if isinstance(value, (dict, list)) or value is None and key != "target_kl":
            continue
        try:
            build_dataclass(config_cls, {key: value}, "<sb3>")
        except ConfigError:
            continue
        section[key] = value
    return section, sorted(section)


def config_data(model: SB3Model, env_id: str, vecnorm: Optional[dict], algo_config_cls: type) -> Tuple[dict, dict]:
    """(msrl config data, notes for the summary): the algorithm, env, policy and algo sections."""
    use_sde = bool(model.data.get("use_sde")) or bool(model.policy_kwargs.get("use_sde"))
    if use_sde and model.family != "actor_critic":
        raise ConfigError(f"{model.path}: a {model.algorithm.upper()} model with gSDE (use_sde) is refused; msrl's "
                          f"gSDE is PPO's")
    _check_kwargs(model, use_sde)
    act = activation(model)
    pi, critic = net_arch(model)
    kw = model.policy_kwargs
    policy: Dict[str, Any] = {"net_arch": pi, "critic_arch": critic if critic != pi else None, "activation": act,
                              "ortho_init": bool(kw.get("ortho_init", model.family == "actor_critic"))}
    if "log_std_init" in kw:
        policy["log_std_init"] = float(kw["log_std_init"])
    if model.image:
        policy["cnn"] = "nature"
    env: Dict[str, Any] = {"id": env_id}
    if isinstance(model.data.get("n_envs"), int):
        env["n_envs"] = int(model.data["n_envs"])
    if vecnorm is not None:
        env.update(normalize_obs=bool(vecnorm["norm_obs"]), normalize_obs_clip=float(vecnorm["clip_obs"]),
                   normalize_reward=bool(vecnorm["norm_reward"]), normalize_reward_clip=float(vecnorm["clip_reward"]))
    algo, carried = _algo_section(model, algo_config_cls)
    if model.algorithm == "a2c":  # A2C's step: one pass over the whole rollout (PPO's first epoch, ratio 1)
        algo.update(n_epochs=1, batch_size=int(algo.get("n_steps", 5)) * int(env.get("n_envs", 1)))
    if use_sde:
        algo["use_sde"] = True
    total = model.data.get("num_timesteps") or model.data.get("_total_timesteps") or 0
    data = {"algorithm": MSRL_ALGORITHM[model.algorithm], "total_timesteps": max(int(total), 1),
            "env": env, "policy": policy, "algo": algo}
    return data, {"hyperparameters_carried": carried, "use_sde": use_sde}


# Parameters ----------------------------------------------------------------------------------------
def _order(name: str):
    return [int(p) if p.isdigit() else p for p in name.split(".")]


def _layers(names, prefix: str) -> List[str]:
    """The layer prefixes under ``prefix`` that hold a weight (``prefix`` itself for one layer),
    in numeric order."""
    out = {n[:-len(".weight")] for n in names if n.endswith(".weight") and (n == prefix + ".weight"
                                                                         or n.startswith(prefix + "."))}
    return sorted(out, key=_order)


def layer_map(model: SB3Model, use_sde: bool) -> List[Tuple[str, List[str]]]:
    """(msrl network prefix, SB3 prefixes whose layers it holds, in order) for the model's family."""
    two_q = [("q1.net.layers", ["critic.qf0"]), ("q2.net.layers", ["critic.qf1"]),
             ("q1_target.net.layers", ["critic_target.qf0"]), ("q2_target.net.layers", ["critic_target.qf1"])]
    if model.family == "dqn":
        return [("actor.layers", ["q_net.q_net"]), ("q_target.layers", ["q_net_target.q_net"])]
    if model.family == "sac":
        return [("actor.first.layers", ["actor.latent_pi"]), ("actor.second", ["actor.mu"]),
                ("log_std_head", ["actor.log_std"])] + two_q
    if model.family == "td3":
        return [("actor.layers", ["actor.mu"]), ("actor_target.layers", ["actor_target.mu"])] + two_q
    pi, vf = ["mlp_extractor.policy_net", "action_net"], ["mlp_extractor.value_net", "value_net"]
    if model.image:
        return [("actor.first.convs", ["features_extractor.cnn"]), ("actor.first.fc", ["features_extractor.linear"]),
                ("actor.second.layers", pi), ("critic.second.layers", vf)]
    if use_sde:
        return [("actor.first.layers", pi[:1]), ("actor.second", pi[1:]), ("critic.layers", vf)]
    return [("actor.layers", pi), ("critic.layers", vf)]


def parameters(model: SB3Model, agent_params: Dict[str, tuple], use_sde: bool) -> Dict[str, np.ndarray]:
    """{msrl parameter name: array} for every agent Parameter but the normalizer's, from SB3's
    tensors; a shape that differs, a layer count that differs or an SB3 tensor left over is a
    ConfigError naming both names."""
    state = dict(model.state)
    for copy in ("pi_features_extractor.", "vf_features_extractor."):  # the shared extractor, saved once per name
        for name in [n for n in state if n.startswith(copy)]:
            shared = state.get("features_extractor." + name[len(copy):])
            if shared is None or not np.array_equal(shared, state[name]):
                raise ConfigError(f"{model.path}: policy.pth's {name} differs from the shared features_extractor's; "
                                  f"msrl's image policy has one CNN for actor and critic")
            del state[name]
    out: Dict[str, np.ndarray] = {}
    for msrl_prefix, sb3_prefixes in layer_map(model, use_sde):
        mine = _layers(agent_params, msrl_prefix)
        theirs = [layer for p in sb3_prefixes for layer in _layers(state, p)]
        if len(mine) != len(theirs):
            raise ConfigError(f"{model.path}: policy.pth has {len(theirs)} layers under {', '.join(sb3_prefixes)}, "
                              f"msrl's network {msrl_prefix} has {len(mine)}")
        for m, t in zip(mine, theirs):
            for part in ("weight", "bias"):
                out[f"{m}.{part}"] = state.pop(f"{t}.{part}")
    if "log_std" in agent_params:
        out["log_std"] = state.pop("log_std", None)
    if "log_alpha" in agent_params:
        ent = model.data.get("ent_coef")
        log_alpha = model.variables.get("log_ent_coef")
        if log_alpha is None and isinstance(ent, (int, float)) and ent > 0:
            log_alpha = np.array([math.log(ent)], np.float32)
        out["log_alpha"] = np.asarray(log_alpha if log_alpha is not None else [0.0], np.float32).reshape(1)
    if state:
        raise ConfigError(f"{model.path}: policy.pth holds {sorted(state)[:4]}, which msrl's "
                          f"{MSRL_ALGORITHM[model.algorithm]} network has no place for")
    for name, arr in out.items():
        if arr is None or tuple(arr.shape) != tuple(agent_params[name]):
            raise ConfigError(f"{model.path}: policy.pth's tensor for msrl's {name} has shape "
                              f"{None if arr is None else tuple(arr.shape)}, the network expects {agent_params[name]}")
        out[name] = np.ascontiguousarray(arr, np.float32)
    missing = [n for n in agent_params if n not in out and not n.startswith("normalizer.")]
    if missing:
        raise ConfigError(f"{model.path}: policy.pth has nothing for msrl's parameters {missing[:4]}")
    return out
