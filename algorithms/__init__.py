"""Algorithms (installed as ``msrl_consistent.algorithms``): registry name -> class."""
from msrl_consistent.config import register_algorithm_config

from .base import Algorithm, OffPolicyAlgorithm, OnPolicyAlgorithm
from .ppo import PPO, PPOConfig
from .sac import SAC, SACConfig
from .td3 import TD3, TD3Config

ALGORITHMS = {"ppo": PPO, "sac": SAC, "td3": TD3}

for _name, _cls in ALGORITHMS.items():
    register_algorithm_config(_name, _cls.config_cls)


def get_algorithm(name: str):
    return ALGORITHMS[name]


__all__ = ["ALGORITHMS", "Algorithm", "OffPolicyAlgorithm", "OnPolicyAlgorithm", "PPO", "PPOConfig",
           "SAC", "SACConfig", "TD3", "TD3Config", "get_algorithm"]
