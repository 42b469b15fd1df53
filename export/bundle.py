"""What an export directory holds beside its model files: the bundle (``policy.py`` and
``msrl_deploy.zip``, so the directory loads and checks itself without msrl), the manifest built
from the export's parts, and the staging directory everything is written into before it is
renamed into place (an interrupted or failed export never leaves a half-written directory; an
existing export is only replaced once the new one is complete)."""
from __future__ import annotations

import contextlib
import os
import shutil
from typing import Iterator

from msrl_consistent import manifest as mf
from msrl_consistent.config import ConfigError, to_dict
from msrl_consistent.deploy import SCHEMA_VERSION, file_sha256
from msrl_consistent.deploy.graph_io import inputs_io, multi_input
from msrl_consistent.deploy.recurrent import state_io
from msrl_consistent.deploy.sampling import distribution_io
from msrl_consistent.envs.recipe import recipe

from .onnx import INPUT_NAME, OUTPUT_NAME

GOLDEN_FILE = "golden.npz"


def check_out_dir(out_dir: str, force: bool) -> None:
    """An existing non-empty ``out_dir`` is replaced only with ``force``."""
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)) and not force:
        raise ConfigError(f"output directory {out_dir} exists and is not empty; pass --force to replace it")


@contextlib.contextmanager
def staging(out_dir: str) -> Iterator[str]:
    """A fresh temporary sibling of ``out_dir`` to write the export into; renamed into place when
    the block succeeds, removed when it fails."""
    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(os.path.abspath(out_dir))}.tmp-{os.getpid()}")
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    os.makedirs(tmp)
    try:
        yield tmp
        _swap_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_manifest(tmp: str, run_dir: str, reference, graph, info: "mf.ExportInfo", golden_count: int, counts: dict,
                   sweep, host: list) -> "mf.Manifest":
    """The manifest of the export staged in ``tmp``: every file's sha256, the run it came from, the
    graph's inputs and outputs (the SpaceSpec's, at the export's batch), the golden set's counts."""
    spec, state = reference.spec, reference.state_size
    files = {name: file_sha256(os.path.join(tmp, name)) for name in sorted(os.listdir(tmp))}
    io_batch = None if info.batch == "dynamic" else info.golden_batch
    obs_in = graph.obs_inputs
    versions = mf.versions()
    return mf.Manifest(
        schema_version=SCHEMA_VERSION,
        created=mf.now_iso(),
        msrl_version=versions["msrl_consistent"],
        versions=versions,
        algorithm=reference.cfg.algorithm,
        env_id=reference.cfg.env.id,
        env=to_dict(reference.cfg.env),
        spaces=spec.to_json(),
        source=mf.Source(run_dir=os.path.abspath(run_dir), checkpoint=os.path.abspath(reference.checkpoint),
                         checkpoint_sha256=file_sha256(reference.checkpoint), config=to_dict(reference.cfg)),
        export=info,
        io={**({"inputs": inputs_io(obs_in, io_batch)} if multi_input(obs_in) else
               {"input": {"name": INPUT_NAME, "shape": [io_batch, spec.obs_dim], "dtype": spec.input_dtype}}),
            "output": {"name": OUTPUT_NAME, "shape": [io_batch] + list(spec.action_shape),
                       "dtype": "int32" if spec.discrete else "float32"},
            "post_processing": _post_processing(spec, reference.agent.squash),
            **({"state": state_io(state, io_batch)} if state else {}),
            **({"distribution": distribution_io(reference.dist.kind, spec, io_batch, reference.dist.sde_scale)}
               if reference.dist is not None else {})},
        files=files,
        golden=mf.GoldenInfo(file=GOLDEN_FILE, count=golden_count, batch=info.golden_batch,
                             reference="training cell, fp32", **counts),
        precision_sweep=None if sweep is None else {  # the per-step drift stays in precision_sweep.json
            "file": "precision_sweep.md",
            "rows": [{k: v for k, v in r.items() if k != "state_error_per_step"} for r in sweep["rows"]]},
        env_recipe=recipe(reference.cfg.env),
        host_preprocessing=host or None,
    )


BUNDLE_ENTRY = '''"""This export's loader and self-check, without msrl installed (the standard library, NumPy and a
backend library: onnxruntime, mindspore_lite, ais_bench/aclruntime for OM, or mindspore).

    python policy.py check [--backend B]        # sha256 of every file, the golden set, latency; exit 0 / 1 / 2
    from policy import load; pi = load(".", backend="onnxruntime"); action = pi.act(obs)

The code is the msrl_deploy package, imported from msrl_deploy.zip beside this file; both files'
sha256 are in manifest.json.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "msrl_deploy.zip"))

try:
    from msrl_deploy import *  # noqa: F401,F403  (load, check, Policy, ...)
    from msrl_deploy import main as _main
except Exception as exc:  # msrl_deploy.zip missing or damaged: the sha256 check cannot even start
    if __name__ != "__main__":
        raise
    print(f"policy.py: error: msrl_deploy.zip beside this file cannot be imported ({type(exc).__name__}: "
          f"{exc}); copy the whole export directory again", file=sys.stderr)
    sys.exit(2)

if __name__ == "__main__":
    sys.exit(_main(default_dir=HERE))
'''


def write_bundle(directory: str) -> str:
    """Ship the deploy package into the export: ``msrl_deploy.zip`` (msrl_consistent/deploy/*.py as the
    package ``msrl_deploy``, imported from the zip; the entries sorted and dated 1980-01-01, so the
    same package gives the same bytes) and the ``policy.py`` entry. With NumPy and a backend library
    the directory loads and checks itself (``python policy.py check``) without msrl."""
    import zipfile

    from msrl_consistent import deploy
    pkg = os.path.dirname(deploy.__file__)
    zpath = os.path.join(directory, deploy.BUNDLE_PACKAGE)
    with zipfile.ZipFile(zpath, "w", zipfile.ZIP_DEFLATED) as z:
        for name in sorted(f for f in os.listdir(pkg) if f.endswith(".py")):
            info = zipfile.ZipInfo(f"msrl_deploy/{name}", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with open(os.path.join(pkg, name), "rb") as fh:
                z.writestr(info, fh.read())
    dst = os.path.join(directory, deploy.BUNDLE_FILE)
    with open(dst, "w", encoding="utf-8") as fh:
        fh.write(BUNDLE_ENTRY)
    return dst


def _post_processing(spec, squash: bool) -> str:
    if spec.act_kind == "MultiDiscrete":
        return f"argmax over each logit segment of nvec {list(spec.nvec)}, int32 (B, {spec.n_actions})"
    if spec.act_kind == "MultiBinary":
        return f"logit > 0 (p > 0.5) per dimension, int32 (B, {spec.n_actions})"
    if spec.discrete:
        return "argmax over logits, int32"
    if squash:
        return "low + (tanh(u) + 1) / 2 * (high - low), clipped to [low, high]"
    return "Gaussian mean clipped to [low, high]"


def _swap_into_place(tmp: str, out_dir: str) -> None:
    """Rename the finished export into place; an existing one is removed only after that."""
    if os.path.isdir(out_dir):
        old = f"{tmp}.old"
        os.replace(out_dir, old)
        try:
            os.replace(tmp, out_dir)
        except BaseException:
            os.replace(old, out_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out_dir)
