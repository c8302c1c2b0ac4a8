"""One source per setting: the settings description gives the schema's defaults and the typed model's."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gpu_provision.spec import load_cluster
from gpu_provision.spec.model import Kubernetes, Node, SshSettings, Team
from gpu_provision.spec.settings import default, defaults

MINIMAL = """\
version: v1
cluster:
  name: t
  kubernetes:
    teams: [{name: vision}]
nodes:
  - {name: cp, address: 127.0.0.1, role: control-plane}
  - {name: plain, address: 127.0.0.2}
"""


def _model_defaults(instance: Any, prefix: str) -> dict[str, Any]:
    """Every scalar default of a model dataclass (and of the dataclasses it holds), by settings path."""
    found: dict[str, Any] = {}
    for f in dataclasses.fields(instance):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            found.update(_model_defaults(value, f"{prefix}{f.name}."))
        elif f.default is not dataclasses.MISSING and f.default not in (None, ()):
            # None is "not set" and () an empty list: neither is a default the reference needs to show.
            found[f"{prefix}{f.name}"] = f.default
    return found


def test_every_model_default_is_a_setting_default() -> None:
    node = _model_defaults(Node(name="n", address="a"), "")
    # A node's SSH settings default to the cluster's; line is where the node was written, not a setting.
    node = {k: v for k, v in node.items() if not k.startswith("ssh.") and k != "line"}
    found = {
        **node,
        **_model_defaults(SshSettings(), "cluster.ssh."),
        **_model_defaults(Kubernetes(), "cluster.kubernetes."),
        **_model_defaults(Team(name="t", namespace="t"), "cluster.kubernetes.teams[]."),
    }
    assert found, "the walk found no defaults"
    for path, value in found.items():
        assert path in defaults(), f"{path} has a default in the model ({value!r}) but none in the settings"
        assert default(path) == value, f"{path}: model {value!r}, settings {default(path)!r}"


def _read(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part.removesuffix("[]"))
        if part.endswith("[]"):
            obj = obj[0]
    return obj


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: _plain(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@pytest.mark.parametrize("path", sorted(defaults()))
def test_a_file_that_leaves_a_setting_out_gets_its_default(path: str, tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text(MINIMAL)
    cluster = load_cluster(tmp_path / "cluster.yaml")
    root: Any = cluster if path.startswith("cluster.") else cluster.node("plain")
    value, wanted = _plain(_read(root, path.removeprefix("cluster."))), _plain(default(path))
    if isinstance(wanted, dict):
        # A repository's default names only what upstream sets; the model adds its empty components.
        value = {k: value[k] for k in wanted}
    assert value == wanted


def test_unknown_path_has_no_default() -> None:
    with pytest.raises(KeyError):
        default("driver.version")


def test_a_layout_may_use_every_profile_suffix_nvidia_documents(tmp_path: Path) -> None:
    (tmp_path / "cluster.yaml").write_text("""\
version: v1
cluster:
  name: t
  kubernetes: {enabled: false}
nodes:
  - name: n1
    address: 127.0.0.1
    gpus: {model: RTX-PRO-6000, count: 3}
    mig:
      layout: {"1g.24gb+me.all": 1, "1g.24gb-me": 3}
      gpus:
        1: {layout: {"1g.24gb+gfx": 2, "2g.48gb-me": 1}}
        2: {layout: {"1g.24gb+me": 1, "1g.24gb": 1, "2g.48gb+gfx": 1}}
""")
    layouts = load_cluster(tmp_path / "cluster.yaml").node("n1").mig.layouts
    assert sorted(p.profile for p in layouts[0].planned.placements) == ["1g.24gb+me.all"] + ["1g.24gb-me"] * 3
    assert sorted(p.profile for p in layouts[1].planned.placements) == ["1g.24gb+gfx"] * 2 + ["2g.48gb-me"]
    assert sorted(p.profile for p in layouts[2].planned.placements) == ["1g.24gb", "1g.24gb+me", "2g.48gb+gfx"]
