"""Stand-in .debs: metadata, reuse of unchanged builds, and the programs run from an extracted tree."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import tomlkit
from simnode import H200X2_HOST, SIM_MODULES

from gpu_provision_rig import debs

EXPECTED = {
    ("cuda", "nvidia-driver"): ["580.159.04-1", "580.126.09-1", "590.48.01-1"],
    ("cuda", "nvidia-kernel-open-dkms"): ["580.159.04-1", "580.126.09-1", "590.48.01-1"],
    ("cuda", "nvidia-kernel-dkms"): ["580.159.04-1", "580.126.09-1", "590.48.01-1"],
    ("cuda", "nvidia-open"): ["580.159.04-1", "580.126.09-1", "590.48.01-1"],
    ("cuda", "cuda-drivers"): ["580.159.04-1", "580.126.09-1", "590.48.01-1"],
    ("cuda", "nvidia-fabricmanager"): ["580.159.04-1", "580.126.09-1", "590.48.01-1"],
    ("cuda", "libnvidia-nscq"): ["580.159.04-1", "580.126.09-1", "590.48.01-1"],
    ("cuda", "datacenter-gpu-manager"): ["1:3.3.9"],
    ("cuda", "nvidia-driver-pinning-580"): ["580-1"],
    ("cuda", "nvidia-driver-pinning-580.159.04"): ["580.159.04-1"],
    ("cuda", "nvidia-driver-pinning-580.126.09"): ["580.126.09-1"],
    ("cuda", "nvidia-driver-pinning-590"): ["590-1"],
    ("cuda", "nvidia-driver-pinning-590.48.01"): ["590.48.01-1"],
    ("libnvidia-container", "nvidia-container-toolkit"): ["1.17.8-1", "1.17.7-1"],
    ("libnvidia-container", "nvidia-container-toolkit-base"): ["1.17.8-1", "1.17.7-1"],
    ("libnvidia-container", "libnvidia-container-tools"): ["1.17.8-1", "1.17.7-1"],
    ("libnvidia-container", "libnvidia-container1"): ["1.17.8-1", "1.17.7-1"],
    ("docker", "docker-ce"): ["5:28.5.2-1~debian.12~bookworm", "5:28.5.1-1~debian.12~bookworm"],
    ("docker", "docker-ce-cli"): ["5:28.5.2-1~debian.12~bookworm", "5:28.5.1-1~debian.12~bookworm"],
    ("docker", "containerd.io"): ["1.7.28-1~debian.12~bookworm"],
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> list[debs.BuiltDeb]:
    return debs.build_all(tmp_path_factory.mktemp("debs"))


def field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def contents(deb: Path) -> set[str]:
    out = subprocess.run(["dpkg-deb", "--contents", str(deb)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].lstrip(".") for line in out.splitlines() if not line.startswith("d")}


def find(built: list[debs.BuiltDeb], name: str, version: str | None = None) -> Path:
    return next(d.path for d in built if d.name == name and (version is None or d.version == version))


def test_every_package_and_version_is_built(built: list[debs.BuiltDeb]) -> None:
    got: dict[tuple[str, str], list[str]] = {}
    for deb in built:
        got.setdefault((deb.repo, deb.name), []).append(deb.version)
        fields = subprocess.run(["dpkg-deb", "--field", str(deb.path), "Package", "Version", "Description"],
                                capture_output=True, text=True, check=True).stdout
        assert f"Package: {deb.name}\nVersion: {deb.version}\nDescription: Stand-in for the test rig:" in fields
    assert {k: sorted(v) for k, v in got.items() if k[0] != "kubernetes"} == {k: sorted(v) for k, v in EXPECTED.items()}


def test_relations_and_paths(built: list[debs.BuiltDeb]) -> None:
    driver = find(built, "nvidia-driver", "580.159.04-1")
    assert "nvidia-kernel-open-dkms (= 580.159.04-1) | nvidia-kernel-dkms (= 580.159.04-1)" in field(driver, "Depends")
    assert {"/usr/bin/nvidia-smi", "/usr/bin/nvidia-persistenced", "/lib/systemd/system/nvidia-persistenced.service",
            "/usr/lib/gpu-sim/gpusim.py", "/usr/lib/gpu-sim/catalog.py", "/usr/share/gpu-sim/gpus/H200.json"} <= contents(driver)
    open_km = find(built, "nvidia-kernel-open-dkms", "580.126.09-1")
    assert field(open_km, "Conflicts") == "nvidia-kernel-dkms"
    assert {"/usr/src/nvidia-580.126.09/gpu-sim-flavour", "/lib/systemd/system/nvidia-sim-load.service",
            "/usr/lib/gpu-sim/version"} <= contents(open_km)
    assert field(find(built, "nvidia-kernel-dkms"), "Conflicts") == "nvidia-kernel-open-dkms"
    assert field(find(built, "nvidia-open", "580.159.04-1"), "Depends") == (
        "nvidia-driver (= 580.159.04-1), nvidia-kernel-open-dkms (= 580.159.04-1)")
    assert field(find(built, "cuda-drivers", "580.126.09-1"), "Depends") == (
        "nvidia-driver (= 580.126.09-1), nvidia-kernel-dkms (= 580.126.09-1)")


def test_docker_s_packages_have_docker_s_shape(built: list[debs.BuiltDeb], tmp_path: Path) -> None:
    """As docker/docker-ce-packaging and docker/containerd-packaging ship them: the engine and the CLI conflict with
    Debian's docker.io; containerd.io provides, conflicts with and replaces containerd and runc, and ships a
    config.toml that disables the CRI plugin; the programs lie in /usr/bin."""
    engine = find(built, "docker-ce", "5:28.5.1-1~debian.12~bookworm")
    assert engine.name == "docker-ce_28.5.1-1~debian.12~bookworm_amd64.deb"  # no epoch in a pool file name
    assert field(engine, "Depends").startswith("containerd.io (>= 1.7.27), docker-ce-cli, iptables, libc6")
    assert field(engine, "Conflicts") == field(find(built, "docker-ce-cli"), "Conflicts") == (
        "docker (<< 1.5~), docker-engine, docker.io")
    assert {"/usr/bin/dockerd", "/usr/bin/docker-proxy", "/usr/bin/docker-init", "/lib/systemd/system/docker.service",
            "/lib/systemd/system/docker.socket"} <= contents(engine)
    assert "/usr/bin/docker" in contents(find(built, "docker-ce-cli"))
    runtime = find(built, "containerd.io")
    for relation in ("Provides", "Conflicts", "Replaces"):
        assert field(runtime, relation) == "containerd, runc"
    assert {"/usr/bin/containerd", "/usr/bin/containerd-shim-runc-v2", "/usr/bin/ctr", "/usr/bin/runc",
            "/lib/systemd/system/containerd.service", "/etc/containerd/config.toml"} <= contents(runtime)
    subprocess.run(["dpkg-deb", "-R", str(runtime), str(tmp_path / "c")], check=True)
    config = tomlkit.parse((tmp_path / "c/etc/containerd/config.toml").read_text())
    assert config["disabled_plugins"] == ["cri"] and "version" not in config
    assert (tmp_path / "c/DEBIAN/conffiles").read_text().split() == ["/etc/containerd/config.toml"]
    assert os.access(tmp_path / "c/usr/bin/containerd", os.X_OK)


def test_kubernetes_packages_depend_as_pkgs_k8s_io_s_do(built: list[debs.BuiltDeb]) -> None:
    """kubernetes/release's templates for 1.30 and later: kubeadm needs only cri-tools; kubelet needs the CNI plugins
    and the host tools kubeadm's preflight and kube-proxy use (python3 is the stand-ins' own)."""
    assert field(find(built, "kubeadm"), "Depends") == "python3 (>= 3.9), cri-tools (>= 1.30.0)"
    assert field(find(built, "kubelet"), "Depends") == (
        "python3 (>= 3.9), iptables (>= 1.4.21), kubernetes-cni (>= 1.2.0), iproute2, mount, socat, util-linux, "
        "ethtool, ebtables, conntrack")
    assert "/lib/systemd/system/kubelet.service.d/10-kubeadm.conf" in contents(find(built, "kubeadm"))


def test_files_from_the_debian_archive_must_exist_in_the_package(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    standins = tmp_path / "standins"
    shutil.copytree(debs.STANDINS_DIR / "docker", standins / "docker")
    build = standins / "docker/containerd.io/build.json"
    build.write_text(json.dumps({"debian": {"runc": {"../../../../etc/passwd": "usr/bin/x"}}}))
    with pytest.raises(debs.DebBuildError, match=r"containerd.io: runc has no file \.\./"):
        debs.build_all(tmp_path / "out", standins)


def test_pinning_packages_ship_nvidias_pin_file_as_a_conffile(built: list[debs.BuiltDeb], tmp_path: Path) -> None:
    # NVIDIA's pinning packages ship /etc/apt/preferences.d/nvidia-driver-pin, pinned at priority 1000 to their
    # branch or version; summaries as apt lists NVIDIA's ('APT driver pinning file for driver version ...').
    for name, summary, pin in (("nvidia-driver-pinning-580", "driver branch 580", "580.*"),
                               ("nvidia-driver-pinning-580.159.04", "driver version 580.159.04", "580.159.04-*")):
        deb = find(built, name)
        assert field(deb, "Description").splitlines()[0].endswith(f"APT driver pinning file for {summary}")
        assert field(deb, "Architecture") == "all"
        assert contents(deb) == {"/etc/apt/preferences.d/nvidia-driver-pin"}
        subprocess.run(["dpkg-deb", "-e", str(deb), str(tmp_path / name)], check=True)
        assert (tmp_path / name / "conffiles").read_text().split() == ["/etc/apt/preferences.d/nvidia-driver-pin"]
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp_path / name / "root")], check=True)
        text = (tmp_path / name / "root/etc/apt/preferences.d/nvidia-driver-pin").read_text()
        assert f"Package: cuda-drivers* src:nvidia-open:any\nPin: version {pin}\nPin-Priority: 1000\n" in text


def test_the_driver_ships_every_simulator_module(built: list[debs.BuiltDeb]) -> None:
    """``/usr/bin/nvidia-smi`` runs ``/usr/lib/gpu-sim/gpusim.py``, which imports the modules beside it."""
    for version in ("580.159.04-1", "580.126.09-1"):
        shipped = contents(find(built, "nvidia-driver", version))
        assert {f"/usr/lib/gpu-sim/{path.name}" for path in SIM_MODULES} <= shipped
    base = find(built, "nvidia-container-toolkit-base")
    assert {"/usr/bin/nvidia-ctk", "/usr/bin/nvidia-container-runtime",
            "/etc/nvidia-container-runtime/config.toml"} <= contents(base)
    assert "/usr/bin/nv-hostengine" in contents(find(built, "datacenter-gpu-manager"))
    assert "/usr/bin/nv-fabricmanager" in contents(find(built, "nvidia-fabricmanager"))


def test_second_build_reuses_every_deb(tmp_path: Path) -> None:
    first = debs.build_all(tmp_path)
    stamps = {d.path: d.path.stat().st_mtime_ns for d in first}
    second = debs.build_all(tmp_path)
    assert {d.path: d.path.stat().st_mtime_ns for d in second} == stamps


def test_changed_source_rebuilds_only_that_package(tmp_path: Path) -> None:
    standins = tmp_path / "standins"
    shutil.copytree(debs.STANDINS_DIR, standins)
    out = tmp_path / "out"
    first = {d.path: d.path.stat().st_mtime_ns for d in debs.build_all(out, standins)}
    hook = standins / "libnvidia-container/nvidia-container-toolkit/root/usr/bin/nvidia-container-runtime-hook"
    hook.write_text(hook.read_text() + "# changed\n")
    cache = standins / "kubernetes/kubeadm/root/usr/bin/__pycache__"  # left by an import: not packaged
    cache.mkdir()
    (cache / "kubeadm.cpython-311.pyc").write_bytes(b"bytecode")
    second = {d.path: d.path.stat().st_mtime_ns for d in debs.build_all(out, standins)}
    changed = [p.name for p in second if second[p] != first[p]]
    assert sorted(changed) == ["nvidia-container-toolkit_1.17.7-1_amd64.deb", "nvidia-container-toolkit_1.17.8-1_amd64.deb"]


# ------------------------------------------------------------------------------------------------------------
# Programs run from an extracted tree


@pytest.fixture
def tree(built: list[debs.BuiltDeb], tmp_path: Path) -> dict[str, object]:
    """Driver 580.159.04 with open modules plus the container toolkit, extracted under tmp_path/root."""
    root = tmp_path / "root"
    for name in ("nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-container-toolkit-base",
                 "nvidia-container-toolkit", "libnvidia-container-tools", "datacenter-gpu-manager"):
        deb = next(d.path for d in built if d.name == name and d.version in ("580.159.04-1", "1.17.8-1", "1:3.3.9"))
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "gpus.json").write_text(json.dumps({"gpus": H200X2_HOST}))
    (tmp_path / "modprobe.d").mkdir()
    (tmp_path / "dev").mkdir()
    env = dict(os.environ)
    env.update(
        PATH=f"{root}/usr/bin:{env['PATH']}",
        GPU_SIM_CONFIG=str(tmp_path / "etc" / "gpus.json"),
        GPU_SIM_STATE_DIR=str(tmp_path / "state"),
        GPU_SIM_DATA_DIR=str(root / "usr/share/gpu-sim"),
        GPU_SIM_LIB_DIR=str(root / "usr/lib/gpu-sim"),
        GPU_SIM_RUN_DIR=str(tmp_path / "run"),
        GPU_SIM_DEV_DIR=str(tmp_path / "dev"),
        GPU_SIM_MODPROBE_DIR=str(tmp_path / "modprobe.d"),
        GPU_SIM_MODULE_VERSION_FILE=str(root / "usr/lib/gpu-sim/version"),
        GPU_SIM_BOOT_ID_FILE=str(tmp_path / "boot_id"),
        GPU_SIM_PERSISTENCED_PID=str(tmp_path / "persistenced.pid"),
    )
    (tmp_path / "boot_id").write_text("1")
    return {"root": root, "env": env, "tmp": tmp_path}


def run(tree: dict[str, object], *argv: str, check: bool = True, **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), env=tree["env"], capture_output=True, text=True, timeout=60, **kw)  # type: ignore[call-overload]
    if check:
        assert proc.returncode == 0, (argv, proc.stdout, proc.stderr)
    return proc


def load(tree: dict[str, object]) -> subprocess.CompletedProcess[str]:
    return run(tree, str(tree["root"]) + "/usr/lib/gpu-sim/nvidia-sim-load")


def test_nvidia_smi_needs_the_module_loaded(tree: dict[str, object]) -> None:
    proc = run(tree, "nvidia-smi", check=False)
    assert proc.returncode == 9
    load(tree)
    assert run(tree, "nvidia-smi", "-L").stdout.startswith("GPU 0: NVIDIA H200 (UUID: GPU-d3d4d48e")
    version = (Path(tree["env"]["GPU_SIM_RUN_DIR"]) / "version").read_text()  # type: ignore[index]
    assert version.startswith("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build")


@pytest.mark.skipif(os.geteuid() != 0, reason="creating device nodes needs root")
def test_device_nodes_follow_modprobe_options(tree: dict[str, object]) -> None:
    tmp = tree["tmp"]
    (tmp / "modprobe.d" / "nvidia.conf").write_text(  # type: ignore[operator]
        "# restrict GPUs to group 44\noptions nvidia NVreg_DeviceFileUID=0 NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660\n")
    load(tree)
    dev = tmp / "dev"  # type: ignore[operator]
    for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
        st = os.stat(dev / name)
        assert stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195 and os.minor(st.st_rdev) == minor
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o660, 0, 44)
    assert not (dev / "nvidia2").exists()
    assert stat.S_IMODE(os.stat(dev / "nvidia-caps" / "nvidia-cap1").st_mode) == 0o400
    assert stat.S_IMODE(os.stat(dev / "nvidia-caps" / "nvidia-cap2").st_mode) == 0o444
    assert stat.S_ISCHR(os.stat(dev / "nvidia-uvm").st_mode)
    (tmp / "modprobe.d" / "nvidia.conf").unlink()  # type: ignore[operator]
    load(tree)
    st = os.stat(dev / "nvidia0")
    assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o666, 0), "defaults again after the options are gone"
    links = run(tree, "nvidia-ctk", "system", "create-dev-char-symlinks", "--create-all",
                f"--dev-char-path={dev}/char")
    assert os.readlink(dev / "char" / "195:1") == "../nvidia1"
    assert "Creating link" in links.stderr


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")
def test_device_files_fall_back_where_mknod_is_refused(tree: dict[str, object]) -> None:
    """In a user namespace mknod is refused: regular files with the same mode, and a message why."""
    proc = run(tree, "unshare", "--user", "--map-root-user", str(tree["root"]) + "/usr/lib/gpu-sim/nvidia-sim-load",
               check=False)
    if proc.returncode != 0 and "unshare" in proc.stderr:
        pytest.skip(f"user namespaces unavailable: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert "not permitted here" in proc.stdout and "regular file instead" in proc.stdout
    st = os.stat(tree["tmp"] / "dev" / "nvidia0")  # type: ignore[operator]
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o666


def test_docker_configure_merges_daemon_json(tree: dict[str, object]) -> None:
    path = tree["tmp"] / "daemon.json"  # type: ignore[operator]
    path.write_text(json.dumps({"log-driver": "journald", "runtimes": {"crun": {"path": "/usr/bin/crun"}}}))
    proc = run(tree, "nvidia-ctk", "runtime", "configure", "--runtime=docker", f"--config={path}", "--set-as-default")
    assert f"Wrote updated config to {path}" in proc.stderr
    assert json.loads(path.read_text()) == {
        "default-runtime": "nvidia",
        "log-driver": "journald",
        "runtimes": {"crun": {"path": "/usr/bin/crun"},
                     "nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }
    before = path.read_text()
    run(tree, "nvidia-ctk", "runtime", "configure", "--runtime=docker", f"--config={path}", "--set-as-default")
    assert path.read_text() == before, "a second run changes nothing"


def test_containerd_configure_writes_dropin_and_import(tree: dict[str, object]) -> None:
    etc = tree["tmp"] / "containerd"  # type: ignore[operator]
    (etc / "conf.d").mkdir(parents=True)
    config = etc / "config.toml"
    original = (
        "disabled_plugins = []\nimports = []\nversion = 2\n\n"
        '[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "  # kubelet uses the systemd cgroup driver\n  SystemdCgroup = true\n\n"
        '[debug]\n  level = "info"\n'
    )
    config.write_text(original)
    (etc / "conf.d" / "10-mirror.toml").write_text(
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n')
    run(tree, "nvidia-ctk", "runtime", "configure", "--runtime=containerd", f"--config={config}")
    text = config.read_text()
    assert text == original.replace("imports = []", f'imports = ["{etc}/conf.d/*.toml"]')
    dropin = (etc / "conf.d" / "99-nvidia.toml").read_text()
    cri = '[plugins."io.containerd.grpc.v1.cri"'
    # containerd 1.x replaces a plugin section wholesale with an imported one: the CRI settings must all be there.
    for expected in (f'{cri}]\n  sandbox_image = "registry.k8s.io/pause:3.10"',
                     f'{cri}.registry]\n  config_path = "/etc/containerd/certs.d"',
                     f"{cri}.containerd.runtimes.runc.options]\n  SystemdCgroup = true",
                     f'{cri}.containerd.runtimes.nvidia]\n  privileged_without_host_devices = false',
                     f'{cri}.containerd.runtimes.nvidia.options]\n  SystemdCgroup = true\n'
                     '  BinaryName = "/usr/bin/nvidia-container-runtime"'):
        assert expected in dropin, expected
    assert "default_runtime_name" not in dropin and "[debug]" not in dropin
    assert tomlkit.loads(dropin).unwrap()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]["nvidia"][
        "runtime_type"] == "io.containerd.runc.v2"
    run(tree, "nvidia-ctk", "runtime", "configure", "--runtime=containerd", f"--config={config}", "--set-as-default")
    assert config.read_text() == text, "the import is added once"
    second = (etc / "conf.d" / "99-nvidia.toml").read_text()
    assert tomlkit.loads(second).unwrap()["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["default_runtime_name"] == "nvidia"
    run(tree, "nvidia-ctk", "runtime", "configure", "--runtime=containerd", f"--config={config}", "--set-as-default")
    assert (etc / "conf.d" / "99-nvidia.toml").read_text() == second, "a second run changes nothing"


def test_containerd_configure_without_a_config(tree: dict[str, object]) -> None:
    config = tree["tmp"] / "fresh" / "config.toml"  # type: ignore[operator]
    config.parent.mkdir()
    run(tree, "nvidia-ctk", "runtime", "configure", "--runtime=containerd", f"--config={config}")
    assert config.read_text() == f'version = 2\nimports = ["{config.parent}/conf.d/*.toml"]\n'
    assert "runtimes.nvidia.options]" in (config.parent / "conf.d" / "99-nvidia.toml").read_text()


def test_cdi_generate_and_list(tree: dict[str, object]) -> None:
    load(tree)
    cdi = tree["tmp"] / "cdi"  # type: ignore[operator]
    run(tree, "nvidia-ctk", "cdi", "generate", f"--output={cdi}/nvidia.yaml")
    spec = (cdi / "nvidia.yaml").read_text()
    assert spec.startswith("---\ncdiVersion: 0.5.0\n")
    assert "kind: nvidia.com/gpu" in spec and "  - path: /dev/nvidiactl" in spec
    listed = run(tree, "nvidia-ctk", "cdi", "list", f"--spec-dir={cdi}")
    assert listed.stdout.splitlines() == [
        "nvidia.com/gpu=0", "nvidia.com/gpu=GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc",
        "nvidia.com/gpu=1", "nvidia.com/gpu=GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54", "nvidia.com/gpu=all",
    ]
    assert "Found 5 CDI devices" in listed.stderr
    import yaml

    parsed = yaml.safe_load(spec)
    assert [d["name"] for d in parsed["devices"]][-1] == "all"
    assert parsed["devices"][-1]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]


def test_runtime_adds_visible_devices_then_runs_runc(tree: dict[str, object]) -> None:
    load(tree)
    tmp = tree["tmp"]
    fake = tmp / "fakebin"  # type: ignore[operator]
    fake.mkdir()
    (fake / "runc").write_text('#!/bin/sh\necho "runc $*" > "$RUNC_LOG"\n')
    (fake / "runc").chmod(0o755)
    bundle = tmp / "bundle"  # type: ignore[operator]
    bundle.mkdir()
    spec = {"process": {"env": ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54"]},
            "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}}}
    (bundle / "config.json").write_text(json.dumps(spec))
    env = dict(tree["env"])  # type: ignore[call-overload]
    env["PATH"] = f"{fake}:{env['PATH']}"
    env["RUNC_LOG"] = str(tmp / "runc.log")  # type: ignore[operator]
    argv = ["--root", "/run/x", "create", "--bundle", str(bundle), "--pid-file", "/run/x.pid", "ctr1"]
    subprocess.run(["nvidia-container-runtime", *argv], env=env, check=True, timeout=60)
    assert (tmp / "runc.log").read_text() == "runc " + " ".join(argv) + "\n"  # type: ignore[operator]
    edited = json.loads((bundle / "config.json").read_text())
    dev = tree["env"]["GPU_SIM_DEV_DIR"]  # type: ignore[index]
    paths = [d.get("path") for d in edited["linux"].get("devices", [])] + [
        m["destination"] for m in edited.get("mounts", [])]
    assert f"{dev}/nvidia1" in paths and f"{dev}/nvidiactl" in paths
    assert f"{dev}/nvidia0" not in paths
    rules = edited["linux"]["resources"]["devices"]
    if edited["linux"].get("devices"):
        assert {"allow": True, "type": "c", "major": 195, "minor": 1, "access": "rwm"} in rules
    assert rules[0] == {"allow": False, "access": "rwm"}, "existing rules are kept first"


def test_runtime_leaves_plain_containers_alone(tree: dict[str, object]) -> None:
    tmp = tree["tmp"]
    fake = tmp / "fakebin2"  # type: ignore[operator]
    fake.mkdir()
    (fake / "runc").write_text("#!/bin/sh\nexit 0\n")
    (fake / "runc").chmod(0o755)
    bundle = tmp / "bundle2"  # type: ignore[operator]
    bundle.mkdir()
    original = json.dumps({"process": {"env": ["PATH=/bin"]}})
    (bundle / "config.json").write_text(original)
    env = dict(tree["env"])  # type: ignore[call-overload]
    env["PATH"] = f"{fake}:{env['PATH']}"
    subprocess.run(["nvidia-container-runtime", "create", "--bundle", str(bundle), "c"], env=env, check=True)
    assert (bundle / "config.json").read_text() == original


def test_dcgmi_lists_gpus_only_with_hostengine(tree: dict[str, object]) -> None:
    load(tree)
    proc = run(tree, "dcgmi", "discovery", "-l", check=False)
    assert proc.returncode == 255 and "Unable to connect to host engine" in proc.stdout


def test_node_side_programs_are_python_3_9(built: list[debs.BuiltDeb], tmp_path: Path) -> None:
    """Everything that runs on a node parses with the grammar of the oldest supported node Python."""
    import ast

    checked = 0
    for deb in built:
        root = tmp_path / deb.path.stem
        subprocess.run(["dpkg-deb", "-x", str(deb.path), str(root)], check=True)
        for path in (p for p in root.rglob("*") if p.is_file()):
            head = path.read_bytes()[:64]
            if path.suffix == ".py" or (head.startswith(b"#!") and b"python3" in head.split(b"\n")[0]):
                ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
                checked += 1
    assert checked >= 10
