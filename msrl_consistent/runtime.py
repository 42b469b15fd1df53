"""Load a policy on a backend and act with it: the one entry point deployments and `verify` use.

``load_policy(PATH, backend=...)``:

* PATH a **run directory**, backend ``train``: the training-time PolicyCell rebuilt from the
  run's config and checkpoint (the reference every export is compared with).
* PATH an **export directory** (it has ``manifest.json``):

  - ``mindspore``: ``mindspore.load`` + ``nn.GraphCell`` on actor.mindir;
  - ``onnxruntime``: ``onnxruntime.InferenceSession`` on actor.onnx (CPU provider);
  - ``mindspore_lite`` (or ``lite``): ``mindspore_lite.Model.build_from_file(actor.mindir, ModelType.MINDIR, context)``
    with target ``cpu`` or ``ascend``, a device id and an explicit precision mode (Lite's
    Ascend default is fp16: we never rely on it);
  - ``om``: actor.om through ``ais_bench.infer.interface.InferSession`` (or
    ``aclruntime.InferenceSession``).

  Every export backend is loaded by :mod:`msrl_consistent.deploy` (the package each export
  carries as msrl_deploy.zip beside policy.py), after it validated the directory: one inference
  path, not two. manifest.json is read and validated once (:func:`~.manifest.read_export`); the
  typed Manifest and the package's Export come from that one reading, and a guard's fallback
  runs on the same Export.

``policy.act(obs)`` takes one observation ``(obs_dim,)`` or a batch ``(B, obs_dim)`` and
returns the environment action(s) as a NumPy array (int32 indices or float32 vectors).
"""
from __future__ import annotations

import os
from typing import Optional

import numpy as np

from . import deploy, directories
from .config import ConfigError, EnvConfig
from .manifest import Manifest, read_export
from .optional import MissingOptionalPackage

BACKENDS = ("train",) + deploy.BACKENDS
"""Every backend ``load_policy`` takes: the training cell, then the deploy package's (``lite`` is
its alias of mindspore_lite)."""


class BackendUnavailable(MissingOptionalPackage, deploy.BackendUnavailable):
    """An optional backend package is not installed (the message names it and how to install it)."""


def provide_env(path: str, env) -> None:
    """Make ``env`` (a factory, class or gymnasium.Env instance) the environment of the run or
    export at ``path`` in this process: for a run trained with ``train(env=...)`` on an object that
    cannot be imported by name (envs.make.provide)."""
    from .envs.make import provide

    if directories.expect(path, directories.RUN, directories.EXPORT) == directories.EXPORT:
        env_id = read_export(path, hashes=False, golden=False)[1].env_id
    else:
        env_id = read_run_config(path).env.id
    provide(env_id, env)


def read_run_config(run_dir: str):
    """The resolved config.yaml of a run directory, validated."""
    from .config import load_config

    directories.expect(run_dir, directories.RUN)
    return load_config(os.path.join(run_dir, directories.CONFIG))


class Recordable:
    """What msrl adds to the deploy package's Policy: the environment config the policy was trained
    with (for rollouts) and recording of every call (for ``msrl replay``)."""

    _env_cfg: Optional[EnvConfig] = None

    def env_config(self) -> EnvConfig:
        assert self._env_cfg is not None
        return self._env_cfg

    def start_recording(self, path: str, limit: int = 100_000, source_sha256: str = ""):
        """Record every observation and action of later ``act`` calls into the trace ``path``
        (with the guard's counters, when guarded; a recurrent policy's episode_start flags and
        next state at every step too)."""
        from .recording import TraceRecorder
        self.recorder = TraceRecorder(path, source_sha256, self.backend, self.obs_dim, self.spec.discrete, limit,
                                      obs_dtype=self.spec.input_dtype, state_size=self.state_size)
        self.recorder.extra_meta = lambda: {"guard": self.guard_stats()} if self.guard is not None else {}
        return self.recorder


class TrainCellPolicy(Recordable, deploy.Policy):
    """The training-time PolicyCell, rebuilt from a run directory's config and checkpoint."""

    backend = "train"

    def __init__(self, run_dir: str, checkpoint: Optional[str] = None):
        from mindspore import Tensor

        from . import checkpoint as ckpt
        from .determinism import configure_mindspore
        from .envs.make import env_spec
        from .registry import build_agent

        cfg = read_run_config(run_dir)
        configure_mindspore(cfg.device)
        path = checkpoint or ckpt.latest_checkpoint(run_dir)
        tensors, meta = ckpt.load_checkpoint(path)
        if meta.get("algorithm") != cfg.algorithm:
            raise ckpt.CheckpointError(f"{path} was written by algorithm {meta.get('algorithm')!r}, "
                                       f"but {run_dir}/config.yaml says {cfg.algorithm!r}")
        spec = env_spec(cfg.env)
        agent = build_agent(cfg, spec, np.random.default_rng(0))
        ckpt.load_agent_parameters(agent, tensors, path)
        super().__init__(spec, None, state_size=agent.state_size)
        self._env_cfg = cfg.env
        self.cfg = cfg
        self.agent = agent
        self.checkpoint = path
        self.cell = agent.policy_cell()
        self._Tensor = Tensor
        self.reset_actions = deploy.frames.FIRE_RESET_ACTIONS if cfg.env.atari.fire_reset else ()

    def with_distribution(self) -> "TrainCellPolicy":
        """Also compute the action distribution (``dist_cell``: the agent's distribution_cell, the
        cell a distribution export writes; ConfigError for a deterministic policy)."""
        if self.dist is None:
            self.dist_cell = self.agent.distribution_cell()
            self.dist = deploy.Distribution(self.dist_cell.kind, self.spec, self.dist_cell.sde_scale)
        return self

    def _run(self, x: np.ndarray) -> np.ndarray:
        return self.cell(self._Tensor(x)).asnumpy()

    def _run_outputs(self, x: np.ndarray):
        return [o.asnumpy() for o in self.dist_cell(self._Tensor(x))]

    def _run_step_outputs(self, x, h, c, episode_start):
        T = self._Tensor
        return [o.asnumpy() for o in self.dist_cell(T(x), T(h), T(c), T(episode_start))]

    def _run_step(self, x, h, c, episode_start):
        T = self._Tensor
        return tuple(o.asnumpy() for o in self.cell(T(x), T(h), T(c), T(episode_start)))


class ExportedPolicy(Recordable, deploy.ExportPolicy):
    """An export directory on one backend: the deploy package's ExportPolicy (the same code as the
    bundle's policy.py), with the typed manifest and the environment config beside it."""

    def __init__(self, export: deploy.Export, manifest: Manifest, backend: str, target: str = "cpu",
                 device_id: int = 0, precision_mode: Optional[str] = None):
        from .determinism import configure_mindspore

        try:
            backend = deploy.canonical_backend(backend)
        except deploy.ExportError:
            raise ConfigError(f"unknown backend {backend!r}; expected one of {', '.join(BACKENDS)} (or lite)") from None
        try:
            runner = deploy.make_runner(export, backend, target=target, device_id=device_id,
                                        precision_mode=precision_mode, configure=lambda: configure_mindspore("CPU"))
        except deploy.BackendUnavailable as exc:
            raise BackendUnavailable(str(exc)) from None
        super().__init__(export, runner)
        self.export_dir = export.dir
        self.manifest = manifest
        self.io = manifest.io
        self.precision_mode = runner.info.get("precision_mode")

    def env_config(self) -> EnvConfig:
        """The manifest's environment config (checked when a rollout needs it, not before)."""
        if self._env_cfg is None:
            self._env_cfg = self.manifest.env_config()
        return self._env_cfg


def load_policy(path: str, backend: Optional[str] = None, checkpoint: Optional[str] = None,
                device: int = 0, target: str = "cpu", precision_mode: Optional[str] = None,
                record: Optional[str] = None, record_limit: int = 100_000,
                guard: bool = False, fallback: Optional[str] = "auto",
                latency_budget_ms: Optional[float] = None, switch_after: int = 3, env=None) -> deploy.Policy:
    """Load a policy from a run directory (backend 'train') or an export directory.

    ``guard=True`` (export directories): every action is checked finite and inside the action
    space and timed against ``latency_budget_ms``; a violation or a backend exception is answered
    by the ``fallback`` backend of the same export ('auto': the deploy package's rule,
    :func:`~msrl_consistent.deploy.auto_fallback`; None: raise deploy.GuardError); ``switch_after``
    consecutive calls over the budget move every later call to the fallback (0: only count);
    ``policy.guard_stats()`` holds the counters, also written into the trace when recording.

    ``record=PATH`` writes every observation given to ``act`` and every action returned to the
    trace PATH (bounded by ``record_limit`` observations), tagged with the sha256 of the
    export's manifest.json (or of the run's checkpoint), for ``msrl replay``.

    ``env``: the Python object a run was trained on with ``train(env=...)`` when it is not
    importable by name (:func:`provide_env`); rollouts (``policy.env_config()``) then make it.
    """
    if env is not None:
        provide_env(path, env)
    policy: deploy.Policy
    exported = directories.expect(path, directories.RUN, directories.EXPORT) == directories.EXPORT
    backend = backend or (deploy.backends.REFERENCE if exported else "train")
    if guard and backend == "train":
        raise ConfigError("guard applies to export directories (a deployed artifact), not to the training cell")
    if not exported:
        if backend != "train":
            raise ConfigError(f"{path} is a run directory: only backend 'train' applies (got {backend!r}); "
                              f"export it first with `msrl export {path} --out DIR`")
        policy = TrainCellPolicy(path, checkpoint)
        source = policy.checkpoint
    else:
        export, manifest = read_export(path)
        if backend == "train":
            src = manifest.source
            if not os.path.isdir(src.run_dir):
                raise ConfigError(f"{path}: the source run {src.run_dir} is not present")
            # The reference: the fp32 training cell of the source run, whatever the export's precision.
            policy = TrainCellPolicy(src.run_dir, src.checkpoint)
        else:
            policy = ExportedPolicy(export, manifest, backend, target, device, precision_mode)
            if guard:
                policy.guard = deploy.guard_for(export, policy.backend, fallback,
                                                lambda b: ExportedPolicy(export, manifest, b, target, device, precision_mode),
                                                latency_budget_ms, switch_after)
        source = os.path.join(path, deploy.MANIFEST)
    if record:
        policy.start_recording(record, record_limit, deploy.file_sha256(source))
    return policy
