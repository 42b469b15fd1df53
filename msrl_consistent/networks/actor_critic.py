"""The actor-critic agent of the on-policy algorithms (PPO): an actor (logits or a Gaussian
mean), a critic V(s) and a state-independent log std, behind an optional observation encoder,
with optional gSDE features, a shared trunk or LSTM cores (the recurrent policy).

The exported policy is ``policy_cell()``; the rollout and update graphs read the agent through
``features`` (what the heads read), ``value``, ``dist_params`` and ``distribution``, the same
interface a population's stacked agent offers (algorithms/ppo/members.MembersAgent).
"""
from __future__ import annotations

import numpy as np
from mindspore import Parameter, Tensor

from msrl_consistent.config import ConfigError
from msrl_consistent.distributions import action_distribution

from .agents import Agent
from .encoders import obs_encoder, with_encoder
from .heads import make_head
from .lstm import LSTM, RecurrentPolicyCell
from .mlp import MLP, Chain, dense


def check_recurrent(cfg, spec) -> None:
    """Refuse what the recurrent policy does not build (each a ConfigError naming the key)."""
    pc = cfg.policy
    if pc.shared:
        raise ConfigError("key 'policy.recurrent' is true together with policy.shared; the recurrent policy has "
                          "separate actor and critic LSTMs and networks: set policy.shared: false")
    if spec.frame_stack > 1:
        raise ConfigError(f"key 'env.frame_stack' is {spec.frame_stack} with policy.recurrent; the LSTM is the "
                          f"policy's memory: set env.frame_stack: 1")


class ActorCriticAgent(Agent):
    """PPO: actor (logits or Gaussian mean), critic V(s), state-independent log std.

    With ``policy.shared`` the two heads sit on one hidden trunk (one Cell object). With
    ``algo.use_sde`` the actor is ``Chain(trunk, mean head)`` (its trunk's output is gSDE's latent
    features; the same draws from ``rng`` as the single MLP) and log_std is a
    (last hidden size, action dim) matrix, as SB3's full_std gSDE.
    """
    squash = False
    recurrent_support = True

    def __init__(self, cfg, spec, rng: np.random.Generator):
        super().__init__(cfg, spec)
        pc = cfg.policy
        encoder, obs_dim = obs_encoder(spec, rng, pc, cfg.device)  # one-hot / Dict keys / image CNN, inside the cell
        out = spec.logits_dim
        self.recurrent = bool(pc.recurrent)
        self.obs_encoder = None
        if self.recurrent:  # the encoder, then an actor and a critic LSTM, then the networks (ppo/recurrent.py)
            check_recurrent(cfg, spec)
            self.lstm_actor = LSTM(rng, obs_dim, pc.lstm_hidden_size)
            self.lstm_critic = LSTM(rng, obs_dim, pc.lstm_hidden_size)
            self.state_size = pc.lstm_hidden_size
            self.obs_encoder, encoder, obs_dim = encoder, None, pc.lstm_hidden_size
        self.use_sde = bool(getattr(cfg.algo, "use_sde", False))
        if self.use_sde and spec.discrete:
            raise ConfigError(f"key 'algo.use_sde' is true, but gSDE needs a Box (continuous) action space; "
                              f"{cfg.env.id} has {spec.act_kind}({spec.n_actions}) actions (set algo.use_sde: false)")
        if self.use_sde and encoder is not None:
            raise ConfigError(f"key 'algo.use_sde' is true, but gSDE takes Box observations; {cfg.env.id} has "
                              f"{spec.obs_kind} observations (set algo.use_sde: false)")
        latent_dim = None
        if pc.shared or self.use_sde:
            trunk = MLP(rng, obs_dim, pc.net_arch, pc.activation, ortho=pc.ortho_init)
            self.actor = Chain(trunk, dense(rng, trunk.out_dim, out, 0.01, pc.ortho_init))
            latent_dim = trunk.out_dim
        if pc.shared:  # the critic head on the actor's trunk (one Cell object)
            self.critic = Chain(trunk, dense(rng, trunk.out_dim, 1, 1.0, pc.ortho_init))
        else:
            if not self.use_sde:
                self.actor = MLP(rng, obs_dim, pc.net_arch, pc.activation, out, 0.01, pc.ortho_init)
            self.critic = MLP(rng, obs_dim, pc.critic_arch or pc.net_arch, pc.activation, 1, 1.0, pc.ortho_init)
        self.actor, self.critic = with_encoder(encoder, self.actor), with_encoder(encoder, self.critic)
        # actor = Chain(encoder, net), critic = Chain(encoder, net): the rollout and the loss run the
        # (shared) encoder once for both heads (SB3's share_features_extractor); the exported
        # policy is the actor Chain
        self.encoded = encoder is not None
        # an image's preprocessing runs once per frame row, in the rollout cell; the update phase
        # trains from the preprocessed rows it stored (ppo.PreEncodedRollout, ``features``)
        self.preencode = spec.obs_kind == "Image" and not self.recurrent  # a recurrent one encodes in its loss
        self.log_std = None  # discrete actions: the logits are the whole distribution
        if not spec.discrete:
            shape = (latent_dim, out) if self.use_sde else (out,)
            self.log_std = Parameter(Tensor(np.full(shape, pc.log_std_init, np.float32)), name="log_std")

    def policy_cell(self):
        if not self.recurrent:
            return super().policy_cell()
        return RecurrentPolicyCell(self.normalizer, self.obs_encoder, self.lstm_actor, self.actor,
                                   make_head(self.spec, self.squash))

    def encode(self, obs):
        """A recurrent policy's LSTM input: the normalized row, encoded (one-hot, Dict keys, an image's
        preprocessing and CNN)."""
        x = self.normalizer(obs)
        if self.obs_encoder is not None:
            x = self.obs_encoder(x)
        return x

    def distribution(self):
        """The action distribution (distributions.action_distribution): one object per graph that samples
        or scores actions; it holds no Parameter."""
        return action_distribution(self.spec, tuple(self.log_std.shape) if self.use_sde else None)

    def features(self, rows):
        """What the heads read, from the rows the rollout buffer stores: the shared encoder's
        features (one pass for actor and critic; from an image policy's preprocessed rows, the
        encoder's trunk only), or the normalized Box row."""
        if self.preencode:
            return self.actor.first.trunk(rows)
        x = self.normalizer(rows)
        if self.encoded:
            return self.actor.first(x)
        return x

    def value(self, x):
        """V(s) of shape (batch,) from ``features``' output (the critic's head behind the encoder)."""
        return (self.critic.second(x) if self.encoded else self.critic(x)).squeeze(-1)

    def dist_params(self, x):
        """The distribution's ``(out, latent, log_std)`` from ``features``' output (or a recurrent
        policy's LSTM output): the actor's output (logits or mean); with gSDE the actor trunk's
        features, from which the mean is computed."""
        if self.use_sde:
            latent = self.actor.first(x)
            return self.actor.second(latent), latent, self.log_std
        return (self.actor.second(x) if self.encoded else self.actor(x)), None, self.log_std
