"""The graphs of a PPO population: K members' networks stacked on a leading axis for the update
phase (one BatchMatMul per layer for all K; the loss, step and phase are one run's, ppo.PPOLoss
and update.py's, on a MembersAgent), and the members' own rollout and value cells side by side
in one acting graph.

Acting runs each member's ordinary cells (the MatMul of the exported policy cell), so the
actions a member takes while training are the ones its exported cell computes, bit for bit;
a stacked BatchMatMul's slice is not always bit-identical to MatMul on this CPU (measured), so
it serves the update alone. The update phase trains stacked copies of the members' Parameters
and writes every member's slice back into the member's own Parameters at its end, in the same
graph; the members' optimizer state is copied out on the host when a checkpoint needs it.
"""
from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn, ops

from msrl_consistent.distributions import Categorical, Gaussian
from msrl_consistent.networks.stacked import StackedMLP, stack_parameter
from msrl_consistent.normalization import ObsNormalizer


class MembersAgent(nn.Cell):
    """The members' actor, critic and (Box actions) log std on a leading member axis: the update
    phase's agent. It offers networks.actor_critic.ActorCriticAgent's interface to PPOLoss (``features``, ``value``,
    ``dist_params``, ``distribution``), so the one loss trains one run or K members; every array
    it reads is (members, rows, ...) and every output one per member."""

    def __init__(self, agents):
        super().__init__()
        a0 = agents[0]
        self.members = len(agents)
        # an encoded observation (one-hot, Dict keys): the members' networks behind their encoder,
        # which has no Parameter (population.PPOPopulation refuses one that has: an image's CNN)
        self.encoder = getattr(a0.rows, "encoder", None)
        self.actor = StackedMLP([a.actor_outputs.net for a in agents], "actor")
        self.critic = StackedMLP([a.critic_value.net for a in agents], "critic")
        self.discrete = a0.log_std is None
        self.log_std = None if self.discrete else stack_parameter([a.log_std for a in agents], "log_std")
        # the members' observation statistics (members, 1, obs_dim), written before each update phase
        n = a0.normalizer
        self.normalizer = ObsNormalizer((self.members, 1) + tuple(n.mean.shape), n.enabled, n.clip, n.eps)
        self.dist = a0.distribution()

    def set_stats(self, agents) -> None:
        """The members' normalizer statistics, stacked into this agent's."""
        for name in ("mean", "var"):
            rows = np.stack([getattr(a.normalizer, name).asnumpy() for a in agents])[:, None, :]
            getattr(self.normalizer, name).copy_(Tensor(rows))

    def distribution(self):
        return self.dist

    def encode(self, x):
        """The encoder's features of rows (K, n, obs_dim) -> (K, n, features): the members' own
        encoder's ops on the rows of all K at once (it holds no Parameter)."""
        if self.encoder is None:
            return x
        k, n = x.shape[0], x.shape[1]
        f = self.encoder(x.reshape((k * n, x.shape[2])))
        return f.reshape((k, n, f.shape[1]))

    def features(self, obs):
        return self.encode(self.normalizer(obs))

    def value(self, x):
        return self.critic(x).squeeze(-1)

    def dist_params(self, x):
        return self.actor(x), None, self.rows_log_std()

    def rows_log_std(self):
        """The members' log std as (members, 1, actions), broadcast over the rows (None: Discrete)."""
        return None if self.discrete else ops.expand_dims(self.log_std, 1)

    def pairs(self, agents):
        """(stacked Parameter, [member k's Parameter]) for every trainable Parameter of the members."""
        out = self.actor.pairs() + self.critic.pairs()
        if not self.discrete:
            out.append((self.log_std, [a.log_std for a in agents]))
        return out


class PopulationRollout(nn.Cell):
    """One acting graph for all K members: obs (K, n, obs_dim) and noise (K, n, ...) ->
    (env action, action, log_prob, value) with a leading member axis, as PPORollout's.

    The distribution's parameters (logits, Gaussian mean) come from each member's own normalizer
    and actor cells, the exported policy cell's ops at its shapes, so a member acts on exactly the
    numbers its exported cell computes. The critic (not exported) and the sampling arithmetic
    run stacked: the critic on the stacked Parameters the update phase trains (equal to the
    members' after each phase), the sample elementwise on the stacked distribution parameters."""

    def __init__(self, agents, stacked: MembersAgent):
        super().__init__()
        self.agents = nn.CellList(list(agents))
        self.stacked = stacked
        self.dist = stacked.distribution()
        self.normalize = stacked.normalizer.enabled
        self.k = len(agents)

    def construct(self, obs, noise):
        xs = [self.agents[k].normalizer(obs[k]) for k in range(self.k)]
        out = ops.stack([self.agents[k].actor(xs[k]) for k in range(self.k)])
        x = ops.stack(xs) if self.normalize else obs
        value = self.stacked.value(self.stacked.encode(x))
        env_action, action, log_prob = self.dist.sample((out, None, self.stacked.rows_log_std()), noise)
        return env_action, action, log_prob, value


class PopulationValue(nn.Cell):
    """V(s) of every member on the stacked critic: obs (K, n, obs_dim) -> (K, n)."""

    def __init__(self, agents, stacked: MembersAgent):
        super().__init__()
        self.agents = nn.CellList(list(agents))
        self.stacked = stacked
        self.normalize = stacked.normalizer.enabled
        self.k = len(agents)

    def construct(self, obs):
        x = ops.stack([self.agents[k].normalizer(obs[k]) for k in range(self.k)]) if self.normalize else obs
        return self.stacked.value(self.stacked.encode(x))


def supported_distribution(dist) -> bool:
    """The action distributions the members' loss takes on a member axis: Categorical and the
    diagonal Gaussian."""
    return type(dist) in (Categorical, Gaussian)
