"""Kubernetes operations: node state in, commands out; the join's secrets stay off logs and the controller."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest
from fakehost import FakeHost, raw_commands, run_op

from gpu_provision.k8s import applied, teams
from gpu_provision.k8s.objects import HASH_ANNOTATION, content_hash
from gpu_provision.operations import files
from gpu_provision.operations.kubernetes import labels, manifests, membership, prerequisites
from gpu_provision.operations.kubernetes.probe import ADMIN_CONF, KUBELET_CONF
from gpu_provision.spec.model import Cluster

FSTAB = """\
# <file system> <mount point> <type> <options> <dump> <pass>
UUID=1234 / ext4 errors=remount-ro 0 1
/swapfile none swap sw 0 0
UUID=abcd none\tswap\tsw\t0\t0
# /old-swap none swap sw 0 0
"""
TOKEN = "abcdef.0123456789abcdef"
CA_HASH = "sha256:" + "ab" * 32
CERT_KEY = "f" * 64
JOIN_LINE = f"kubeadm join 10.77.0.11:6443 --token {TOKEN} --discovery-token-ca-cert-hash {CA_HASH} "


def file_entry(text: str | None = None, exists: bool = True) -> dict[str, Any]:
    return {"exists": exists, "type": "file", "mode": "0644", "owner": "root", "group": "root", "content": text}


def api(objects: dict[str, str] | None = None, daemonsets: list[str] | None = None,
        nodes: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"kubernetes": {"admin_conf": True, "kubelet_conf": True, "addresses": ["10.77.0.11"],
                           "api": {"objects": objects or {}, "daemonsets": daemonsets or [], "nodes": nodes or {}}}}


def test_fstab_swap_lines() -> None:
    assert prerequisites.fstab_swap_lines(FSTAB) == ["/swapfile none swap sw 0 0", "UUID=abcd none\tswap\tsw\t0\t0"]


def test_swap_off_turns_swap_off_and_comments_fstab(tmp_path) -> None:
    host = FakeHost({"system": {"swaps": ["/swapfile"]}, "files": {"/etc/fstab": file_entry(FSTAB)}})
    commands = run_op(prerequisites.swap_off, host)
    assert commands[:2] == ["swapoff -a", "cp -a /etc/fstab /etc/fstab.gpu-provision.bak"]
    assert commands[3] == "if command -v systemctl >/dev/null; then systemctl daemon-reload; fi"
    # Run the generated sed on a copy: only the active swap lines change.
    fstab = tmp_path / "fstab"
    fstab.write_text(FSTAB)
    subprocess.run(commands[2].replace("/etc/fstab", shlex.quote(str(fstab))), shell=True, check=True)
    edited = fstab.read_text()
    assert prerequisites.fstab_swap_lines(edited) == []
    assert "# /swapfile none swap sw 0 0" in edited and "UUID=1234 / ext4 errors=remount-ro 0 1" in edited
    assert edited.count("\n") == FSTAB.count("\n")


def test_swap_off_converged() -> None:
    host = FakeHost({"system": {"swaps": []}, "files": {"/etc/fstab": file_entry("UUID=1 / ext4 defaults 0 1\n")}})
    assert run_op(prerequisites.swap_off, host) == []
    assert host.noops == ["swap already off"]


@pytest.mark.parametrize(("modules", "sys_module", "features", "expected"), [
    (["overlay", "br_netfilter"], [], {}, []),
    ([], ["overlay", "br_netfilter"], {}, []),  # built in with parameters
    ([], ["overlay"], {"br_netfilter": True}, []),  # built in without parameters: the rig's kernel
    (["overlay"], [], {"br_netfilter": False}, ["modprobe br_netfilter"]),
    ([], [], {}, ["modprobe overlay", "modprobe br_netfilter"]),
])
def test_modules_loaded(modules: list[str], sys_module: list[str], features: dict[str, bool],
                        expected: list[str]) -> None:
    raw = {"system": {"modules": modules}, "kubernetes": {"module_features": features},
           "files": {f"/sys/module/{m}": {"exists": True, "type": "dir"} for m in sys_module}}
    host = FakeHost(raw)
    assert run_op(prerequisites.modules_loaded, host, modules=("overlay", "br_netfilter")) == expected
    if not expected:
        assert "already loaded" in host.noops[-1]


SYSCTLS = {"net.ipv4.ip_forward": "1", "net.bridge.bridge-nf-call-iptables": "1"}
APPLY = "sysctl --system >/dev/null 2>&1 || sysctl -p /etc/sysctl.d/99-kubernetes.conf >/dev/null"


def test_sysctls_applied_only_when_file_changed_or_values_differ() -> None:
    good = {"system": {"sysctls": dict(SYSCTLS)}}
    host = FakeHost(good)
    assert run_op(prerequisites.sysctls_applied, host, path="/etc/sysctl.d/99-kubernetes.conf", values=SYSCTLS) == []
    host = FakeHost(good)
    files.record_changed(host, ["/etc/sysctl.d/99-kubernetes.conf"])
    assert run_op(prerequisites.sysctls_applied, host, path="/etc/sysctl.d/99-kubernetes.conf", values=SYSCTLS) == [
        APPLY]
    host = FakeHost({"system": {"sysctls": {**SYSCTLS, "net.ipv4.ip_forward": "0"}}})
    assert run_op(prerequisites.sysctls_applied, host, path="/etc/sysctl.d/99-kubernetes.conf", values=SYSCTLS) == [
        APPLY]


def test_init_is_guarded_by_admin_conf() -> None:
    path = "/etc/gpu-provision/kubernetes/kubeadm-init.yaml"
    done = FakeHost({"files": {ADMIN_CONF: file_entry()}}, name="cp-01")
    assert run_op(membership.init, done, config_path=path, first_control_plane="cp-01") == []
    other = FakeHost({"files": {}}, name="gpu-01")
    assert run_op(membership.init, other, config_path=path, first_control_plane="cp-01") == []
    assert other.noops == ["cp-01 initialises the cluster"]
    fresh = FakeHost({"files": {}}, name="cp-01")
    (command,) = run_op(membership.init, fresh, config_path=path, first_control_plane="cp-01")
    assert command.startswith("kubeadm init --config /etc/gpu-provision/kubernetes/kubeadm-init.yaml "
                              "--skip-token-print > /var/log/")


def test_join_is_guarded_by_kubelet_conf(example: Cluster) -> None:
    node = example.node("h200-01")
    host = FakeHost({"files": {KUBELET_CONF: file_entry()}})
    assert run_op(membership.join, host, cluster=example, node=node, control_plane="cp-01") == []
    assert host.noops == ["node already joined"]
    host = FakeHost({"files": {}, "kubernetes": {"addresses": ["10.77.0.12"]}})
    assert run_op(membership.join, host, cluster=example, node=node, control_plane="cp-01") == [["call", "do_join"]]
    host = FakeHost({"files": {}}, name="cp-01")
    assert run_op(membership.join, host, cluster=example, node=example.node("cp-01"), control_plane="cp-01") == []


@pytest.fixture(autouse=True)
def _no_pyinfra_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake state has no operations to take connector arguments from (tests/k8s/test_join_connector.py)."""
    monkeypatch.setattr(membership, "connector_arguments", lambda state, target, running: {})


def _join(example: Cluster, node_name: str, replies: dict[str, Any], worker_ok: bool = True):
    control = FakeHost({}, name="cp-01", replies=replies)
    worker = FakeHost({"files": {}, "kubernetes": {"addresses": ["10.77.0.12"]}}, name=node_name,
                      replies={"umask 077": (worker_ok, [], [] if worker_ok else [f"bad token {TOKEN}", "failed"])})
    state = SimpleNamespace(inventory=SimpleNamespace(get_host=lambda name, default: control if name == "cp-01"
                                                      else default))
    (command,) = raw_commands(membership.join, worker, cluster=example, node=example.node(node_name), control_plane="cp-01")
    result = command.function(state, worker, *command.args, **command.kwargs)
    return result, control, worker, command


def test_worker_join_passes_the_token_on_stdin_only(example: Cluster) -> None:
    ok, control, worker, command = _join(example, "h200-01", {"kubeadm token create": (True, [JOIN_LINE], [])})
    assert ok is True
    assert [c for c, _ in control.ran] == ["kubeadm token create --ttl 15m --print-join-command"]
    ((script, stdin),) = worker.ran
    assert TOKEN not in script and script == membership.join_script()
    assert "umask 077" in script and f"rm -f {membership.JOIN_FILE}" in script
    config = json.loads(stdin)
    assert config["kind"] == "JoinConfiguration" and "controlPlane" not in config
    assert config["discovery"]["bootstrapToken"] == {"apiServerEndpoint": "10.77.0.11:6443", "token": TOKEN,
                                                     "caCertHashes": [CA_HASH]}
    # The operation itself (what pyinfra prints and logs) carries no secret: it is made at execution.
    assert TOKEN not in repr(command) and not worker.logs


def test_control_plane_join_adds_the_certificate_key(example: Cluster) -> None:
    from dataclasses import replace
    cluster = replace(example, nodes=(*example.nodes, replace(example.node("cp-01"), name="cp-02",
                                                               address="127.0.10.3")))
    replies = {"kubeadm token create": (True, [JOIN_LINE], []),
               "kubeadm init phase upload-certs": (True, ["[upload-certs] Using certificate key:", CERT_KEY], [])}
    control = FakeHost({}, name="cp-01", replies=replies)
    worker = FakeHost({"files": {}, "kubernetes": {"addresses": ["10.77.0.13"]}}, name="cp-02")
    state = SimpleNamespace(inventory=SimpleNamespace(get_host=lambda name, default: control))
    (command,) = raw_commands(membership.join, worker, cluster=cluster, node=cluster.node("cp-02"), control_plane="cp-01")
    assert command.function(state, worker, *command.args, **command.kwargs) is True
    config = json.loads(worker.ran[0][1])
    assert config["controlPlane"] == {"certificateKey": CERT_KEY,
                                      "localAPIEndpoint": {"advertiseAddress": "10.77.0.13", "bindPort": 6443}}


def test_failed_join_fails_the_host_and_scrubs_the_token(example: Cluster) -> None:
    ok, _, worker, _ = _join(example, "h200-01", {"kubeadm token create": (True, [JOIN_LINE], [])}, worker_ok=False)
    assert ok is False
    assert worker.logs and all(TOKEN not in line for line in worker.logs)
    assert any("bad token ***" in line for line in worker.logs)


def test_join_fails_when_the_control_plane_makes_no_token(example: Cluster) -> None:
    ok, _, worker, _ = _join(example, "h200-01", {"kubeadm token create": (False, [], ["no admin.conf"])})
    assert ok is False and not worker.ran


def test_parsers() -> None:
    assert membership.parse_join_command(JOIN_LINE + "\n") == ("10.77.0.11:6443", TOKEN, CA_HASH)
    with pytest.raises(ValueError):
        membership.parse_join_command("kubeadm join 10.0.0.1:6443 --token short")
    assert membership.parse_certificate_key(["[upload-certs] Using certificate key:", CERT_KEY, ""]) == CERT_KEY
    with pytest.raises(ValueError):
        membership.parse_certificate_key(["nothing here"])


def _manifest(example: Cluster) -> manifests.Manifest:
    return manifests.Manifest("teams", "/etc/gpu-provision/kubernetes/teams.json",
                        tuple(teams.manifests(example.kubernetes.teams[0], example.kubernetes)))


def test_manifest_applied_when_objects_are_missing_or_differ(example: Cluster) -> None:
    manifest = _manifest(example)
    applied = {f"{o['kind']}/{o['metadata'].get('namespace', '')}/{o['metadata']['name']}": content_hash(o)
               for o in manifest.objects}
    host = FakeHost(api(applied))
    assert run_op(manifests.manifest_applied, host, manifest=manifest) == []
    assert host.noops == ["manifest teams already applied"]
    changed = dict(applied, **{"ResourceQuota/vision/gpu-quota": "0" * 64})
    assert run_op(manifests.manifest_applied, FakeHost(api(changed)), manifest=manifest) == [
        "kubectl --kubeconfig=/etc/kubernetes/admin.conf apply -f /etc/gpu-provision/kubernetes/teams.json"]
    missing = {k: v for k, v in applied.items() if not k.startswith("LimitRange")}
    assert manifests.stale_objects(manifest, {"objects": missing}) == ["LimitRange/vision/default-limits"]
    assert HASH_ANNOTATION == "gpu-provision/content-sha256"


def test_a_switch_of_allocation_mode_deletes_the_other_allocators_objects(example: Cluster) -> None:
    """The example runs the device plugin; switched to DRA, its DaemonSets, RBAC and configuration go (the
    RuntimeClass both modes render stays), and once they are gone the operation does nothing."""
    import dataclasses

    dra_cluster = dataclasses.replace(example, kubernetes=dataclasses.replace(example.kubernetes,
                                                                              gpu_allocation="dra"))
    left = applied.other_allocator(dra_cluster)
    idents = {"/".join((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])) for o in left}
    assert "DaemonSet/kube-system/nvidia-device-plugin" in idents
    assert not any(i.startswith("RuntimeClass/") for i in idents)
    assert not {"/".join((o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]))
                for objs in applied.manifests(dra_cluster).values() for o in objs} & idents
    present = {ident: "0" * 64 for ident in ("DaemonSet/kube-system/nvidia-device-plugin", "Namespace//vision")}
    assert run_op(manifests.objects_deleted, FakeHost(api(present)), objects=tuple(left)) == [
        "kubectl --kubeconfig=/etc/kubernetes/admin.conf delete daemonset nvidia-device-plugin -n kube-system "
        "--ignore-not-found"]
    host = FakeHost(api({"Namespace//vision": "0" * 64}))
    assert run_op(manifests.objects_deleted, host, objects=tuple(left)) == []
    assert host.noops == ["no object of the other GPU allocation mode is left"]
    # Back to the device plugin: the DRA driver's DaemonSet and DeviceClasses are the other mode's.
    back = {o["kind"] for o in applied.other_allocator(example)}
    assert {"DaemonSet", "DeviceClass"} <= back


def test_manifest_applied_fails_the_host_when_the_api_does_not_answer(example: Cluster) -> None:
    raw = {"kubernetes": {"admin_conf": True, "api": None, "api_error": "kubectl get: connection refused"}}
    (command,) = run_op(manifests.manifest_applied, FakeHost(raw, executing=True), manifest=_manifest(example))
    assert command.endswith("exit 1") and "connection refused" in command
    # Before kubeadm init, prepare time expects the apply; execution without admin.conf is a failure.
    raw = {"kubernetes": {"admin_conf": False, "api": None}}
    assert run_op(manifests.manifest_applied, FakeHost(raw), manifest=_manifest(example))[0].startswith("kubectl")
    assert run_op(manifests.manifest_applied, FakeHost(raw, executing=True),
                  manifest=_manifest(example))[0].endswith("exit 1")


def test_cni_applied_once(tmp_path) -> None:
    args = {"registry": None, "daemonset": "kube-flannel/kube-flannel-ds", "path": "/etc/gpu-provision/kubernetes/cni.yaml"}
    host = FakeHost(api(daemonsets=["kube-flannel/kube-flannel-ds"]))
    assert run_op(manifests.cni_applied, host, source="https://example.invalid/flannel.yml", **args) == []
    commands = run_op(manifests.cni_applied, FakeHost(api()), source="https://example.invalid/flannel.yml", **args)
    assert commands[0] == "mkdir -p /etc/gpu-provision/kubernetes"
    assert commands[1].startswith("python3 -c ") and "https://example.invalid/flannel.yml" in commands[1]
    assert commands[2] == "kubectl --kubeconfig=/etc/kubernetes/admin.conf apply -f /etc/gpu-provision/kubernetes/cni.yaml"
    local = tmp_path / "cni.json"
    local.write_text('{"image": "docker.io/flannel/flannel:v0.26.4"}\n')
    commands = run_op(manifests.cni_applied, FakeHost(api()), source=str(local), **{**args, "registry": "reg:5000"})
    assert commands[1] == ["write", '{"image": "reg:5000/flannel/flannel:v0.26.4"}\n', args["path"], "root:root", "0644"]
    (failure,) = run_op(manifests.cni_applied, FakeHost(api()), source=None, **args)
    assert "cni_manifest" in failure and failure.endswith("exit 1")


YAML_MANIFEST = """\
      containers:
      - name: kube-flannel
        image: docker.io/flannel/flannel:v0.26.4
      initContainers:
        - image: "ghcr.io/flannel-io/flannel-cni-plugin:v1.6.2"
        - {"image": "busybox:1.36", "name": "x"}
"""


def test_registry_rewrite_on_the_node_matches_the_controller(tmp_path) -> None:
    expected = manifests.rewrite_images(YAML_MANIFEST, "reg.internal:5000")
    assert "image: reg.internal:5000/flannel/flannel:v0.26.4" in expected
    assert 'image: "reg.internal:5000/flannel-io/flannel-cni-plugin:v1.6.2"' in expected
    assert '"image": "reg.internal:5000/busybox:1.36"' in expected
    source = tmp_path / "in.yaml"
    source.write_text(YAML_MANIFEST)
    out = tmp_path / "out.yaml"
    subprocess.run([sys.executable, "-c", manifests._FETCH_MANIFEST, source.as_uri(), str(out), "reg.internal:5000"],
                   check=True)
    assert out.read_text() == expected
    subprocess.run([sys.executable, "-c", manifests._FETCH_MANIFEST, source.as_uri(), str(out), ""], check=True)
    assert out.read_text() == YAML_MANIFEST


def test_label_plan() -> None:
    wanted = {"g1": ({"nvidia.com/gpu.present": "true", "zone": "a"}, ("gpu=only:NoSchedule",)),
              "g2": ({"zone": "b"}, ()),
              "g3": ({"zone": "c"}, ())}
    current = {"nodes": {
        "g1": {"labels": {"zone": "a", "kubernetes.io/hostname": "g1"},
               "taints": [{"key": "other", "effect": "NoExecute"}]},
        "g2": {"labels": {"zone": "b"}, "taints": []},
    }}
    kubectl = "kubectl --kubeconfig=/etc/kubernetes/admin.conf"
    commands = labels.label_plan(wanted, current)
    assert commands == [
        f"{kubectl} label node g1 --overwrite nvidia.com/gpu.present=true",
        f"{kubectl} taint node g1 --overwrite gpu=only:NoSchedule",
        f"for i in $(seq 60); do {kubectl} get node g3 >/dev/null 2>&1 && break; sleep 2; done",
        f"{kubectl} label node g3 --overwrite zone=c",
    ]
    current["nodes"]["g1"]["labels"]["nvidia.com/gpu.present"] = "true"
    current["nodes"]["g1"]["taints"].append({"key": "gpu", "value": "only", "effect": "NoSchedule"})
    current["nodes"]["g3"] = {"labels": {"zone": "c"}, "taints": []}
    assert labels.label_plan(wanted, current) == []


def test_node_labels_reads_the_api_again_at_execution() -> None:
    host = FakeHost(api(nodes={"g1": {"labels": {"zone": "a"}, "taints": []}}), executing=True)
    assert run_op(labels.node_labels, host, wanted={"g1": ({"zone": "a"}, ())}) == []
    assert run_op(labels.node_labels, host, wanted={"g1": ({"zone": "a"}, ())}) == []
    assert host.probes == 2


def test_node_labels_waits_only_for_nodes_that_can_still_join() -> None:
    raw = api(nodes={"g1": {"labels": {}, "taints": []}})
    wanted = {"g1": ({"zone": "a"}, ()), "g2": ({"zone": "b"}, ()), "g3": ({"zone": "c"}, ()),
              "g4": ({"zone": "d"}, ())}
    hosts = {name: FakeHost({}, name=name) for name in ("g1", "g2", "g3")}
    host = FakeHost(raw, executing=True, name="cp-01")
    host.state.inventory = SimpleNamespace(get_host=lambda name, default: hosts.get(name, default))
    host.state.activated_hosts = {hosts["g1"], hosts["g2"], hosts["g3"]}
    host.state.failed_hosts = {hosts["g3"]}  # failed earlier in the run; g4 is not in the run at all
    commands = run_op(labels.node_labels, host, wanted=wanted)
    assert [c.split(" node ")[1].split()[0] for c in commands] == ["g1", "g2", "g2"]
    assert "seq 60" in commands[1]
    assert [n.split()[1] for n in host.noops] == ["g3", "g4"]


def test_a_failed_join_names_the_command_its_status_and_tail(example: Cluster) -> None:
    from gpu_provision.operations.remote import STATUS_MARK

    control = FakeHost({}, name="cp-01", replies={"kubeadm token create": (True, [JOIN_LINE], [])})
    worker = FakeHost({"files": {}, "kubernetes": {"addresses": ["10.77.0.12"]}}, name="h200-01",
                      replies={"umask 077": (False, [], [f"bad token {TOKEN}", "", f"{STATUS_MARK}1"])})
    state = SimpleNamespace(inventory=SimpleNamespace(get_host=lambda name, default: control))
    assert membership.do_join(state, worker, example, example.node("h200-01"), "cp-01", None) is False
    (logged,) = worker.logs
    assert logged.startswith("kubeadm join: umask 077 && mkdir -p /run/gpu-provision") and TOKEN not in logged
    assert logged.endswith(" exited 1: bad token ***")
    control.replies = {"kubeadm token create": (False, [], ["no admin.conf", "", f"{STATUS_MARK}2"])}
    assert membership.do_join(state, worker, example, example.node("h200-01"), "cp-01", None) is False
    assert worker.logs[-1] == ("join: on cp-01: kubeadm token *** --ttl 15m --print-join-command exited 2: "  # redaction hides the word after "token"
                               "no admin.conf")
