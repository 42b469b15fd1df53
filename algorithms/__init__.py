"""Algorithms (installed as ``msrl_consistent.algorithms``).

Layout: ``algorithm.py`` (life cycle, state, resume), ``run.py`` (the run context: logging,
evaluation, checkpoints), ``on_policy.py`` / ``off_policy.py`` (the two loops), ``cells.py``
(graph cells several algorithms use), and one module per algorithm (``ppo.py``, ``sac.py``,
``td3.py``: config, agent, losses, update step). Each algorithm class registers itself
(``@register``) and is found by name through ``msrl_consistent.registry`` (entry points in
pyproject.toml), so importing this package is never needed to load a config.
"""
from .algorithm import Algorithm, NonFiniteError, TrainingInterrupted
from .off_policy import OffPolicyAlgorithm
from .on_policy import OnPolicyAlgorithm
from .ppo import PPO, PPOConfig
from .sac import SAC, SACConfig
from .td3 import TD3, TD3Config

__all__ = ["Algorithm", "NonFiniteError", "OffPolicyAlgorithm", "OnPolicyAlgorithm", "PPO", "PPOConfig", "SAC",
           "SACConfig", "TD3", "TD3Config", "TrainingInterrupted"]
