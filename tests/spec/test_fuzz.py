"""Random YAML and random mutations of the example never produce a traceback: a clean result or a located error."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_provision.errors import GpuProvisionError, SpecError
from gpu_provision.spec import load_cluster

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = yaml.safe_load((ROOT / "inventory" / "cluster.yaml").read_text())
EXAMPLE["cluster"]["mig_parted_file"] = str(ROOT / "inventory" / "mig-parted.yaml")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False),
                    st.text(max_size=20))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=20)


def _load(tmp_path: Path, text: str | bytes) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    try:
        load_cluster(path)
    except SpecError as exc:
        assert exc.problems
        for problem in exc.problems:
            assert problem.file == str(path) and problem.line >= 1 and problem.path.startswith("$")
    except GpuProvisionError:
        pass


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(EXAMPLE) if p]


def _set(doc, path, value):
    target = doc
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=400))
def test_random_bytes(tmp_path: Path, data: bytes) -> None:
    _load(tmp_path, data)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values)
def test_random_yaml_documents(tmp_path: Path, doc) -> None:
    _load(tmp_path, yaml.safe_dump(doc))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(PATHS), values)
def test_random_mutations_of_the_example(tmp_path: Path, path, value) -> None:
    doc = copy.deepcopy(EXAMPLE)
    _set(doc, path, value)
    _load(tmp_path, yaml.safe_dump(doc))


def test_alias_bomb_is_refused_quickly(tmp_path: Path) -> None:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for n in range(1, 10):
        refs = ",".join([f"*a{n - 1}"] * 10)
        lines.append(f"a{n}: &a{n} [{refs}]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    try:
        load_cluster(path)
    except SpecError as exc:
        assert "more than" in str(exc) and "aliases" in str(exc)
    else:
        raise AssertionError("an alias bomb was accepted")


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
    try:
        load_cluster(path)
    except SpecError as exc:
        assert "nesting is deeper" in str(exc)
    else:
        raise AssertionError("deep nesting was accepted")
