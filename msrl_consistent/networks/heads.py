"""Action heads and the deterministic policy cell (obs-norm -> net -> action head).

:class:`PolicyCell` is the export target. It holds *the same* normalizer and actor sub-cells
(the same Parameter objects) that the training losses use, followed by the action
post-processing of the consistency contract:

* discrete: ``argmax`` of the logits, as int32 (int32 inside the cell so ONNX Runtime loads the
  exported graph); MultiDiscrete / MultiBinary: the mode of each dimension, int32;
* continuous, unsquashed (PPO): the mean clipped to the Box bounds;
* continuous, squashed (SAC, TD3): ``low + (tanh(u) + 1) / 2 * (high - low)``, clipped, with the
  correctly rounded Pow form of tanh (mlp.pow_tanh).
"""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops

from ..distributions import sde_std
from ..normalization import ObsNormalizer
from .mlp import pow_tanh


class ArgmaxHead(nn.Cell):
    """argmax over the logits, cast to int32 inside the cell: MindSpore's ONNX writer emits an
    argmax output as an int32 Cast behind an int64-declared output, which ONNX Runtime
    refuses to load; an explicit int32 cast gives a graph it loads."""

    def construct(self, logits):
        return ops.cast(ops.argmax(logits, -1), ms.int32)


class ModeHead(nn.Cell):
    """The mode of a per-dimension discrete distribution (distributions.MultiCategorical: argmax
    of each logit segment; Bernoulli: logit > 0), int32 of shape (B, dims)."""

    def __init__(self, dist: nn.Cell):
        super().__init__()
        self.dist = dist

    def construct(self, logits):
        return self.dist.mode(logits)


class ClipHead(nn.Cell):
    """Clip to the Box bounds (PPO's Gaussian mean)."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.low = Tensor(np.asarray(low, np.float32))
        self.high = Tensor(np.asarray(high, np.float32))

    def construct(self, x):
        return ops.clip_by_value(x, self.low, self.high)


class ScaleToBox(nn.Cell):
    """Normalized action a in [-1, 1] -> ``low + (a + 1) * (high - low) / 2``, clipped: the affine
    part of TanhScaleHead, for the acting cells that also need ``a`` itself (what the replay buffer
    stores), so the env action and the stored action come from one tanh evaluation."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        low = np.asarray(low, np.float32)
        high = np.asarray(high, np.float32)
        self.low = Tensor(low)
        self.high = Tensor(high)
        self.half_range = Tensor(((high - low) / 2.0).astype(np.float32))

    def construct(self, a):
        return ops.clip_by_value(self.low + (a + 1.0) * self.half_range, self.low, self.high)


class TanhScaleHead(nn.Cell):
    """``low + (tanh(u) + 1) * (high - low) / 2``, clipped to [low, high] against rounding; the tanh
    is mlp.pow_tanh, within ~1e-7 of the exact tanh on every runtime (the action is what a board
    compares), and so are the acting cells' and the losses' tanh of SAC and TD3."""

    def __init__(self, low: np.ndarray, high: np.ndarray):
        super().__init__()
        self.scale = ScaleToBox(low, high)

    def construct(self, u):
        return self.scale(pow_tanh(u))


class PolicyCell(nn.Cell):
    """The deterministic policy: normalizer -> actor network -> action head, one graph."""

    def __init__(self, normalizer: ObsNormalizer, actor: nn.Cell, head: nn.Cell):
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor
        self.head = head

    def construct(self, obs):
        return self.head(self.actor(self.normalizer(obs)))


def make_head(spec, squash: bool) -> nn.Cell:
    if spec.act_kind in ("MultiDiscrete", "MultiBinary"):
        from ..distributions import action_distribution
        return ModeHead(action_distribution(spec))
    if spec.discrete:
        return ArgmaxHead()
    if squash:
        return TanhScaleHead(spec.act_low, spec.act_high)
    return ClipHead(spec.act_low, spec.act_high)


# The action distribution as further outputs (``msrl export --outputs action,distribution``) -----------
class DistributionPolicyCell(nn.Cell):
    """The policy cell with its action distribution: obs -> (action, *the distribution's outputs).

    ``outputs(x)`` maps the normalized row to (the action head's input, the tuple of outputs that
    deploy.sampling names for ``kind``); the action is the deterministic head's, as PolicyCell's.
    ``sde_scale``: gSDE's exploration-matrix scale exp(log std), a constant recorded in the manifest."""

    def __init__(self, normalizer: ObsNormalizer, outputs: nn.Cell, head: nn.Cell, kind: str, sde_scale=None):
        super().__init__()
        self.normalizer = normalizer
        self.outputs = outputs
        self.head = head
        self.kind = kind
        self.sde_scale = sde_scale

    def construct(self, obs):
        out, params = self.outputs(self.normalizer(obs))
        return (self.head(out),) + params


class Part(nn.Cell):
    """A view onto cells the agent owns, computing one step of its forward pass with them.

    The agent is composed of parts (which rows the heads read, how the actor's outputs are formed,
    the critic's value, a distribution export's outputs) instead of mode flags branched on in every
    method. A part leaves the Parameters' names as their owners (``actor``, ``critic``,
    ``normalizer``) set them, so checkpoints and optimizer state do not depend on it."""

    def __init__(self):
        super().__init__(auto_prefix=False)

    def update_parameters_name(self, prefix="", recurse=True):
        """Attaching a part renames nothing: the owners name the Parameters."""


class LogitsOutputs(Part):
    """Categorical, MultiCategorical, Bernoulli: the logits."""

    def __init__(self, actor):
        super().__init__()
        self.actor = actor

    def construct(self, x):
        logits = self.actor(x)
        return logits, (logits,)


class GaussianOutputs(Part):
    """PPO's diagonal Gaussian: the mean and exp(log std) per row (the Exp training samples with).

    The rows of ones are ``mean * 0 + 1`` (exactly 1 for a finite mean), not a constant: at a fixed
    batch a constant std output is folded by Lite's converter into a parameter it cannot save."""

    def __init__(self, actor, log_std):
        super().__init__()
        self.actor = actor
        self.log_std = log_std

    def construct(self, x):
        mean = self.actor(x)
        return mean, (mean, (mean * 0.0 + 1.0) * ops.exp(self.log_std))


class StateDependentOutputs(Part):
    """gSDE: the mean, the row's state-dependent std and the latent features (from the actor trunk)."""

    def __init__(self, trunk, head, log_std):
        super().__init__()
        self.trunk, self.head = trunk, head
        self.log_std = log_std

    def construct(self, x):
        latent = self.trunk(x)
        mean = self.head(latent)
        return mean, (mean, sde_std(latent, self.log_std), latent)


class SquashedGaussianOutputs(Part):
    """SAC: the pre-squash mean and std (the log-std head clamped to [lo, hi], as the sampling cell)."""

    def __init__(self, actor, log_std_head, lo: float, hi: float):
        super().__init__()
        self.actor, self.log_std_head = actor, log_std_head
        self.lo, self.hi = float(lo), float(hi)

    def construct(self, x):
        h = self.actor.first(x)
        mean = self.actor.second(h)
        return mean, (mean, ops.exp(ops.clip_by_value(self.log_std_head(h), self.lo, self.hi)))
