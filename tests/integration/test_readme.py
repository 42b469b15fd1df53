"""The README's commands, run from the README's text: the quickstart and every
command of "The whole chain" verbatim, then the "From Python" script with a smaller budget.

Each command runs in a subprocess with its working directory a fresh temporary directory
holding a symlink to configs/, as a newcomer runs them after the README's set-up command
(`pip install -e .`, which the test environment already did). The quickstart trains CartPole
at its full budget (100k steps): the one full-length training of the suite."""
import os
import re
import shlex
import subprocess
import sys
import time

import pytest
from helpers import CONFIGS, ROOT

README = os.path.join(ROOT, "README.md")


def section(text, heading):
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def fenced(text, lang):
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def msrl_commands(text):
    """Every `msrl ...` command of the bash blocks, in order (`a && msrl b` gives `msrl b`)."""
    out = []
    for block in fenced(text, "bash"):
        for line in block.splitlines():
            for part in line.split("&&"):
                argv = shlex.split(part, comments=True)
                if argv and argv[0] == "msrl":
                    out.append(argv)
    return out


def msrl_program():
    exe = os.path.join(os.path.dirname(sys.executable), "msrl")
    return [exe] if os.path.isfile(exe) else [sys.executable, "-m", "msrl_consistent"]


def github_anchor(heading: str) -> str:
    """The fragment GitHub gives a Markdown heading: lower case, punctuation dropped, spaces -> '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_in_readme_and_docs_point_to_existing_files_and_headings():
    sources = [README] + [os.path.join(ROOT, "docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]
    broken = []
    for src in sources:
        text = open(src, encoding="utf-8").read()
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path = os.path.normpath(os.path.join(os.path.dirname(src), target)) if target else src
            if not os.path.exists(path):
                broken.append(f"{os.path.relpath(src, ROOT)}: {target} does not exist")
            elif anchor and path.endswith(".md"):
                headings = re.findall(r"^#+ (.+)$", open(path, encoding="utf-8").read(), re.M)
                if anchor not in {github_anchor(h) for h in headings}:
                    broken.append(f"{os.path.relpath(src, ROOT)}: {target}#{anchor} has no such heading")
    assert not broken, broken


def test_readme_parsing_finds_the_chain():
    cmds = msrl_commands(section(open(README, encoding="utf-8").read(), "Quickstart"))
    assert cmds[0][:2] == ["msrl", "train"]
    # the chain, then the test command's `msrl lite install`
    assert [c[1] for c in cmds[1:]] == ["eval", "lite", "export", "verify", "verify", "verify", "eval", "lite"]


@pytest.mark.slow
def test_readme_quickstart_and_whole_chain(tmp_path):
    cmds = msrl_commands(section(open(README, encoding="utf-8").read(), "Quickstart"))
    os.symlink(CONFIGS, tmp_path / "configs")
    env = dict(os.environ, GLOG_v="3")
    timings = []
    for argv in cmds:
        t0 = time.perf_counter()
        r = subprocess.run(msrl_program() + argv[1:], cwd=tmp_path, capture_output=True, text=True, env=env,
                           timeout=900)
        timings.append((" ".join(argv), round(time.perf_counter() - t0, 1)))
        assert r.returncode == 0, (" ".join(argv), r.stdout[-2000:], r.stderr[-3000:])
    print("\n".join(f"{t:7.1f}s  {c}" for c, t in timings))
    # every verify and check of the chain keeps its own report (none overwrites another)
    reports = sorted(p.name for p in (tmp_path / "exports" / "cartpole").glob("report-*"))
    assert "report-verify-mindspore.md" in reports and "report-verify-onnxruntime.json" in reports, reports
    assert "report-verify-mindspore_lite.json" in reports, reports  # the chain ran MindSpore Lite for real


@pytest.mark.slow
def test_readme_from_python(tmp_path):
    blocks = fenced(section(open(README, encoding="utf-8").read(), "From Python"), "python")
    assert len(blocks) == 1
    code, n = re.subn(r"^STEPS = .*$", "STEPS = 2048", blocks[0], flags=re.M)
    assert n == 1, "the README's script sets its budget in one line `STEPS = ...`"
    (tmp_path / "readme_snippet.py").write_text(code)
    r = subprocess.run([sys.executable, "readme_snippet.py"], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, GLOG_v="3"), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "mean return" in r.stdout
    assert (tmp_path / "runs" / "py-cartpole-lr3e-4" / "config.yaml").is_file()  # learn() wrote it
    assert (tmp_path / "exports" / "py-cartpole" / "actor.onnx").is_file()
