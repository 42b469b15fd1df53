"""Algorithms (installed as ``msrl_consistent.algorithms``): registry name -> class."""
from msrl_consistent.config import register_algorithm_config

from .base import Algorithm, OnPolicyAlgorithm
from .ppo import PPO, PPOConfig

ALGORITHMS = {"ppo": PPO}

for _name, _cls in ALGORITHMS.items():
    register_algorithm_config(_name, _cls.config_cls)


def get_algorithm(name: str):
    return ALGORITHMS[name]


__all__ = ["ALGORITHMS", "Algorithm", "OnPolicyAlgorithm", "PPO", "PPOConfig", "get_algorithm"]
