"""Algorithms (installed as ``msrl_consistent.algorithms``).

Layout: ``algorithm.py`` (life cycle, state, resume), ``on_policy.py`` and ``off_policy.py``
with ``off_policy_loop.py`` (the two families' bases and loops, each serving one run and a
population), ``cells.py`` (graph cells several algorithms use), one place per algorithm
(``ppo/``, ``sac.py``, ``td3.py``, ``dqn.py``: config, agent, losses, update steps, hooks) and
``offpolicy_population.py`` (the population of any off-policy algorithm). Each algorithm class
registers itself (``@register``) and is found by name through ``msrl_consistent.registry``
(entry points in pyproject.toml), so importing this package is never needed to load a config.
"""
from .algorithm import Algorithm, NonFiniteError, TrainingInterrupted
from .dqn import DQN, DQNConfig
from .off_policy import OffPolicyAlgorithm
from .on_policy import OnPolicyAlgorithm
from .ppo import PPO, PPOConfig
from .sac import SAC, SACConfig
from .td3 import TD3, TD3Config

__all__ = ["Algorithm", "DQN", "DQNConfig", "NonFiniteError", "OffPolicyAlgorithm", "OnPolicyAlgorithm", "PPO", "PPOConfig", "SAC",
           "SACConfig", "TD3", "TD3Config", "TrainingInterrupted"]
