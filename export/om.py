"""OM (Ascend offline model) through CANN's ATC, run on the exported ONNX.

ATC converts with ``--framework=5`` (ONNX), the ONNX input name and shape, the SoC version
and an explicit ``--precision_mode``. ATC's default on Ascend inference SoCs is fp16
(force_fp16), which silently changes a policy's arithmetic, so msrl always passes the mode and
records it in the manifest. The default is ``must_keep_origin_dtype``: the graph's float32 stays
float32, and ATC refuses a graph with an operator CANN has no float32 kernel for (MatMul, on
Atlas inference products), which the ATC pre-flight (preflight.py) reports before ATC runs;
``force_fp32`` converts such a graph with that operator in float16, which the pre-flight names.

Nothing here runs on a machine without CANN: ``atc`` missing from PATH raises
:class:`AtcUnavailable` (exit 2) with what to install.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from typing import List, Optional

ATC_PRECISION_MODES = ("force_fp32", "force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype", "allow_mix_precision")
DEFAULT_PRECISION_MODE = "must_keep_origin_dtype"
ONNX_FRAMEWORK = 5


class AtcUnavailable(RuntimeError):
    """CANN's atc is not installed or not on PATH."""


def input_shape(inputs, batch: int) -> str:
    """ATC's ``--input_shape`` value: every graph input (deploy.graph_io.graph_inputs: the
    observation input(s), then a recurrent graph's h, c and episode_start) at the fixed batch,
    ';'-separated."""
    return ";".join(f"{name}:" + ",".join(str(int(d)) for d in (batch, *shape)) for name, shape, _ in inputs)


def atc_command(atc: str, onnx_path: str, output_base: str, inputs, batch: int,
                soc_version: str, precision_mode: str, keep_dtype: Optional[str] = None) -> List[str]:
    if precision_mode not in ATC_PRECISION_MODES:
        raise ValueError(f"--precision-mode {precision_mode!r} is not an ATC precision mode; "
                         f"expected one of {', '.join(ATC_PRECISION_MODES)}")
    if not soc_version:
        raise ValueError("--soc-version is required for --format om (for example Ascend310P3)")
    return [
        atc,
        f"--model={onnx_path}",
        f"--framework={ONNX_FRAMEWORK}",
        f"--output={output_base}",
        f"--soc_version={soc_version}",
        f"--input_shape={input_shape(inputs, batch)}",
        f"--precision_mode={precision_mode}",
        *([f"--keep_dtype={keep_dtype}"] if keep_dtype else []),
        "--log=error",
    ]


def find_atc() -> str:
    atc = shutil.which("atc")
    if atc is None:
        raise AtcUnavailable(
            "--format om needs Huawei CANN's `atc` on PATH, and it was not found. Install the CANN toolkit "
            "(Ascend-cann-toolkit) for your SoC and `source <cann>/set_env.sh`, or skip OM and deploy "
            "actor.mindir with MindSpore Lite, which builds it for Ascend directly.")
    return atc


def write_om(onnx_path: str, out_path: str, inputs, batch: int, soc_version: str,
             precision_mode: str = DEFAULT_PRECISION_MODE, keep_dtype: Optional[str] = None) -> dict:
    """Run ATC on the ONNX graph whose inputs are ``inputs`` (``keep_dtype``: the file of nodes a
    float16 precision mode keeps in float32, keep_dtype.py); returns the options and command
    recorded in the manifest."""
    assert out_path.endswith(".om")
    atc = find_atc()
    cmd = atc_command(atc, onnx_path, out_path[:-3], inputs, batch, soc_version, precision_mode, keep_dtype)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"atc failed with exit code {proc.returncode}: {proc.stderr.strip() or proc.stdout.strip()}\n"
                           f"command: {' '.join(cmd)}")
    if not os.path.isfile(out_path):
        raise RuntimeError(f"atc exited 0 but did not write {out_path}; command: {' '.join(cmd)}")
    return {"tool": "atc", "soc_version": soc_version, "precision_mode": precision_mode,
            "framework": ONNX_FRAMEWORK, "input_shape": input_shape(inputs, batch),
            **({"keep_dtype": os.path.basename(keep_dtype)} if keep_dtype else {}),
            "command": [os.path.basename(cmd[0])] + cmd[1:]}
