"""The deployed policy (:class:`Policy`, :class:`ExportPolicy`) and :func:`load`."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .backends import Runner, by_preference, canonical_backend, make_runner
from .errors import BackendUnavailable, ExportError
from .frames import FrameStack, MaxAndSkip
from .guard import Guard
from .inputs import Inputs
from .reader import Export, open_export
from .recurrent import RecurrentState, check_starts, check_state
from .sampling import Distribution, split_outputs
from .spaces import SpaceSpec


def in_chunks(run, x: np.ndarray, batch: int) -> np.ndarray:
    """``run`` on ``x`` in calls of exactly ``batch`` rows (the last one padded by repeating its
    last row; the padding's outputs are dropped)."""
    return in_chunks_many(lambda *xs: (run(xs[0]),), (x,), batch)[0]


def in_chunks_many(run, xs, batch: int) -> tuple:
    """``run(*arrays) -> tuple of outputs`` on arrays of the same rows, in calls of exactly ``batch``
    rows (as :func:`in_chunks`); -> the outputs concatenated."""
    rows = xs[0].shape[0]
    if rows == batch:
        return tuple(run(*xs))
    outs = []
    for start in range(0, rows, batch):
        chunk = [x[start:start + batch] for x in xs]
        n = chunk[0].shape[0]
        if n < batch:
            chunk = [np.concatenate([x, np.repeat(x[-1:], batch - n, axis=0)]) for x in chunk]
        outs.append([o[:n] for o in run(*chunk)])
    return tuple(np.concatenate(parts) for parts in zip(*outs))


class Policy(Inputs):
    """Input validation, batching, output shaping and the optional guard, shared by every backend
    (and by the package's training-cell policy)."""

    backend = ""
    recorder = None
    guard: Optional["Guard"] = None
    dist: Optional[Distribution] = None
    """The action distribution (deploy.sampling) of an export with distribution outputs; None: action only."""
    reset_actions: tuple = ()
    """Actions training's env took after every reset, before the first observation (a FIRE-reset
    Atari policy: FIRE, then 2; the manifest's env.atari.fire_reset): :meth:`begin_episode` sends them."""

    def __init__(self, spec: SpaceSpec, fixed_batch: Optional[int], state_size: int = 0):
        self.spec = spec
        # a recurrent policy: the LSTM's units (h and c per env), the state act() carries (recurrent.py)
        self.state_size = int(state_size)
        self._state = RecurrentState(state_size) if state_size else None
        self._obs_dim = spec.obs_dim
        # the action repeat + two-frame max the policy was trained behind (None: none), for the deploying loop
        self.max_and_skip = MaxAndSkip(spec.max_and_skip) if spec.max_and_skip > 1 else None
        # Image observations: {"shape": the env's frame shape, "layout": HWC | CHW}; uint8 model input
        self.image = {"shape": tuple(spec.obs_shape), "layout": spec.image_layout} if spec.obs_kind == "Image" else None
        self.frame_stack = spec.frame_stack
        self.frame_dim = spec.frame_dim
        self._stack = FrameStack(self.frame_stack, self.frame_dim) if self.frame_stack > 1 else None
        # Dict observations: [(key, "Box" | "Discrete", n, shape)] in the row's (sorted) key order
        self.obs_parts = [tuple(p) for p in spec.obs_parts] if spec.obs_parts else None
        self.obs_n = spec.obs_n if spec.obs_kind == "Discrete" else 0  # a Discrete observation space's n
        self._cols = spec.column_n
        # MultiDiscrete / MultiBinary: choices per action dimension; actions are int (B, len(nvec))
        self.nvec = np.asarray(spec.nvec, np.int64) if spec.nvec else None
        self.fixed_batch = fixed_batch
        self.discrete = spec.discrete
        self.n_actions = spec.n_actions
        self.act_low = None if spec.act_low is None else np.asarray(spec.act_low, np.float64)
        self.act_high = None if spec.act_high is None else np.asarray(spec.act_high, np.float64)

    def reset_frames(self) -> None:
        """Start new episodes: the frame stack restarts (zeros, then the next observation)."""
        if self._stack is not None:
            self._stack.buf = None

    def begin_episode(self, step: Callable[[Any], Any]) -> Any:
        """After the environment's reset, what training's env did before the first observation:
        each of :attr:`reset_actions` sent through ``step(action) -> observation``; returns the
        last observation (None when there are none: act on the reset's)."""
        obs = None
        for action in self.reset_actions:
            obs = step(action)
        return obs

    def reset(self, mask=None) -> None:
        """Start new episodes, of every env (``mask`` None: the frame stack restarts, a recurrent
        state is dropped and the next ``act`` may bring any number of envs) or, for a recurrent
        policy, of the envs where the boolean ``mask`` is true (their state is zeroed by the
        graph at their next step)."""
        if mask is None:
            self.reset_frames()
        if self._state is not None:
            self._state.reset(mask)
        elif mask is not None:
            raise ValueError("reset(mask) applies to recurrent policies; this policy keeps no state per env "
                             "(call reset() to restart frame stacking)")

    def step(self, obs, state, episode_start):
        """One step of a recurrent policy whose state the caller owns: (action, (h, c)) from a batch
        of observations, ``state`` = (h, c) float32 (B, state_size) each (zeros to start) and
        ``episode_start`` (B,) flags (1 on an episode's first step: the graph zeroes the state
        there). Uses nothing ``act`` carries."""
        if self._state is None:
            raise ValueError("step(obs, state, episode_start) applies to recurrent policies; this policy takes "
                             "observations alone: call act(obs)")
        x, single = self.rows(obs)
        n = x.shape[0]
        h, c = check_state(state, n, self.state_size)
        action, h2, c2 = self._guarded_step(x, h, c, check_starts(episode_start, n))
        return (action[0] if single else action), (h2, c2)

    def act(self, obs, deterministic: bool = True, rng: Optional[np.random.Generator] = None) -> np.ndarray:
        """The environment action for one observation (obs_dim,) or a batch (B, obs_dim); for a
        Discrete observation space, an index or a batch of indices (B,); for a Dict space, a dict
        {key: one observation or a batch} (or its packed rows, the keys concatenated in sorted order).

        ``deterministic=False`` (an export with ``--outputs action,distribution``): a sample of the
        action distribution, with noise drawn from ``rng`` (a NumPy Generator) as training draws it
        and training's formula (deploy.sampling): the same noise gives the training cell's action."""
        if not deterministic:
            self._require_distribution()
            if not isinstance(rng, np.random.Generator):
                raise ValueError("act(obs, deterministic=False) needs rng=numpy.random.default_rng(seed) (the "
                                 "noise's source)")
        if self._stack is not None:  # the same FrameStack as the training loop
            x, single = self.frames(obs)
            x = self._stack.push(x)
        else:
            x, single = self.rows(obs)
        if not deterministic:
            assert self.dist is not None and rng is not None
            if self._state is not None:  # the state carried as by the deterministic step
                out = self._state.step(lambda *xs: self._sample_step(xs, rng), x)
            else:
                out = self.dist.sample(self.distribution_params(x), self.dist.noise(rng, x.shape[0]))
        elif self._state is not None:  # the carried state of these envs in, the next state kept
            out = self._state.step(self._guarded_step, x)
        else:
            out = self.run_batched(x) if self.guard is None else self.guard.run(self, x)
        if self.recorder is not None:  # a recurrent step: with its episode_start flags and next state
            st = self._state
            self.recorder.record(x, out, None if st is None else (st.last_starts, st.h, st.c))
        return out[0] if single else out

    __call__ = act

    def rows(self, obs):
        """One observation or a batch (a Dict's dict, an image's frames, or model rows) as validated
        model rows, and whether it was one; frame stacking is ``act``'s."""
        if self.obs_parts and isinstance(obs, dict):
            packed, single = self.pack(obs)
            return self.validate(packed), single
        if self.image is not None:
            return self.frames(obs)
        return self.validate(obs), self.is_single(obs)

    def _require_distribution(self) -> None:
        if self.dist is None:
            raise ValueError("this policy outputs its action only: export it with `msrl export RUN --outputs "
                             "action,distribution` to sample it or check its distribution")

    def distribution(self, obs) -> Dict[str, np.ndarray]:
        """The action distribution's parameters (deploy.sampling's outputs by name) for one
        observation or a batch, as ``act`` takes them (with frame stacking: the stacked model rows)."""
        x, single = (self.validate(obs), self.is_single(obs)) if self._stack is not None else self.rows(obs)
        params = self.distribution_params(x)
        return {k: v[0] for k, v in params.items()} if single else params

    def _sample_step(self, xs: tuple, rng: np.random.Generator):
        """One recurrent step whose action is sampled: (x, h, c, episode_start) -> (action, h', c')."""
        assert self.dist is not None
        n = xs[0].shape[0]
        outs = self._at_batch(self._run_step_outputs, xs)
        return self.dist.sample(self._distribution_outputs(outs[3:], n), self.dist.noise(rng, n)), outs[1], outs[2]

    def distribution_params(self, x: np.ndarray) -> Dict[str, np.ndarray]:
        """The action distribution's parameters (deploy.sampling's outputs by name) of validated
        model rows, at the artifact's batch shape."""
        self._require_distribution()
        assert self.dist is not None
        if self._state is not None:
            raise ValueError("a recurrent policy's distribution depends on its state: sample it with act(obs, "
                             "deterministic=False, rng=...), which carries the state")
        return self._distribution_outputs(self._at_batch(self._run_outputs, (x,))[1:], x.shape[0])

    def distribution_at_batch(self, obs: np.ndarray, batch: int) -> Dict[str, np.ndarray]:
        """:meth:`distribution_params` computed ``batch`` rows per call (the golden set's reference shape)."""
        self._require_distribution()
        assert self.dist is not None
        names = self.dist.outputs
        outs = in_chunks_many(lambda c: tuple(self.distribution_params(self.validate(c))[k] for k in names),
                              (np.asarray(obs),), batch)
        return dict(zip(names, outs))

    def run_batched(self, x: np.ndarray) -> np.ndarray:
        """Run at the artifact's batch shape: chunks of ``fixed_batch`` (the last one padded)."""
        if self.fixed_batch is None:
            return self._run(x)
        return in_chunks(self._run, x, self.fixed_batch)

    def run_step_batched(self, x, h, c, episode_start):
        """A recurrent step at the artifact's batch shape (as :meth:`run_batched`)."""
        return self._at_batch(self._run_step, (x, h, c, episode_start))

    def _at_batch(self, run, xs: tuple) -> tuple:
        """``run(*xs)``'s outputs at the artifact's batch shape (chunks of ``fixed_batch``)."""
        if self.fixed_batch is None:
            return tuple(run(*xs))
        return in_chunks_many(lambda *a: tuple(run(*a)), xs, self.fixed_batch)

    def _distribution_outputs(self, outs: Sequence[np.ndarray], n: int) -> Dict[str, np.ndarray]:
        """The distribution's outputs of a graph call on ``n`` rows, by name, checked."""
        assert self.dist is not None
        params = split_outputs(self.dist, outs)
        self.dist.check(params, n, f"backend {self.backend}")
        return params

    def _guarded_step(self, x, h, c, episode_start):
        if self.guard is None:
            return self.run_step_batched(x, h, c, episode_start)
        return self.guard.run(self, x, (h, c, episode_start))

    def act_at_batch(self, obs: np.ndarray, batch: int) -> np.ndarray:
        """Actions for ``obs`` computed ``batch`` rows per call (the golden set's reference shape)."""
        return in_chunks(lambda chunk: self.run_batched(self.validate(chunk)), np.asarray(obs), batch)

    def action_violation(self, out: Any, n: int) -> Optional[str]:
        """None if ``out`` is a valid batch of ``n`` environment actions, else the kind of violation."""
        if not isinstance(out, np.ndarray):
            return "shape"
        if self.nvec is not None:
            if out.shape != (n, len(self.nvec)) or out.dtype.kind not in "iu":
                return "shape"
            return None if n == 0 or (out.min() >= 0 and (out < self.nvec).all()) else "out_of_range"
        if self.discrete:
            if out.shape != (n,) or out.dtype.kind not in "iu":
                return "shape"
            return None if n == 0 or (out.min() >= 0 and out.max() < self.n_actions) else "out_of_range"
        if out.shape != (n, self.n_actions) or out.dtype.kind != "f":
            return "shape"
        if not np.isfinite(out).all():
            return "nonfinite"
        if self.act_low is not None and ((out < self.act_low).any() or (out > self.act_high).any()):
            return "out_of_range"
        return None

    def guard_stats(self) -> Optional[dict]:
        return None if self.guard is None else self.guard.stats()

    def _run(self, x: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _run_step(self, x, h, c, episode_start):  # pragma: no cover - abstract
        """A recurrent policy's graph: -> (action, h', c')."""
        raise NotImplementedError

    def _run_outputs(self, x: np.ndarray) -> Sequence[np.ndarray]:  # pragma: no cover - abstract
        """A distribution export's graph: -> (action, *the distribution's outputs)."""
        raise NotImplementedError

    def _run_step_outputs(self, x, h, c, episode_start) -> Sequence[np.ndarray]:  # pragma: no cover - abstract
        """A recurrent distribution export's graph: -> (action, h', c', *the distribution's outputs)."""
        raise NotImplementedError


class ExportPolicy(Policy):
    """An export directory on one backend."""

    def __init__(self, export: Export, runner: Runner):
        super().__init__(export.spec, runner.fixed_batch, state_size=export.state_size)
        self.export = export
        self.runner = runner
        self.backend = runner.backend
        self.dist = export.distribution
        self.reset_actions = export.reset_actions

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.runner.run(x)

    def _run_step(self, x, h, c, episode_start):
        return self.runner.run_step(x, h, c, episode_start)

    def _run_outputs(self, x: np.ndarray) -> Sequence[np.ndarray]:
        return self.runner.run_outputs(x)

    def _run_step_outputs(self, x, h, c, episode_start) -> Sequence[np.ndarray]:
        return self.runner.run_step_outputs(x, h, c, episode_start)


def available_backends(export: Export) -> List[str]:
    """Backends whose model file the export holds and whose library imports here, best first
    (each entry's ``preference``)."""
    return [b.name for b in by_preference() if b.here(export)]


def load(directory: str = ".", backend: Optional[str] = None, *, guard: bool = False, fallback: Optional[str] = "auto",
         latency_budget_ms: Optional[float] = None, switch_after: int = 3, target: str = "cpu",
         device_id: int = 0, precision_mode: Optional[str] = None, check_hashes: bool = True,
         pin: bool = False) -> ExportPolicy:
    """Open and validate an export directory and load it on ``backend`` (None: the first of om,
    mindspore_lite, onnxruntime, mindspore that is installed and exported).

    ``guard=True``: every action is checked (finite, inside the action space) and timed; a
    violation or a backend exception is answered by the ``fallback`` backend ('auto': another
    installed backend of the same export; None: raise GuardError); ``switch_after`` consecutive
    calls over ``latency_budget_ms`` move every later call to the fallback. Counters: ``guard_stats()``.
    ``pin=True`` (Lite's CPU target): Lite's threads and the calling thread bound to one core, for good.
    """
    export = open_export(directory, hashes=check_hashes, golden=False)
    if backend is None:
        found = available_backends(export)
        if not found:
            raise BackendUnavailable(f"no backend for this export is installed (exported: "
                                     f"{', '.join(sorted(export.files))}); install one of: "
                                     f"{_install_hints()}")
        backend = found[0]
    backend = canonical_backend(backend)
    policy = ExportPolicy(export, make_runner(export, backend, target=target, device_id=device_id,
                                              precision_mode=precision_mode, pin=pin))
    if guard:
        policy.guard = guard_for(export, backend, fallback, lambda b: ExportPolicy(export, make_runner(export, b)),
                                 latency_budget_ms, switch_after)
    return policy


def guard_for(export: Export, primary: str, fallback: Optional[str], make_fallback: Callable[[str], Policy],
              latency_budget_ms: Optional[float], switch_after: int) -> Guard:
    """The guard of a policy running ``export`` on ``primary``. ``fallback``: a backend name,
    'auto' (:func:`auto_fallback`) or None (a violation raises GuardError); ``make_fallback(name)``
    loads the fallback policy on the same Export (the manifest is not read again)."""
    if fallback == "auto":
        fallback = auto_fallback(export, primary)
    fb = None
    if fallback is not None:
        fallback = canonical_backend(fallback)
        if fallback == primary:
            raise ExportError(f"the fallback backend must differ from the primary ({fallback})")
        fb = make_fallback(fallback)  # its runner checks the export holds its model file
    return Guard(fb, latency_budget_ms, switch_after)


def auto_fallback(export: Export, primary: str) -> Optional[str]:
    """The guard's 'auto' fallback: the best backend other than ``primary`` whose model file the
    export holds and whose library imports here (:func:`available_backends`), or None."""
    others = [b for b in available_backends(export) if b != primary]
    return others[0] if others else None


def _install_hints() -> str:
    """How to install each backend a board can deploy on (not the training engine), the lightest first."""
    return "; ".join(f"{b.name}: {b.install}" for b in reversed(by_preference()) if not b.same_engine)
