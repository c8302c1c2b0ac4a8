"""Taints follow the Kubernetes grammar, on a node, in a group or in the defaults: ``key[=value]:Effect`` with a label
key (an optional DNS-subdomain prefix and '/', then a name of at most 63 characters), a label value (empty or at
most 63) and one of the three effects. Every taint of that grammar is taken and becomes the same Kubernetes taint
object; one hostile character anywhere, or a grammar rule broken, is refused with a located message. The
invalid-input corpus (invalid/taint-*.yaml) holds one file per way of breaking it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_provision.cli import main
from gpu_provision.errors import SpecError
from gpu_provision.k8s.nodes import taint_objects
from gpu_provision.spec import load_cluster

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_DNS_LABEL = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
_NAME = st.from_regex(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", fullmatch=True)
_PREFIX = st.lists(_DNS_LABEL, min_size=1, max_size=3).map(".".join).filter(lambda p: len(p) <= 253)
_KEYS = st.tuples(st.one_of(st.none(), _PREFIX), _NAME).map(lambda t: f"{t[0]}/{t[1]}" if t[0] else t[1])
_VALUES = st.one_of(st.none(), st.just(""), _NAME)
#: Characters that are in no part of a taint: whitespace, shell and quoting characters, invisible ones.
HOSTILE = " \t\n;$`'\"|&<>()\\*?!#\u200b\u00a0\u202e"
_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _taint(key: str, value: str | None, effect: str) -> str:
    return key + ("" if value is None else f"={value}") + f":{effect}"


def _write(tmp_path: Path, taints: list[str], where: str = "node") -> Path:
    node: dict[str, object] = {"name": "n1", "address": "10.0.0.1"}
    doc: dict[str, object] = {"version": "v1", "cluster": {"name": "t", "kubernetes": {"enabled": False}},
                              "nodes": [node]}
    if where == "node":
        node["taints"] = taints
    elif where == "group":
        doc["groups"] = {"gpu": {"taints": taints}}
        node["group"] = "gpu"
    else:
        doc["defaults"] = {"taints": taints}
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps(doc))  # JSON is YAML, with every character escaped
    return path


@_SETTINGS
@given(key=_KEYS, value=_VALUES, effect=st.sampled_from(EFFECTS), where=st.sampled_from(["node", "group", "defaults"]))
def test_every_taint_of_the_kubernetes_grammar_is_taken(tmp_path: Path, key: str, value: str | None, effect: str,
                                                        where: str) -> None:
    taint = _taint(key, value, effect)
    node = load_cluster(_write(tmp_path, [taint], where)).node("n1")
    assert node.taints == (taint,)
    wanted = {"key": key, "effect": effect, **({"value": value} if value else {})}
    assert taint_objects(node.taints) == [wanted]


@pytest.mark.parametrize("taint", ["node-role.kubernetes.io/control-plane:NoSchedule",
                                   "nvidia.com/gpu=present:NoSchedule", "example.com/k=:PreferNoSchedule",
                                   "dedicated=gpu_team.a-1:NoExecute", "A_b.C-9=Z:NoSchedule",
                                   "k" * 63 + "=" + "v" * 63 + ":NoSchedule"])
def test_kubernetes_own_forms_are_taken(tmp_path: Path, taint: str) -> None:
    assert load_cluster(_write(tmp_path, [taint])).node("n1").taints == (taint,)


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], taint: str, where: str = "node") -> None:
    path = _write(tmp_path, ["nvidia.com/gpu=present:NoSchedule", taint], where)
    with pytest.raises(SpecError):
        load_cluster(path)
    capsys.readouterr()
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    taints = {"node": r"\$\.nodes\[0\]", "group": r"\$\.groups\.gpu", "defaults": r"\$\.defaults"}[where]
    located = re.compile(rf"{re.escape(str(path))}:1:\d+: {taints}\.taints\[1\]: .* is not in the expected form")
    assert [line for line in err.splitlines() if located.match(line)], err


@_SETTINGS
@given(key=_KEYS, value=_VALUES, effect=st.sampled_from(EFFECTS), char=st.sampled_from(HOSTILE),
       at=st.integers(min_value=0), where=st.sampled_from(["node", "group", "defaults"]))
def test_a_hostile_character_anywhere_in_a_taint_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                            key: str, value: str | None, effect: str, char: str,
                                                            at: int, where: str) -> None:
    taint = _taint(key, value, effect)
    at %= len(taint) + 1
    _refused(tmp_path, capsys, taint[:at] + char + taint[at:], where)


@pytest.mark.parametrize("taint", [
    "gpu=true", "gpu=true:", "gpu=true:noschedule", "gpu=true:NoExecution", "gpu:NoSchedule:NoExecute",
    "=x:NoSchedule", ":NoSchedule", "k" * 64 + ":NoSchedule", "gpu=" + "v" * 64 + ":NoSchedule",
    "Example.com/gpu:NoSchedule", "-example.com/gpu:NoSchedule", "example..com/gpu:NoSchedule",
    "a/b/c:NoSchedule", "/gpu:NoSchedule", "example.com/:NoSchedule", "-gpu:NoSchedule", "gpu-:NoSchedule",
    "gpu=-x:NoSchedule", "gpu=x-:NoSchedule", "k=v=w:NoSchedule", "a." * 127 + "a/k:NoSchedule",
])
def test_taints_out_of_the_grammar_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], taint: str) -> None:
    _refused(tmp_path, capsys, taint)
