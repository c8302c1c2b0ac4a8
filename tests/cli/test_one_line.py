"""One line per problem: whatever a cluster file's keys and values hold, ``validate`` prints each problem as one
``FILE:LINE:COL: $.path: message`` line, and any other error as one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_provision.cli import main
from gpu_provision.errors import GpuProvisionError, SpecError, one_line
from gpu_provision.spec import load_cluster

#: Every character str.splitlines breaks at, and a few other control characters.
BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\x00\x1b\x7f"

texts = st.text(alphabet=st.sampled_from(f"ab-./: {BREAKS}"), min_size=1, max_size=8)


@pytest.mark.parametrize("char", BREAKS)
def test_one_line_escapes_every_line_break_and_control_character(char: str) -> None:
    line = one_line(f"a{char}b")
    assert line.splitlines() == [line]
    assert char not in line and line.startswith("a") and line.endswith("b")


def test_one_line_keeps_ordinary_text() -> None:
    assert one_line("'gpu=true' is not in the expected form (allowed: key[=value]:Effect)") == \
        "'gpu=true' is not in the expected form (allowed: key[=value]:Effect)"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=texts, value=texts, name=texts)
def test_every_problem_is_one_located_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, value: str,
                                           name: str) -> None:
    path = tmp_path / "cluster.yaml"
    doc = {"version": "v1", "cluster": {"name": "t", "kubernetes": {"enabled": False}},
           "nodes": [{"name": name, "address": "10.0.0.1", "labels": {key: value}, "taints": [value]}]}
    path.write_text(json.dumps(doc))  # JSON is YAML, and writes every character as an escape
    with pytest.raises(SpecError) as caught:
        load_cluster(path)
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == len(caught.value.problems), err
    located = re.compile(rf"{re.escape(str(path))}:[0-9]+:[0-9]+: \$.*: \S")
    for line in lines:
        assert located.match(line), line


def test_another_error_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                   tmp_path: Path) -> None:
    def refuse(_path: object, **_kw: object) -> None:
        raise GpuProvisionError("node a refused:\nline two\r\x1b[2Kline three")

    import gpu_provision.commands.spec as spec_command
    monkeypatch.setattr(spec_command, "load_cluster", refuse)
    path = tmp_path / "cluster.yaml"
    path.write_text("version: v1\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["node a refused:\\nline two\\r\\x1b[2Kline three"]
