"""Agents: every network of an algorithm, built from (config, spaces, Generator), and the
building blocks the off-policy agents share. Each algorithm defines its agent
(algorithms/ppo.py, sac.py, td3.py: ``agent_cls``); the training losses and the exported
PolicyCell use the same sub-cells."""
from __future__ import annotations

from typing import Sequence

import numpy as np
from mindspore import Tensor, nn, ops

from ..normalization import ObsNormalizer
from .heads import DistributionPolicyCell, PolicyCell, make_head
from .mlp import MLP


def named_parameters(cell: nn.Cell) -> dict:
    """{full name: Parameter} of a cell, each Parameter once."""
    return {name: p for name, p in cell.parameters_and_names()}


class Agent(nn.Cell):
    """Base of every agent: ``normalizer``, ``actor`` (network output before the action head),
    ``spec`` and ``squash``; ``policy_cell`` is the deterministic policy cell built from them.
    Subclasses call ``super().__init__(cfg, spec)`` (spec and normalizer), then build their networks."""
    squash = False
    recurrent_support = False
    """Whether the agent builds ``policy.recurrent`` (PPO's does)."""
    state_size = 0
    """A recurrent agent's LSTM units (its policy cell takes and returns h and c of this size); 0 otherwise."""

    def __init__(self, cfg, spec):
        super().__init__()
        self.spec = spec
        if getattr(cfg.policy, "recurrent", False) and not self.recurrent_support:
            from ..config import ConfigError
            raise ConfigError(f"key 'policy.recurrent' is true, but algorithm {cfg.algorithm!r} has no recurrent "
                              f"policy (ppo has): set policy.recurrent: false")
        if cfg.env.normalize_obs and (spec.obs_kind == "Image" or spec.column_n.any()):
            from ..config import ConfigError
            raise ConfigError(f"key 'env.normalize_obs' is true, but the observation space ({spec.obs_kind}) holds "
                              f"Discrete indices or image pixels (encoded inside the policy cell); observation "
                              f"normalization applies to Box observations: set env.normalize_obs: false")
        self.normalizer = ObsNormalizer(spec.obs_dim, cfg.env.normalize_obs, cfg.env.normalize_obs_clip)

    def policy_cell(self) -> PolicyCell:
        return PolicyCell(self.normalizer, self.actor, make_head(self.spec, self.squash))

    def distribution_cell(self) -> DistributionPolicyCell:
        """The policy cell with its action distribution's parameters as further outputs
        (deploy.sampling); a deterministic policy (TD3, DQN) has none."""
        from ..config import ConfigError
        raise ConfigError(f"--outputs distribution: {type(self).__name__}'s policy is deterministic (no action "
                          f"distribution to export); export --outputs action")


# ---------------------------------------------------------------------------------------
# Building blocks of the off-policy agents (SAC, TD3). Conventions shared by both:
#
# * Box actions only (a Discrete space is a ConfigError naming the space).
# * ``actor`` outputs the pre-tanh action ``u``; ``policy_cell()`` appends TanhScaleHead
#   (``squash = True``), so the exported deterministic action is
#   ``low + (tanh(u) + 1) / 2 * (high - low)``, clipped.
# * The critics see ``concat(normalized obs, normalized action)`` where the normalized
#   action is ``tanh(u)`` in [-1, 1] (not the Box units), as Stable-Baselines3 stores and
#   feeds ``scale_action(a)``: the critics' inputs do not depend on the Box bounds, and the
#   replay buffer stores normalized actions.
# * Target networks are non-trainable Parameters (requires_grad=False), copied from the
#   online networks at construction; the Polyak update runs inside the training graph.
# * SB3 / the papers use PyTorch's default (uniform) initialization for SAC and TD3: the
#   configs set ``policy.ortho_init: false`` and ``policy.activation: relu`` accordingly.
# ---------------------------------------------------------------------------------------
def require_box(spec, algorithm: str) -> None:
    from ..config import ConfigError
    if spec.discrete:
        raise ConfigError(f"{algorithm} needs a Box (continuous) action space; the environment has "
                          f"{spec.act_kind}({spec.n_actions if spec.act_kind != 'MultiDiscrete' else list(spec.nvec)}) actions "
                          f"(use ppo for discrete actions)")
    if spec.obs_kind != "Box":
        raise ConfigError(f"{algorithm} needs Box observations; the environment has {spec.obs_kind} "
                          f"observations (use ppo, which encodes them inside the policy cell)")


class QNetwork(nn.Cell):
    """Q(s, a) = MLP(concat(normalized obs, normalized action)) -> shape (batch,)."""

    def __init__(self, rng, obs_dim: int, act_dim: int, hidden: Sequence[int], activation: str, ortho: bool):
        super().__init__()
        self.net = MLP(rng, obs_dim + act_dim, hidden, activation, 1, 1.0, ortho)

    @classmethod
    def around(cls, net: nn.Cell) -> "QNetwork":
        """A QNetwork computing with ``net`` (a population's stacked copy of the members' nets)."""
        q = cls.__new__(cls)
        nn.Cell.__init__(q)
        q.net = net
        return q

    def construct(self, x, a):
        return self.net(ops.concat((x, a), -1)).squeeze(-1)


def frozen_copy(make, source: nn.Cell) -> nn.Cell:
    """A target network: ``make(throwaway_rng)`` built with the same shapes, its Parameters
    set to copies of ``source``'s and marked non-trainable (requires_grad=False)."""
    target = make(np.random.default_rng(0))  # weights overwritten below; keeps the run's stream untouched
    src = list(source.get_parameters())
    dst = list(target.get_parameters())
    assert len(src) == len(dst)
    for s, d in zip(src, dst):
        assert tuple(s.shape) == tuple(d.shape)
        d.set_data(Tensor(s.asnumpy().copy()))
        d.requires_grad = False
    return target
