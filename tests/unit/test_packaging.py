"""A user who installs the package without the source tree (a wheel, or
`pip install .` into site-packages) gets the tuned configs and the Lite shim's source as package data."""
import os
import shutil
import subprocess
import sys
import zipfile

from helpers import CONFIGS, ROOT


def test_wheel_contains_the_shipped_configs(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    for folder in ("msrl_consistent", "algorithms", "export", "configs"):
        shutil.copytree(os.path.join(ROOT, folder), src / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = tmp_path / "whl"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                        "--disable-pip-version-check", "-q", "-w", str(out)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    (wheel,) = out.glob("msrl_consistent-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"msrl_consistent/configs/{algo}/{f}" for algo in os.listdir(CONFIGS)
                if os.path.isdir(os.path.join(CONFIGS, algo)) for f in os.listdir(os.path.join(CONFIGS, algo))
                if f.endswith(".yaml")}
    assert len(expected) >= 7
    assert expected <= names, sorted(expected - names)
    assert "msrl_consistent/configs/__init__.py" in names
    assert {"msrl_consistent/algorithms/ppo/__init__.py", "msrl_consistent/algorithms/ppo/update.py",
            "msrl_consistent/populations/base.py", "msrl_consistent/export/exporter.py", "msrl_consistent/plot.py"} <= names
    assert "msrl_consistent/native/lite_shim.cc" in names  # `msrl lite install` compiles it on the user's machine
    sources = {os.path.relpath(os.path.join(d, f), ROOT) for top in ("msrl_consistent", "algorithms", "export")
               for d, _, fs in os.walk(os.path.join(ROOT, top)) for f in fs if f.endswith(".py")}
    installed = {s if s.startswith("msrl_consistent/") else f"msrl_consistent/{s}" for s in sources}
    assert installed <= names, sorted(installed - names)  # every module, sub-packages included
    assert not any(n.startswith(("configs/", "algorithms/", "export/")) for n in names)  # no generic top-level names
