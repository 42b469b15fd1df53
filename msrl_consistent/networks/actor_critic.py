"""The actor-critic agent of the on-policy algorithms (PPO): an actor (logits or a Gaussian
mean), a critic V(s) and a state-independent log std, behind an optional observation encoder,
with optional gSDE features, a shared trunk or LSTM cores (the recurrent policy).

The exported policy is ``policy_cell()``; the rollout and update graphs read the agent through
``features`` (what the heads read), ``value``, ``dist_params`` and ``distribution``, the same
interface a population's stacked agent offers (algorithms/ppo/members.MembersAgent).
"""
from __future__ import annotations

import numpy as np
from mindspore import Parameter, Tensor, ops

from msrl_consistent.config import ConfigError
from msrl_consistent.deploy.sampling import kinds_of
from msrl_consistent.distributions import action_distribution

from .agents import Agent
from .encoders import obs_encoder, with_encoder
from .heads import DistributionPolicyCell, GaussianOutputs, LogitsOutputs, Part, StateDependentOutputs, make_head
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


class NormalizedRows(Part):
    """Box observations: the heads read the normalized row."""
    stored_width = 0
    """Width of the rows the rollout buffer stores instead of observations (0: the observations)."""

    def __init__(self, normalizer):
        super().__init__()
        self.normalizer = normalizer

    def construct(self, rows):
        return self.normalizer(rows)


class EncodedRows(NormalizedRows):
    """Encoded observations (one-hot, Dict keys, several sensors, a recurrent image policy): the
    heads read the shared encoder's features, one pass for actor and critic (SB3's
    share_features_extractor)."""

    def __init__(self, normalizer, encoder):
        super().__init__(normalizer)
        self.encoder = encoder

    def construct(self, rows):
        return self.encoder(self.normalizer(rows))


class PreprocessedRows(Part):
    """Images: the rollout preprocesses each frame row once (the encoder's ``preprocess``, the
    exported cell's own ops) and the buffer stores the preprocessed rows; the heads read the
    encoder's trunk of them, the numbers ``encoder(raw)`` gives."""

    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder
        self.stored_width = encoder.stored_dim

    def preprocess(self, obs):
        return self.encoder.preprocess(obs)

    def stored(self, pre):
        return self.encoder.stored(pre)

    def preprocess_frame(self, frame):
        return self.encoder.preprocess_frame(frame)

    def construct(self, rows):
        return self.encoder.trunk(rows)


class ActorOutputs(Part):
    """The actor's output (logits or Gaussian mean) from the features; no latent."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return self.net(x), None


class LatentActorOutputs(Part):
    """gSDE: the actor trunk's features (the latent the exploration matrices multiply) and the
    mean head's output on them."""

    def __init__(self, trunk, head):
        super().__init__()
        self.trunk = trunk
        self.head = head

    def construct(self, x):
        latent = self.trunk(x)
        return self.head(latent), latent


class CriticValue(Part):
    """V(s) of shape (batch,) from the features: the critic's network behind the encoder."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def construct(self, x):
        return self.net(x).squeeze(-1)


class ActorCriticAgent(Agent):
    """PPO: actor (logits or Gaussian mean), critic V(s), state-independent log std.

    With ``policy.shared`` the two heads sit on one hidden trunk (one Cell object). With
    ``algo.use_sde`` the actor is ``Chain(trunk, mean head)`` (its trunk's output is gSDE's latent
    features; the same draws from ``rng`` as the single MLP) and log_std is a
    (last hidden size, action dim) matrix, as SB3's full_std gSDE. With ``policy.recurrent`` an
    actor and a critic LSTM sit between the encoder and the networks (``encode``, policy_cell).
    What differs between these is held in three parts chosen here: ``rows`` (what the heads
    read), ``actor_outputs`` and ``critic_value``.
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
        use_sde = bool(getattr(cfg.algo, "use_sde", False))
        if use_sde and spec.discrete:
            raise ConfigError(f"key 'algo.use_sde' is true, but gSDE needs a Box (continuous) action space; "
                              f"{cfg.env.id} has {spec.act_kind}({spec.n_actions}) actions (set algo.use_sde: false)")
        if use_sde and encoder is not None:
            raise ConfigError(f"key 'algo.use_sde' is true, but gSDE takes Box observations; {cfg.env.id} has "
                              f"{spec.obs_kind} observations (set algo.use_sde: false)")
        trunk = None
        if pc.shared or use_sde:
            trunk = MLP(rng, obs_dim, pc.net_arch, pc.activation, ortho=pc.ortho_init)
            self.actor = Chain(trunk, dense(rng, trunk.out_dim, out, 0.01, pc.ortho_init))
        if pc.shared:  # the critic head on the actor's trunk (one Cell object)
            self.critic = Chain(trunk, dense(rng, trunk.out_dim, 1, 1.0, pc.ortho_init))
        else:
            if not use_sde:
                self.actor = MLP(rng, obs_dim, pc.net_arch, pc.activation, out, 0.01, pc.ortho_init)
            self.critic = MLP(rng, obs_dim, pc.critic_arch or pc.net_arch, pc.activation, 1, 1.0, pc.ortho_init)
        actor_net, critic_net = self.actor, self.critic
        # actor = Chain(encoder, net), critic = Chain(encoder, net): the exported policy is the actor
        # Chain; the rollout and the loss run the (shared) encoder once for both heads (``rows``)
        self.actor, self.critic = with_encoder(encoder, self.actor), with_encoder(encoder, self.critic)
        self.log_std = None  # discrete actions: the logits are the whole distribution
        self.sde_shape = None  # gSDE: the shape of log_std, the exploration matrices' (latent, actions)
        if not spec.discrete:
            self.sde_shape = (trunk.out_dim, out) if use_sde else None
            self.log_std = Parameter(Tensor(np.full(self.sde_shape or (out,), pc.log_std_init, np.float32)),
                                     name="log_std")
        # the parts, after the owners above (a Parameter's checkpoint name is its first path)
        reader = self.obs_encoder if self.recurrent else encoder
        if spec.obs_kind == "Image" and not self.recurrent:  # a recurrent one encodes in its loss
            self.rows = PreprocessedRows(encoder)
        else:
            self.rows = NormalizedRows(self.normalizer) if reader is None else EncodedRows(self.normalizer, reader)
        self.actor_outputs = LatentActorOutputs(actor_net.first, actor_net.second) if use_sde else ActorOutputs(actor_net)
        self.critic_value = CriticValue(critic_net)

    def policy_cell(self):
        if not self.recurrent:
            return super().policy_cell()
        return RecurrentPolicyCell(self.normalizer, self.obs_encoder, self.lstm_actor, self.actor,
                                   make_head(self.spec, self.squash))

    def distribution_cell(self):
        """The policy cell with the distribution's parameters as further outputs (deploy.sampling):
        the logits; the Gaussian's mean and std; gSDE's mean, state-dependent std and latent (a
        recurrent policy's after its next state)."""
        head, scale = make_head(self.spec, self.squash), None
        if self.sde_shape:
            outputs = StateDependentOutputs(self.actor_outputs.trunk, self.actor_outputs.head, self.log_std)
            scale = ops.exp(self.log_std).asnumpy()  # the Exp kernel training's exploration matrices use
        elif self.spec.discrete:
            outputs = LogitsOutputs(self.actor)
        else:
            outputs = GaussianOutputs(self.actor, self.log_std)
        kind = "state_dependent_gaussian" if self.sde_shape else kinds_of(self.spec)[0]
        if self.recurrent:
            return RecurrentPolicyCell(self.normalizer, self.obs_encoder, self.lstm_actor, self.actor, head,
                                       outputs=outputs, kind=kind, sde_scale=scale)
        return DistributionPolicyCell(self.normalizer, outputs, head, kind, scale)

    def distribution(self):
        """The action distribution (distributions.action_distribution): one object per graph that samples
        or scores actions; it holds no Parameter."""
        return action_distribution(self.spec, self.sde_shape)

    def features(self, rows):
        """What the heads read (a recurrent policy's LSTMs), from the rows the rollout buffer stores
        (``rows``)."""
        return self.rows(rows)

    def value(self, x):
        """V(s) of shape (batch,) from ``features``' output or a recurrent policy's critic LSTM output."""
        return self.critic_value(x)

    def dist_params(self, x):
        """The distribution's ``(out, latent, log_std)`` from ``features``' output or a recurrent
        policy's actor LSTM output: the actor's output (logits or mean) and, with gSDE, the actor
        trunk's features from which the mean is computed."""
        out, latent = self.actor_outputs(x)
        return out, latent, self.log_std
