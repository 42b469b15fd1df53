"""The backend and format registries: every entry complete, names unique, and the command line's
choices, the reader's formats and the exporter's writers all driven by them."""
import dataclasses

import pytest

from msrl_consistent.cli import build_parser
from msrl_consistent.deploy import backends, formats
from msrl_consistent.deploy.errors import ExportError
from msrl_consistent.export import replay, writers


def _choices(parser, command, option):
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return list(next(a for a in sub._actions if option in a.option_strings).choices)


@pytest.mark.parametrize("entry", backends.REGISTRY, ids=lambda b: b.name)
def test_every_backend_entry_is_complete(entry):
    assert entry.name and entry.install and callable(entry.loader)
    assert entry.modules and all(isinstance(m, str) and m for m in entry.modules)
    assert entry.formats and all(f in formats.BY_NAME for f in entry.formats)
    assert all(isinstance(o, str) for o in entry.options)
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.name = "other"


@pytest.mark.parametrize("entry", formats.FORMATS, ids=lambda f: f.name)
def test_every_format_entry_is_complete(entry):
    assert entry.name and entry.file
    assert entry.batch in ("batch", "onnx_batch", "golden_batch")
    assert all(r in formats.BY_NAME and r != entry.name for r in entry.requires)
    assert entry.always or entry.tool  # what writing it needs, said where it needs more than msrl
    assert entry.name in writers.WRITERS  # each format has its writer
    with pytest.raises(dataclasses.FrozenInstanceError):
        entry.file = "other"


def test_names_are_unique():
    names = [b.name for b in backends.REGISTRY]
    aliases = [a for b in backends.REGISTRY for a in b.aliases]
    assert len(set(names + aliases)) == len(names) + len(aliases)
    assert len({b.preference for b in backends.REGISTRY}) == len(names)
    assert len({f.name for f in formats.FORMATS}) == len(formats.FORMATS)
    assert len({f.file for f in formats.FORMATS}) == len(formats.FORMATS)
    assert set(writers.WRITERS) == set(formats.NAMES)
    assert [b.name for b in backends.REGISTRY if b.same_engine] == [backends.REFERENCE]


def test_the_registries_drive_the_cli_choices():
    p = build_parser()
    want = [b.name for b in backends.REGISTRY] + [a for b in backends.REGISTRY for a in b.aliases]
    assert _choices(p, "verify", "--backend") == want
    assert _choices(p, "eval", "--backend") == ["train", *want]
    assert _choices(p, "eval", "--fallback") == ["auto", "none", *want]
    host = [n for b in backends.REGISTRY if b.host for n in (b.name, *b.aliases)]
    assert _choices(p, "replay", "--against") == ["train", *host] == list(replay.AGAINST)
    for f in formats.NAMES:
        assert f in writers.parse_formats(f)
    with pytest.raises(Exception, match="expected a comma-separated subset of " + ", ".join(formats.NAMES)):
        writers.parse_formats("nope")


def test_lookup_by_name_and_alias():
    for b in backends.REGISTRY:
        assert backends.get(b.name) is b
        assert all(backends.get(a) is b for a in b.aliases)
    with pytest.raises(ExportError, match="unknown backend 'nope'"):
        backends.get("nope")
    with pytest.raises(ExportError, match="unknown export format 'nope'"):
        formats.get_format("nope")


def test_plan_adds_what_a_format_is_converted_from():
    # om's pre-flight needs no CANN: its plan is checked here without ATC
    assert writers.plan(["mindir", "om"], writers.Options(preflight_only=True)) == ["mindir", "onnx", "om"]
    assert writers.plan(["mindir", "onnx", "om"], writers.Options(preflight_only=True)) == ["mindir", "onnx", "om"]
    with pytest.raises(Exception, match="--preflight-only checks what ATC would refuse: it needs --format om"):
        writers.plan(["mindir"], writers.Options(preflight_only=True))


class _Export:
    """What a Backend reads of an export: the files it lists and the batches."""

    def __init__(self, files, batch=None, onnx_batch=None, golden_batch=4):
        self.files, self.formats = {n: "0" * 64 for n in files}, []
        self.batch, self.onnx_batch, self.golden_batch = batch, onnx_batch, golden_batch


def test_a_backend_runs_the_best_file_the_export_holds_at_its_formats_batch():
    lite = backends.get("lite")
    assert lite.model_file(_Export(["actor.mindir", "actor_lite.mindir"])) == "actor_lite.mindir"
    assert lite.model_file(_Export(["actor.mindir"])) == "actor.mindir"
    assert lite.fixed_batch(_Export(["actor.mindir", "actor_lite.mindir"], batch=None, onnx_batch=8)) == 8
    assert lite.fixed_batch(_Export(["actor.mindir"], batch=None, onnx_batch=8)) is None
    assert backends.get("om").fixed_batch(_Export(["actor.om"], golden_batch=4)) == 4
    assert backends.get("ort").fixed_batch(_Export(["actor.onnx"], onnx_batch=None)) is None
    with pytest.raises(ExportError, match="actor.onnx: not in this export .* export again with --format onnx"):
        backends.get("onnxruntime").require(_Export(["actor.mindir"]))
    with pytest.raises(ExportError) as exc:
        backends.get("om").require(_Export(["actor.mindir"]))
    assert "export again" not in str(exc.value)


def test_default_tolerance_follows_the_training_engine():
    assert backends.default_atol(backends.REFERENCE) == 0.0
    assert backends.default_atol(backends.REFERENCE, "fp16") == backends.CROSS_RUNTIME_ATOL
    for b in backends.REGISTRY:
        if not b.same_engine:
            assert backends.default_atol(b.name) == backends.CROSS_RUNTIME_ATOL
