"""MLP trunks, action heads and the deterministic policy cell (obs-norm -> net -> action head).

Weights are initialized on the host from the run's seeded NumPy Generator (orthogonal
init as in Stable-Baselines3 / CleanRL), so initialization is reproducible independently
of MindSpore's random kernels.

:class:`PolicyCell` is the export target. It holds *the same* normalizer and actor
sub-cells (the same Parameter objects) that the training losses use, followed by the
action post-processing of the consistency contract:

* discrete: ``argmax`` of the logits, as int32 (int32 inside the cell so ONNX Runtime
  loads the exported graph);
* continuous, unsquashed (PPO): the mean clipped to the Box bounds;
* continuous, squashed (SAC, TD3): ``low + (tanh(u) + 1) / 2 * (high - low)``, clipped.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from .normalization import ObsNormalizer

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "gelu": nn.GELU}


def orthogonal(rng: np.random.Generator, out_dim: int, in_dim: int, gain: float) -> np.ndarray:
    """Orthogonal matrix (Saxe et al. 2014), computed with NumPy from the given Generator."""
    a = rng.standard_normal((max(out_dim, in_dim), min(out_dim, in_dim)))
    q, r = np.linalg.qr(a)
    q *= np.sign(np.diag(r))
    if out_dim < in_dim:
        q = q.T
    return (gain * q[:out_dim, :in_dim]).astype(np.float32)


def dense(rng: np.random.Generator, in_dim: int, out_dim: int, gain: float, ortho: bool = True) -> nn.Dense:
    """nn.Dense with host-side init: orthogonal(gain) and zero bias, or PyTorch's uniform default."""
    if ortho:
        w = orthogonal(rng, out_dim, in_dim, gain)
        b = np.zeros(out_dim, np.float32)
    else:
        bound = 1.0 / np.sqrt(in_dim)
        w = rng.uniform(-bound, bound, (out_dim, in_dim)).astype(np.float32)
        b = rng.uniform(-bound, bound, (out_dim,)).astype(np.float32)
    return nn.Dense(in_dim, out_dim, weight_init=Tensor(w), bias_init=Tensor(b))


class MLP(nn.Cell):
    """Dense -> activation, for each hidden size; optional output layer without activation."""

    def __init__(self, rng, in_dim: int, hidden: Sequence[int], activation: str,
                 out_dim: Optional[int] = None, out_gain: float = 1.0, ortho: bool = True,
                 out_activation: Optional[str] = None):
        super().__init__()
        layers: List[nn.Cell] = []
        d = in_dim
        for h in hidden:
            layers += [dense(rng, d, h, float(np.sqrt(2.0)), ortho), ACTIVATIONS[activation]()]
            d = h
        if out_dim is not None:
            layers.append(dense(rng, d, out_dim, out_gain, ortho))
            d = out_dim
            if out_activation:
                layers.append(ACTIVATIONS[out_activation]())
        self.out_dim = d
        self.layers = nn.SequentialCell(layers)

    def construct(self, x):
        return self.layers(x)


class Chain(nn.Cell):
    """``second(first(x))``: lets a shared trunk feed two heads without copying it."""

    def __init__(self, first: nn.Cell, second: nn.Cell):
        super().__init__()
        self.first = first
        self.second = second

    def construct(self, x):
        return self.second(self.first(x))


# ---------------------------------------------------------------------------------------
# Action heads: the post-processing that turns network output into the environment action
# ---------------------------------------------------------------------------------------
class ArgmaxHead(nn.Cell):
    def __init__(self):
        super().__init__()
        self.argmax = ops.Argmax(axis=-1, output_type=ms.int32)

    def construct(self, logits):
        return self.argmax(logits)


class ClipHead(nn.Cell):
    """Clip to the Box bounds (PPO's Gaussian mean)."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.low = Tensor(np.asarray(low, np.float32))
        self.high = Tensor(np.asarray(high, np.float32))

    def construct(self, x):
        return ops.clip_by_value(x, self.low, self.high)


class TanhScaleHead(nn.Cell):
    """``low + (tanh(u) + 1) * (high - low) / 2``, clipped to [low, high] against rounding."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        low = np.asarray(low, np.float32)
        high = np.asarray(high, np.float32)
        self.low = Tensor(low)
        self.high = Tensor(high)
        self.half_range = Tensor(((high - low) / 2.0).astype(np.float32))

    def construct(self, u):
        a = self.low + (ops.tanh(u) + 1.0) * self.half_range
        return ops.clip_by_value(a, self.low, self.high)


class IdentityHead(nn.Cell):
    """No post-processing. Only for tests that prove `msrl verify` catches a missing head."""

    def construct(self, x):
        return x


class PolicyCell(nn.Cell):
    """The deterministic policy: normalizer -> actor network -> action head, one graph."""

    def __init__(self, normalizer: ObsNormalizer, actor: nn.Cell, head: nn.Cell):
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        self.head = head

    def construct(self, obs):
        return self.head(self.actor(self.normalizer(obs)))


class CastIO(nn.Cell):
    """float32 in and out around a cell that computes in float16 (fp16 deployment emulation)."""

    def __init__(self, cell: nn.Cell, discrete: bool):
        super().__init__()
        self.cell = cell
        self.discrete = discrete

    def construct(self, obs):
        out = self.cell(ops.cast(obs, ms.float16))
        if self.discrete:
            return out
        return ops.cast(out, ms.float32)


def make_head(spec, squash: bool) -> nn.Cell:
    if spec.discrete:
        return ArgmaxHead()
    if squash:
        return TanhScaleHead(spec.act_low, spec.act_high)
    return ClipHead(spec.act_low, spec.act_high)


def named_parameters(cell: nn.Cell) -> dict:
    """{full name: Parameter} of a cell, each Parameter once."""
    return {name: p for name, p in cell.parameters_and_names()}


# ---------------------------------------------------------------------------------------
# Agents: every network of an algorithm, built from (config, spaces, Generator). The
# training losses (algorithms/) and the exported PolicyCell use these same sub-cells.
# ---------------------------------------------------------------------------------------
class ActorCriticAgent(nn.Cell):
    """PPO: actor (logits or Gaussian mean), critic V(s), state-independent log std.

    With ``policy.shared`` the two heads sit on one hidden trunk (one Cell object).
    """
    squash = False

    def __init__(self, cfg, spec, rng: np.random.Generator):
        super().__init__()
        pc = cfg.policy
        obs_dim, out = spec.obs_dim, spec.n_actions
        self.spec = spec
        self.normalizer = ObsNormalizer(obs_dim, cfg.env.normalize_obs, cfg.env.normalize_obs_clip)
        if pc.shared:
            trunk = MLP(rng, obs_dim, pc.net_arch, pc.activation, ortho=pc.ortho_init)
            self.actor = Chain(trunk, dense(rng, trunk.out_dim, out, 0.01, pc.ortho_init))
            self.critic = Chain(trunk, dense(rng, trunk.out_dim, 1, 1.0, pc.ortho_init))
        else:
            self.actor = MLP(rng, obs_dim, pc.net_arch, pc.activation, out, 0.01, pc.ortho_init)
            self.critic = MLP(rng, obs_dim, pc.critic_arch or pc.net_arch, pc.activation, 1, 1.0, pc.ortho_init)
        if not spec.discrete:
            self.log_std = Parameter(Tensor(np.full(out, pc.log_std_init, np.float32)), name="log_std")

    def policy_cell(self, head: Optional[nn.Cell] = None) -> PolicyCell:
        return PolicyCell(self.normalizer, self.actor, head or make_head(self.spec, self.squash))


AGENTS = {"ppo": ActorCriticAgent}


def build_agent(cfg, spec, rng: np.random.Generator) -> nn.Cell:
    """The agent of ``cfg.algorithm`` (registered in AGENTS)."""
    try:
        cls = AGENTS[cfg.algorithm]
    except KeyError:
        raise ValueError(f"no agent networks registered for algorithm {cfg.algorithm!r}") from None
    return cls(cfg, spec, rng)
