"""Classes of cluster-file values a careless or hostile user writes, each refused with a located message (exit 2,
FILE:LINE:COL, no traceback): open-ended classes are swept with hypothesis, closed ones by example. The
invalid-input corpus (invalid/) holds one file per class as well."""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_provision.cli import main
from gpu_provision.k8s import teams
from gpu_provision.node.diagnose import collect
from gpu_provision.node.verify import runtime
from gpu_provision.spec import load_cluster
from gpu_provision.spec.semantics import canonical_address
from gpu_provision.spec.settings import (
    ADDRESS,
    ENDPOINT,
    IMAGE_REFERENCE,
    LABEL_KEY,
    LABEL_VALUE,
    NODE_SETTINGS,
    SCHEMA,
    entries,
)

#: The smallest OpenPGP public-key packet the key check accepts (as tests/spec/test_key_file.py writes it).
KEY = b"\x99\x00\x0d\x04" + bytes(range(13))
HEAD = "version: v1\ncluster:\n  name: t\n  kubernetes: {enabled: false}\nnodes:\n  - name: n1\n    address: 10.0.0.1\n"
_SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _refused(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(text, encoding="utf-8")
    status = main(["validate", str(path)])
    out, err = capsys.readouterr()
    assert status == 2, out + err
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert lines and all(re.match(rf"{re.escape(str(path))}:\d+:\d+: \$", line) for line in lines), err
    return lines


def _quoted(text: str) -> str:
    return '"' + text.encode("unicode_escape").decode().replace('"', '\\"') + '"'


def test_every_number_setting_is_bounded_both_ways() -> None:
    # An integer spelling of a string-pattern setting (permissions.mode: -1) escaped every check before.
    for path, sub in [*entries(SCHEMA), *entries(NODE_SETTINGS)]:
        types = sub.get("type") if isinstance(sub.get("type"), list) else [sub.get("type")]
        if {"integer", "number"} & set(types):
            assert "minimum" in sub and "maximum" in sub or path == "permissions.mode", path
    mode = NODE_SETTINGS["properties"]["permissions"]["properties"]["mode"]
    assert mode["minimum"] == 0  # above 0o777 the check of meaning explains YAML's decimal reading


@pytest.mark.parametrize(("setting", "value"), [("permissions:\n      mode", "-1"), ("driver:\n      cuda_min", "-12.4"),
                                                ("driver:\n      cuda_min", "1e300"),
                                                ("container_runtime:\n      version", "'-1.7; reboot'")])
def test_numbers_and_versions_out_of_range_are_refused(tmp_path: Path, setting: str, value: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _refused(tmp_path, HEAD + f"    {setting}: {value}\n", capsys)


_K8S_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=70)


@_SLOW
@given(key=_K8S_TEXT)
def test_label_keys_outside_kubernetes_grammar_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                           key: str) -> None:
    if re.fullmatch(LABEL_KEY, key) or key.strip() != key or not key.isprintable():
        return
    _refused(tmp_path, HEAD + f"    labels:\n      {_quoted(key)}: x\n", capsys)


@_SLOW
@given(value=_K8S_TEXT)
def test_label_values_outside_kubernetes_grammar_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             value: str) -> None:
    if re.fullmatch(LABEL_VALUE, value):
        return
    _refused(tmp_path, HEAD + f"    labels:\n      team: {_quoted(value)}\n", capsys)


def test_label_grammar_takes_kubernetes_own_examples() -> None:
    for key in ("app", "example.com/release", "kubernetes.io/hostname", "a_b.c-d"):
        assert re.fullmatch(LABEL_KEY, key), key
    for key in ("-a", "a-", ".fun/x", "foo..bar/x", "a b", "x" * 64, "p" * 254 + "/x"):
        assert not re.fullmatch(LABEL_KEY, key), key
    assert re.fullmatch(LABEL_VALUE, "") and not re.fullmatch(LABEL_VALUE, "v" * 64)


@pytest.mark.parametrize("address", ["999.1.1.1", "10.0.0.1.5", "1.2.3", "a.b.123"])
def test_host_names_shaped_like_ipv4_are_refused(tmp_path: Path, address: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    lines = _refused(tmp_path, HEAD.replace("10.0.0.1", address), capsys)
    assert any("is not an IP address or a host name" in line for line in lines)


def _inet_aton_reads(name: str) -> bool:
    # The oracle, written here on purpose rather than imported: the product's own helper must not judge itself.
    try:
        socket.inet_aton(name)
    except (OSError, ValueError):
        return False
    return True


def _dotted_quad(name: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(name), ipaddress.IPv4Address)
    except ValueError:
        return False


@pytest.mark.parametrize("address", ["10", "0x7f.1", "0x7f", "017.1.1.1", "4294967295", "1.0x10", "1.2.3.4."])
def test_names_inet_aton_reads_as_ipv4_are_refused(tmp_path: Path, address: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert _inet_aton_reads(address.rstrip(".")) and not _dotted_quad(address)
    lines = _refused(tmp_path, HEAD.replace("10.0.0.1", f"'{address}'"), capsys)
    assert any(f"'{address}' is not an IP address or a host name" in line for line in lines), lines


@settings(max_examples=300, deadline=None)
@given(name=st.text(alphabet="0123456789abcdefxX.", min_size=1, max_size=16))
def test_no_host_name_looks_like_a_malformed_ipv4_address(name: str) -> None:
    # RFC 1123 section 2.1: a host name never has the syntax of a dotted-decimal number. Whatever inet_aton(3)
    # reads as an IPv4 address, or whose last label is all digits, is an address: a valid dotted quad or nothing.
    looks_ipv4 = _inet_aton_reads(name) or name.rstrip(".").rsplit(".", 1)[-1].isdigit()
    if looks_ipv4 and not _dotted_quad(name):
        assert canonical_address(name) is None, name
        assert not re.fullmatch(ADDRESS, name), name
    if canonical_address(name) is not None:
        assert re.fullmatch(ADDRESS, name), name  # the schema takes every address the check of meaning takes


@settings(max_examples=500, deadline=None)
@given(octets=st.lists(st.one_of(st.integers(0, 300).map(str), st.integers(0, 99).map(lambda n: f"0{n}")),
                       min_size=4, max_size=4))
def test_dotted_quads_are_written_as_ipaddress_writes_them(octets: list[str]) -> None:
    # The check of meaning takes a plain dotted quad as its own canonical form without parsing it: the standard
    # library's parse is the oracle for every such text, valid or not.
    text = ".".join(octets)
    try:
        expected: str | None = str(ipaddress.ip_address(text))
    except ValueError:
        expected = None
    assert canonical_address(text) == expected, text


@pytest.mark.parametrize("address", ["gpu-01.lab", "GPU-01.Lab.", "0x7f.com", "a.0x7f", "3com.example", "localhost",
                                     "10.0.0.1", "::1", "fe80::1%eth0", "::ffff:10.0.0.1"])
def test_addresses_and_host_names_are_taken(address: str) -> None:
    assert canonical_address(address) is not None and re.fullmatch(ADDRESS, address)


@pytest.mark.parametrize("address", ["fe80::1%eth0;id", "fe80::1%$(id)", "fe80::1% x", "-oProxyCommand=x"])
def test_ipv6_scopes_and_options_are_refused(address: str) -> None:
    assert canonical_address(address) is None and not re.fullmatch(ADDRESS, address)


@pytest.mark.parametrize("endpoint", ["999.1.1.1:6443", "10:6443", "0x7f.1", "017.1:6443", "-oProxyCommand=x:1",
                                      "api.lab:", "[fd00::1", "api.lab:70000", "fe80::1%eth0;id", "api lab:6443"])
def test_control_plane_endpoints_shaped_like_a_malformed_address_are_refused(tmp_path: Path, endpoint: str,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    text = HEAD.replace("{enabled: false}", f"{{enabled: true, control_plane_endpoint: '{endpoint}'}}") + \
        "    role: control-plane\n"
    lines = _refused(tmp_path, text, capsys)
    assert any("$.cluster.kubernetes.control_plane_endpoint: " in line and "is not an API server endpoint" in line
               for line in lines), lines


@pytest.mark.parametrize("endpoint", ["api.lab", "api.lab:6443", "10.0.0.1", "10.0.0.1:6443", "[fd00::1]:6443",
                                      "fd00::1", "GPU-API.Lab.:443"])
def test_control_plane_endpoints_of_an_address_and_port_are_taken(endpoint: str) -> None:
    assert re.fullmatch(ENDPOINT, endpoint)


def test_one_gpu_named_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = HEAD + "    gpus: {model: H200, count: 8}\n    vgpu:\n      gpus: {'7': NVIDIA H200X-141C, '07': x}\n"
    assert any("'07' is not allowed as a key here" in line for line in _refused(tmp_path, text, capsys))


@pytest.mark.parametrize("setting", ["mig: {layout: {1g.18gb: 7}}", "mig: {gpus: {'0': {enabled: true}}}",
                                     "vgpu: {type: NVIDIA H200X-141C}"])
def test_gpu_settings_on_a_node_without_a_model_are_refused(tmp_path: Path, setting: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    lines = _refused(tmp_path, HEAD + f"    {setting}\n", capsys)
    assert any("names no GPU model" in line for line in lines)


@pytest.mark.parametrize(("kubernetes", "address", "message"), [
    ("{control_plane_endpoint: '2001:db8::10'}", "10.0.0.1", "IPv6 endpoint in an IPv4 cluster"),
    ("{}", "'2001:db8::10'", "would advertise the IPv6 address"),
    ("{pod_cidr: 'fd00:10:244::/56'}", "10.0.0.1", "is IPv4, the pod CIDR"),
])
def test_address_families_are_one(tmp_path: Path, kubernetes: str, address: str, message: str,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    text = (f"version: v1\ncluster:\n  name: t\n  kubernetes: {kubernetes}\nnodes:\n"
            f"  - {{name: cp, address: {address}, role: control-plane}}\n")
    assert any(message in line for line in _refused(tmp_path, text, capsys))


_OPTION = st.text(st.characters(codec="ascii", categories=("L", "N", "P", "S")), max_size=30).map(lambda s: "-" + s)
_IMAGE_SETTINGS = ["cluster.kubernetes.device_plugin_image", "cluster.kubernetes.dra_driver_image",
                   "cluster.kubernetes.verification.image",
                   "cluster.kubernetes.monitoring.dcgm_exporter_image", "verify.container_image"]


def test_every_image_setting_takes_an_image_reference_only() -> None:
    found = {path: sub for path, sub in [*entries(SCHEMA), *entries(NODE_SETTINGS)] if path.endswith("image")}
    assert sorted(found) == sorted(_IMAGE_SETTINGS)
    assert all(sub.get("pattern") == IMAGE_REFERENCE for sub in found.values())


@_SLOW
@given(value=_OPTION)
def test_values_that_read_as_options_are_refused_by_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             value: str) -> None:
    _refused(tmp_path, HEAD + f"    verify:\n      container_image: {_quoted(value)}\n", capsys)


def _argvs(image: str) -> list[Any]:
    """Every node-side argv built from an image the file names, or the refusal each builder answers with."""
    out: list[Any] = []
    for spec in ({"kind": "docker", "cdi": True}, {"kind": "docker"}, {"kind": "containerd"}):
        try:
            out.append(runtime.container_command({**spec, "image": image}))
        except ValueError as exc:
            out.append(exc)
    out.append(runtime.run_container({"kind": "containerd", "image": image}))
    out.append(collect.image_env(image))
    return out


@settings(max_examples=60, deadline=None)
@given(value=_OPTION)
def test_no_command_builder_passes_an_option_shaped_value(value: str) -> None:
    # docker run, ctr run, ctr images pull and crictl inspecti would read '--volume=/:/host' as their own option.
    for built in _argvs(value):
        if isinstance(built, list):
            raise AssertionError(f"argv built from {value!r}: {built}")
        if isinstance(built, dict):
            assert "refused" in str(built.get("error")), built
        else:
            assert isinstance(built, ValueError)


def test_command_builders_keep_a_valid_image() -> None:
    argv = runtime.container_command({"kind": "containerd", "image": "python:3.12-slim"})
    assert argv is not None and "python:3.12-slim" in argv


def test_a_symlink_out_of_the_cluster_directory_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "cni.yaml").write_text("kind: List\n")
    here = tmp_path / "here"
    here.mkdir()
    os.symlink(outside / "cni.yaml", here / "cni.yaml")
    text = ("version: v1\ncluster:\n  name: t\n  kubernetes: {cni_manifest: cni.yaml}\nnodes:\n"
            "  - {name: cp, address: 10.0.0.1, role: control-plane}\n")
    lines = _refused(here, text, capsys)
    assert any("cni_manifest" in line and "outside the directories" in line for line in lines)
    (here / "cluster.yaml").write_text(text.replace("  name: t\n", f"  name: t\n  controller_dirs: [{outside}]\n"))
    assert load_cluster(here / "cluster.yaml").controller_dirs == (str(outside.resolve()),)


@pytest.mark.parametrize("setting", ["ssh:\n    key: /etc/shadow", "ssh:\n    known_hosts: ../../x",
                                     "mirrors:\n    cuda: {url: 'http://m/', key_file: ../outside.key}"])
def test_controller_files_outside_the_allowed_directories_are_refused(tmp_path: Path, setting: str,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path.parent / "outside.key").write_bytes(KEY)
    text = HEAD.replace("  kubernetes: {enabled: false}\n", f"  kubernetes: {{enabled: false}}\n  {setting}\n")
    assert any("outside the directories" in line for line in _refused(tmp_path, text, capsys))


@pytest.mark.parametrize(("key", "name", "message"), [
    ("groups", "system:authenticated", "is a Kubernetes system group"),
    ("groups", "system:serviceaccounts", "is a Kubernetes system group"),
    ("users", "system:masters", "is a Kubernetes system user"),
    ("users", "system:serviceaccount:kube-system:default", "goes in service_accounts"),
    ("users", "*", "is not in the expected form"),
    ("service_accounts", "kube-system:default", "is not in the expected form"),
])
def test_team_subjects_are_the_teams_own(tmp_path: Path, key: str, name: str, message: str,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    text = ("version: v1\ncluster:\n  name: t\n  kubernetes:\n    teams:\n"
            f"      - {{name: ml, {key}: [{_quoted(name)}]}}\nnodes:\n"
            "  - {name: cp, address: 10.0.0.1, role: control-plane}\n")
    lines = _refused(tmp_path, text, capsys)
    assert any(f"teams[0].{key}[0]" in line and message in line for line in lines), lines


def test_team_service_accounts_are_bound_in_the_teams_namespace(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("version: v1\ncluster:\n  name: t\n  kubernetes:\n    teams:\n"
                    "      - {name: ml, namespace: ml-ns, users: [alice@example.com], service_accounts: [trainer]}\n"
                    "nodes:\n  - {name: cp, address: 10.0.0.1, role: control-plane}\n")
    team = load_cluster(path).kubernetes.teams[0]
    assert teams.subjects(team)[-1] == {"kind": "ServiceAccount", "name": "trainer", "namespace": "ml-ns"}


def test_a_groups_ssh_key_outside_the_allowed_directories_is_refused(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    text = HEAD.replace("nodes:\n", "groups:\n  g: {ssh: {key: /etc/ssh/ssh_host_ed25519_key}}\nnodes:\n") + \
        "    group: g\n"
    lines = _refused(tmp_path, text, capsys)
    assert any("$.groups.g.ssh.key" in line and "outside the directories" in line for line in lines), lines
