"""The compiled schema check accepts only what jsonschema accepts: over the invalid corpus, the example files, the
real verification reports and random changes to them, a document it accepts has no jsonschema error, and every
valid example and report is accepted (so valid input never needs jsonschema)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu_provision.spec import yamlsafe
from gpu_provision.spec.accept import acceptor, compile_schema
from gpu_provision.spec.schema import load_schema, validator_class

REPO = Path(__file__).resolve().parents[2]
CLUSTERS = sorted((REPO / "tests" / "spec" / "invalid").glob("*.yaml")) + sorted((REPO / "inventory").glob("*.yaml"))
EXAMPLES = sorted(p for p in (REPO / "inventory").glob("*.yaml") if p.name != "mig-parted.yaml")
REPORTS = sorted((REPO / "tests" / "fixtures" / "device").glob("**/verify*.json"))
CLUSTER_SCHEMA, REPORT_SCHEMA = "cluster.v1.schema.json", "verify-report.v1.schema.json"


def _cluster_valid(document: Any) -> bool:
    return not any(validator_class()(load_schema(CLUSTER_SCHEMA)).iter_errors(document))


def _report_valid(document: Any) -> bool:
    validator = jsonschema.Draft202012Validator(load_schema(REPORT_SCHEMA), format_checker=jsonschema.FormatChecker())
    return not any(validator.iter_errors(document))


def _reports() -> list[dict[str, Any]]:
    out = []
    for path in REPORTS:
        data = json.loads(path.read_text())
        out.extend(data if isinstance(data, list) else [data])
    return out


def _readable(path: Path) -> bool:
    try:
        yamlsafe.load_yaml(path.read_bytes(), str(path))
    except Exception:
        return False
    return True


#: The corpus files the YAML loader itself refuses (before any schema): they give the acceptor nothing to judge.
UNREADABLE = [p for p in CLUSTERS if not _readable(p)]


def test_only_the_yaml_corpus_is_refused_before_the_schema() -> None:
    """Files that break YAML itself (syntax, tabs, duplicate keys, Python tags) are all of the ``yaml-`` corpus;
    every other corpus file reaches the schema, so the test below judges it."""
    assert UNREADABLE and all(p.name.startswith("yaml-") for p in UNREADABLE), [p.name for p in UNREADABLE]


@pytest.mark.parametrize("path", [p for p in CLUSTERS if p not in UNREADABLE], ids=lambda p: p.name)
def test_an_accepted_cluster_file_has_no_schema_error(path: Path) -> None:
    document, _ = yamlsafe.load_yaml(path.read_bytes(), str(path))
    if acceptor(CLUSTER_SCHEMA)(document):
        assert _cluster_valid(document)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_valid_example_files_are_accepted_without_jsonschema(path: Path) -> None:
    document, _ = yamlsafe.load_yaml(path.read_bytes(), str(path))
    assert acceptor(CLUSTER_SCHEMA)(document)


def test_real_reports_are_accepted() -> None:
    reports = _reports()
    assert reports
    assert all(acceptor(REPORT_SCHEMA)(r) for r in reports)


#: Values swapped in for one value of a valid document: wrong types, edge numbers, unknown keys.
ODD = [None, True, False, 0, -1, 1.5, float("nan"), float("inf"), "", "x", "580\n", "0660", [], [1], {}, {"zz": 1},
       1e30, "2026-13-99T00:00:00Z"]


def _paths(value: Any, here: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [here]
    if isinstance(value, dict):
        for key, child in value.items():
            out += _paths(child, (*here, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            out += _paths(child, (*here, index))
    return out


def _changed(document: Any, path: tuple[Any, ...], value: Any, add_key: bool) -> Any:
    changed = copy.deepcopy(document)
    if not path:
        return value
    parent = changed
    for part in path[:-1]:
        parent = parent[part]
    if add_key and isinstance(parent, dict):
        parent["unknown_" + str(path[-1])] = value
    else:
        parent[path[-1]] = value
    return changed


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_changed_documents_are_accepted_only_when_valid(data: st.DataObject) -> None:
    examples = [(yamlsafe.load_yaml(p.read_bytes(), str(p))[0], CLUSTER_SCHEMA, _cluster_valid) for p in EXAMPLES]
    examples += [(r, REPORT_SCHEMA, _report_valid) for r in _reports()]
    document, name, valid = data.draw(st.sampled_from(examples))
    path = data.draw(st.sampled_from(_paths(document)))
    changed = _changed(document, path, data.draw(st.sampled_from(ODD)), data.draw(st.booleans()))
    if acceptor(name)(changed):
        assert valid(changed)


def test_unknown_keywords_refuse_so_jsonschema_decides() -> None:
    assert not compile_schema({"type": "object", "patternProperties": {"^a": {"type": "string"}}})({"a": 1})
    assert not compile_schema({"type": "string", "format": "hostname"})("a")
    assert compile_schema({"type": "string", "format": "date-time"})("2026-12-02T13:00:00.123Z")
