"""Every install path rendered through the stages' own functions, against the vendors' facts.

The table below is written from the vendors' documents (each row names its source), not from
gpu_provision/data/packages.json: a wrong belief in the data file or the code shows up here as a missing fact.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_provision.spec import load_cluster
from gpu_provision.stages import paths

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(str(ROOT / "inventory" / "cluster.yaml"))
NODE = CLUSTER.node("h200-01")

# (system name as in paths.SYSTEMS, choice index in paths.CHOICES, facts that must appear, facts that must not)
CUDA = "https://developer.download.nvidia.com/compute/cuda/repos/"
EXPECTED: list[tuple[str, int, tuple[str, ...], tuple[str, ...]]] = [
    # NVIDIA's cuda-rhel9.repo: gpgkey .../rhel9/x86_64/D42D0685.pub, gpgcheck=1.
    # NVIDIA Driver Installation Guide, Kernel Modules: RHEL 8/9 "dnf module enable nvidia-driver:580-open".
    # NVIDIA Driver Installation Guide, Red Hat Enterprise Linux, Preparation: CRB and EPEL (DKMS).
    ("RHEL 9, x86_64", 0,
     (f"baseurl={CUDA}rhel9/x86_64/", f"gpgkey={CUDA}rhel9/x86_64/D42D0685.pub", "gpgcheck=1",
      "codeready-builder-for-rhel-9-$(uname -m)-rpms", "epel-release-latest-9.noarch.rpm",
      "dnf module enable -y nvidia-driver:580-open", "nvidia-open"),
     ("3bf863cc",)),
    # Kernel Modules, proprietary table: "dnf module enable nvidia-driver:580-dkms", "dnf install cuda-drivers".
    ("AlmaLinux 9, x86_64", 1,
     ("dnf config-manager --set-enabled crb", "dnf install -y epel-release",
      "dnf module enable -y nvidia-driver:580-dkms", "cuda-drivers-580.95.05"), ("3bf863cc", "subscription-manager")),
    # sbsa is the arm64 server directory of NVIDIA's repositories.
    ("Rocky Linux 9, arm64 (sbsa)", 0, (f"{CUDA}rhel9/sbsa/D42D0685.pub",), ("aarch64/D42D0685",)),
    # Kernel Modules, RHEL 10: no module streams; "dnf versionlock \*nvidia\*580\*". NVIDIA/gpu-driver-container
    # rhel10/Dockerfile: the rhel10 repositories (x86_64, sbsa) are signed with CDF6BA43, not rhel8/9's D42D0685.
    ("Rocky Linux 10, x86_64", 0, (f"gpgkey={CUDA}rhel10/x86_64/CDF6BA43.pub", "dnf versionlock add '*nvidia*580*'",
                                   "epel-release"), ("dnf module enable", "D42D0685")),
    # Debian: NVIDIA's cuda-keyring holds 3bf863cc; nvidia-open from the CUDA repository, apt preferences pin.
    ("Debian 12, x86_64", 0, (f"URIs: {CUDA}debian12/x86_64/", "Pin: version 580.*", "nvidia-open=580.*"),
     ("D42D0685",)),
    # Debian 13's CUDA repository is signed with 8793F200 (fingerprint ...8597A5D4CB8793F200; public scripts fetch
    # .../debian13/x86_64/8793F200.pub where their Debian 12 lines keep 3bf863cc); under sbsa/ the same key is
    # UNCONFIRMED (packages.json 'cuda-repo-release-keys').
    ("Debian 13, arm64", 0, (f"URIs: {CUDA}debian13/sbsa/", f"key from {CUDA}debian13/sbsa/8793F200.pub"),
     ("3bf863cc",)),
    ("Debian 12, x86_64", 1, (f"key from {CUDA}debian12/x86_64/3bf863cc.pub",), ("8793F200",)),
    # Docker, Install a specific version: "5:<version>-1~ubuntu.24.04~noble".
    ("Ubuntu 24.04 GA kernel, generic, x86_64", 2,
     ("'docker-ce=5:27.3.1-1~ubuntu.24.04~noble'", "'docker-ce-cli=5:27.3.1-1~ubuntu.24.04~noble'"),
     ("docker-ce=27.3.1",)),
    # Ubuntu Server docs, NVIDIA drivers installation: the signed modules of the running kernel
    # (linux-modules-nvidia-<branch>-server-open-$(uname -r)) and the flavour's metapackage, which is versioned by
    # kernel ABI (packages.ubuntu.com: linux-modules-nvidia-580-server-open-generic 6.8.0-45.45...), so it takes no
    # driver version; the user space packages take the driver's.
    ("Ubuntu 24.04 GA kernel, generic, x86_64", 2,
     (" linux-modules-nvidia-580-server-open-6.8.0-45-generic ", " linux-modules-nvidia-580-server-open-generic ",
      "'nvidia-headless-no-dkms-580-server-open=580.95.05-*'", "'nvidia-utils-580-server=580.95.05-*'"),
     ("linux-modules-nvidia-580-server-open-generic=",)),
    # HWE kernel on 22.04 (GA is 5.15): the HWE metapackage track.
    ("Ubuntu 22.04 HWE kernel, generic, x86_64", 2, ("linux-modules-nvidia-580-server-open-generic-hwe-22.04",), ()),
    ("Ubuntu 22.04 GA kernel, generic, x86_64", 2, (" linux-modules-nvidia-580-server-open-generic ",), ("hwe",)),
    # Kernel flavours as packages.ubuntu.com names them: lowlatency, nvidia, generic-64k, nvidia-64k.
    ("Ubuntu 24.04 lowlatency, x86_64", 2, (" linux-modules-nvidia-580-server-open-lowlatency ",), ()),
    ("Ubuntu 24.04 -nvidia kernel, x86_64", 2,
     (" linux-modules-nvidia-580-server-open-nvidia ", "linux-modules-nvidia-580-server-open-6.8.0-1015-nvidia "),
     ()),
    ("Ubuntu 24.04 generic-64k, arm64", 2, (" linux-modules-nvidia-580-server-open-generic-64k ",), ("-open-64k",)),
    ("Ubuntu 24.04 nvidia-64k, arm64", 2, (" linux-modules-nvidia-580-server-open-nvidia-64k ",), ("-open-64k ",)),
    # Ubuntu Server docs: DKMS path without Secure Boot.
    ("Ubuntu 24.04 GA kernel, generic, x86_64", 0, ("nvidia-driver-580-server-open",), ("cuda.sources",)),
    # Installing kubeadm: deb Release.key; rpm repodata/repomd.xml.key; SELinux permissive on Red Hat-based.
    ("Debian 12, x86_64", 0, ("https://pkgs.k8s.io/core:/stable:/v1.36/deb/Release.key", "'kubeadm=1.36.4-*'",
                              "apt-mark hold"), ("setenforce",)),
    ("RHEL 9, x86_64", 0, ("gpgkey=https://pkgs.k8s.io/core:/stable:/v1.36/rpm/repodata/repomd.xml.key",
                           "setenforce 0", "SELINUX=permissive", "kubeadm-1.36.4"), ("rpm/Release.key",)),
    # Container Toolkit install guide: the four packages at the same version, NVIDIA's libnvidia-container repo.
    ("Ubuntu 24.04 GA kernel, generic, x86_64", 0,
     ("https://nvidia.github.io/libnvidia-container/stable/deb/amd64/", "nvidia-container-toolkit=1.17.8-1",
      "nvidia-container-toolkit-base=1.17.8-1", "libnvidia-container-tools=1.17.8-1",
      "libnvidia-container1=1.17.8-1"), ()),
    ("Rocky Linux 9, arm64 (sbsa)", 0,
     ("https://nvidia.github.io/libnvidia-container/stable/rpm/aarch64/", "https://download.docker.com/linux/rhel/"
      "$releasever/$basearch/stable"), ()),
]

# Every other path the cluster file can select (each system with each choice of paths.CHOICES it is rendered with):
# Ubuntu Server docs, NVIDIA drivers installation: without Secure Boot the server branch's DKMS packages,
# 'nvidia-driver-<branch>-server-open' (open) or 'nvidia-driver-<branch>-server' (proprietary), from Ubuntu's
# archive whatever the kernel flavour (no NVIDIA repository, no linux-modules-nvidia package); an exact driver
# version matches Ubuntu's '<version>-0ubuntu...' revisions. NVIDIA's toolkit list names the dpkg architecture
# ('deb/$(ARCH)': amd64, arm64). Docker's install pages: containerd.io from download.docker.com.
_UBUNTU_DKMS_OPEN = (("nvidia-driver-580-server-open",), ("cuda.sources", "linux-modules-nvidia"))
_UBUNTU_DKMS_PROPRIETARY = (("'nvidia-driver-580-server=580.95.05-*'", "containerd.io"),
                            ("-server-open", "linux-modules-nvidia", "cuda.sources"))
EXPECTED += [
    (system, 0, *_UBUNTU_DKMS_OPEN) for system in (
        "Ubuntu 22.04 GA kernel, generic, x86_64", "Ubuntu 22.04 HWE kernel, generic, x86_64",
        "Ubuntu 24.04 lowlatency, x86_64", "Ubuntu 24.04 -nvidia kernel, x86_64")
] + [
    (system, 1, *_UBUNTU_DKMS_PROPRIETARY) for system in (
        "Ubuntu 22.04 GA kernel, generic, x86_64", "Ubuntu 22.04 HWE kernel, generic, x86_64",
        "Ubuntu 24.04 GA kernel, generic, x86_64", "Ubuntu 24.04 lowlatency, x86_64",
        "Ubuntu 24.04 -nvidia kernel, x86_64", "Ubuntu 24.04 generic-64k, arm64", "Ubuntu 24.04 nvidia-64k, arm64")
] + [
    ("Ubuntu 24.04 generic-64k, arm64", 0,
     ("nvidia-driver-580-server-open", "https://nvidia.github.io/libnvidia-container/stable/deb/arm64/"),
     ("cuda.sources", "linux-modules-nvidia", "deb/aarch64")),
    ("Ubuntu 24.04 nvidia-64k, arm64", 0, *_UBUNTU_DKMS_OPEN),
    # NVIDIA Driver Installation Guide, Debian, Kernel Modules (proprietary): 'apt install cuda-drivers', the
    # DKMS module package nvidia-kernel-dkms; version-locking.html: apt preferences pin the exact version.
    ("Debian 12, x86_64", 1, ("'cuda-drivers=580.95.05-*'", "'nvidia-kernel-dkms=580.95.05-*'",
                              "Pin: version 580.95.05*"), ("nvidia-open", "nvidia-kernel-open-dkms")),
    ("Debian 13, arm64", 1, ("'cuda-drivers=580.95.05-*'", "'nvidia-kernel-dkms=580.95.05-*'",
                             "Pin: version 580.95.05*", f"URIs: {CUDA}debian13/sbsa/"), ("nvidia-open",)),
    # Kernel Modules, RHEL 8/9 proprietary: 'dnf module enable nvidia-driver:<branch>-dkms', 'dnf install
    # cuda-drivers' (kmod-nvidia-latest-dkms builds the module); RHEL itself takes CRB from subscription-manager.
    ("RHEL 9, x86_64", 1, ("codeready-builder-for-rhel-9-$(uname -m)-rpms",
                           "dnf module enable -y nvidia-driver:580-dkms", "cuda-drivers-580.95.05",
                           "kmod-nvidia-latest-dkms-580.95.05"), ("nvidia-open", "-open-dkms")),
    ("Rocky Linux 9, arm64 (sbsa)", 1, (f"baseurl={CUDA}rhel9/sbsa/", "dnf config-manager --set-enabled crb",
                                        "dnf module enable -y nvidia-driver:580-dkms", "cuda-drivers-580.95.05"),
     ("subscription-manager",)),
    # Rocky's and Alma's CRB through dnf config-manager, EPEL from their own epel-release (Rocky's documentation,
    # 'Installing NVIDIA GPU Drivers'); the open stream as for RHEL.
    ("AlmaLinux 9, x86_64", 0, ("dnf config-manager --set-enabled crb", "dnf install -y epel-release",
                                "dnf module enable -y nvidia-driver:580-open", "kmod-nvidia-open-dkms"),
     ("subscription-manager", "nvidia-driver:580-dkms")),
    # Kernel Modules, RHEL 10 proprietary: no module streams, 'dnf install cuda-drivers'; an exact version is
    # locked package by package (the branch glob is for a branch).
    # NVIDIA Driver Installation Guide, Recent Updates, 'Version locking packages for Ubuntu / Debian': a pinning
    # package per branch and per version ('nvidia-driver-pinning-580', 'nvidia-driver-pinning-580.105.08' as apt
    # lists them from the CUDA repository), installed before the driver. None on Ubuntu's archive path or on dnf.
    ("Debian 12, x86_64", 0, ("install nvidia-driver-pinning-580\n",), ("pinning-580.",)),
    ("Debian 13, arm64", 1, ("install nvidia-driver-pinning-580.95.05\n",), ()),
    ("Ubuntu 24.04 GA kernel, generic, x86_64", 0, (), ("nvidia-driver-pinning",)),
    ("RHEL 9, x86_64", 0, (), ("nvidia-driver-pinning",)),
    ("Rocky Linux 10, x86_64", 1, (f"gpgkey={CUDA}rhel10/x86_64/CDF6BA43.pub", "cuda-drivers-580.95.05",
                                   "kmod-nvidia-latest-dkms-580.95.05",
                                   "dnf versionlock add cuda-drivers nvidia-driver kmod-nvidia-latest-dkms"),
     ("dnf module", "'*nvidia*580*'")),
]


# Each dnf repository file's signature options, as the vendor's own .repo file sets them (system, repository file
# stem, the options in the file's order).
DNF_SIGNATURE_OPTIONS: list[tuple[str, str, tuple[str, ...]]] = [
    # NVIDIA's cuda-rhel9.repo (developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/cuda-rhel9.repo):
    # enabled=1, gpgcheck=1, gpgkey=.../D42D0685.pub; no repo_gpgcheck.
    ("RHEL 9, x86_64", "cuda", ("gpgcheck=1",)),
    # NVIDIA/libnvidia-container stable/rpm/nvidia-container-toolkit.repo, which the Container Toolkit install guide
    # ("With dnf", "Configure the production repository") fetches: repo_gpgcheck=1, gpgcheck=0, enabled=1,
    # gpgkey=https://nvidia.github.io/libnvidia-container/gpgkey.
    ("RHEL 9, x86_64", "nvidia-container-toolkit", ("repo_gpgcheck=1", "gpgcheck=0")),
    ("Rocky Linux 9, arm64 (sbsa)", "nvidia-container-toolkit", ("repo_gpgcheck=1", "gpgcheck=0")),
    ("AlmaLinux 9, x86_64", "nvidia-container-toolkit", ("repo_gpgcheck=1", "gpgcheck=0")),
    # Docker's docker-ce.repo (download.docker.com/linux/rhel/docker-ce.repo): gpgcheck=1.
    ("AlmaLinux 9, x86_64", "docker", ("gpgcheck=1",)),
    # Installing kubeadm, Red Hat-based: kubernetes.repo with gpgcheck=1.
    ("Rocky Linux 10, x86_64", "kubernetes", ("gpgcheck=1",)),
]


# The OS's own driver packages (index in paths.DISTRO_PATHS, facts that must appear, facts that must not).
DEBIAN_KEYRING = "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
DISTRO_EXPECTED: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = [
    # Debian wiki NvidiaGraphicsDrivers: contrib non-free non-free-firmware; bookworm ships 535, DKMS builds the
    # module (nvidia-kernel-dkms). sources.list(5): deb822 with Signed-By; the security suite under debian-security.
    # Debian archive (apt-cache depends): libcuda1 only recommends nvidia-kernel-dkms, so the set names it.
    (0, ("/etc/apt/sources.list.d/gpu-provision-debian-nonfree.sources", "URIs: http://deb.debian.org/debian\n",
         "Suites: bookworm bookworm-updates", "URIs: http://deb.debian.org/debian-security",
         "Suites: bookworm-security", "Components: contrib non-free non-free-firmware", DEBIAN_KEYRING,
         "Pin: version 535.*", "install --no-install-recommends", "'nvidia-kernel-dkms=535.*'", "'libcuda1=535.*'",
         "'nvidia-smi=535.*'", "apt-mark hold nvidia-kernel-dkms", "dkms install \"$m\" -k 6.1.0-28-amd64"),
     ("cuda.sources", "developer.download.nvidia.com", "/etc/apt/sources.list\n", "nvidia-open-kernel-dkms")),
    # Debian archive: bookworm's nvidia-open-kernel-dkms is 535.261.03-1 and depends on firmware-nvidia-gsp at that
    # version, which the pin must take back down from the security update's 535.309.01.
    (1, ("Pin: version 535.261.03-*", "'nvidia-open-kernel-dkms=535.261.03-*'",
         "'firmware-nvidia-gsp=535.261.03-*'"), ("nvidia-kernel-dkms",)),
    # Debian 13 ships 550 (550.163.01-2 in trixie).
    (2, ("Suites: trixie trixie-updates", "Suites: trixie-security", "'nvidia-open-kernel-dkms=550.*'",
         "Pin: version 550.*"), ("bookworm",)),
    # Ubuntu Server docs: Ubuntu's own server driver from its archive, no repository of the project's.
    (3, ("nvidia-driver-580-server-open",), ("gpu-provision-debian-nonfree", "cuda.sources", "dkms install")),
]


# A driver the node's image carries (index in paths.PREINSTALLED_PATHS, facts that must appear, that must not): the
# driver stage installs nothing, prepares nothing (no EPEL, no module stream, no CUDA repository) and checks the
# driver with nvidia-smi; the container toolkit still comes from NVIDIA's repository as its install guide says.
PREINSTALLED_EXPECTED: list[tuple[int, tuple[str, ...], tuple[str, ...]]] = [
    (0, ("#### driver\n\n```sh\n# nothing to run", "nvidia-container-toolkit=1.17.8-1", "docker-ce"),
     ("nvidia-driver-580", "cuda.sources", "linux-modules-nvidia")),
    (1, ("#### driver\n\n```sh\n# nothing to run", "repo_gpgcheck=1", "nvidia-container-toolkit-1.17.8-1",
         "containerd.io"),
     ("epel-release", "dnf module", "cuda.repo", "codeready-builder", "kmod-nvidia")),
]


def _rendered(system_name: str, choice: int) -> str:
    manager, system = next((m, s) for n, m, s in paths.SYSTEMS if n == system_name)
    return paths.render_path(NODE, CLUSTER, manager, system, paths.CHOICES[choice])


@pytest.mark.parametrize(("system_name", "choice", "present", "absent"), EXPECTED,
                         ids=[f"{row[0]}-{row[1]}" for row in EXPECTED])
def test_path_holds_the_vendors_facts(system_name: str, choice: int, present: tuple[str, ...],
                                      absent: tuple[str, ...]) -> None:
    text = _rendered(system_name, choice)
    assert [fact for fact in present if fact not in text] == []
    assert [fact for fact in absent if fact in text] == []


def _repo_file(text: str, stem: str) -> str:
    start = text.index(f"`/etc/yum.repos.d/{stem}.repo`:")
    return text[start:text.index("```", text.index("```", start) + 3)]


@pytest.mark.parametrize(("system_name", "stem", "options"), DNF_SIGNATURE_OPTIONS,
                         ids=[f"{row[0]}-{row[1]}" for row in DNF_SIGNATURE_OPTIONS])
def test_dnf_repository_files_carry_the_vendors_signature_options(system_name: str, stem: str,
                                                                  options: tuple[str, ...]) -> None:
    lines = _repo_file(_rendered(system_name, 0), stem).splitlines()
    assert [line for line in lines if "gpgcheck" in line] == list(options)


@pytest.mark.parametrize(("index", "present", "absent"), DISTRO_EXPECTED, ids=[str(r[0]) for r in DISTRO_EXPECTED])
def test_distro_path_holds_the_vendors_facts(index: int, present: tuple[str, ...], absent: tuple[str, ...]) -> None:
    name, manager, system, choice = paths.distro_paths()[index]
    text = paths.render_path(NODE, CLUSTER, manager, system, choice)
    assert [fact for fact in present if fact not in text] == []
    assert [fact for fact in absent if fact in text] == []


def test_a_branch_older_than_the_repository_carries_is_warned_of() -> None:
    # A public reading of the repositories' Packages.gz (2026-09-23): debian13/sbsa carries branches 595 and later,
    # debian12/x86_64 545 and later (packages.json cuda-repo-branches).
    assert "> Preflight warns: NVIDIA's CUDA repository for debian13/sbsa was seen to carry driver branches from 595 " \
           "on, not 580" in _rendered("Debian 13, arm64", 0)
    assert "Preflight warns" not in _rendered("Debian 12, x86_64", 0)


def test_debian_pinning_package_is_installed_before_the_driver_packages() -> None:
    # The guide: 'install the pinning package prior to installing the driver'.
    text = _rendered("Debian 12, x86_64", 0)
    assert text.index("install nvidia-driver-pinning-580\n") < text.index("install 'nvidia-open=580.*'")


def test_rhel_prerequisites_come_before_the_module_stream_and_the_stream_before_the_install() -> None:
    text = _rendered("RHEL 9, x86_64", 0)
    order = [text.index(s) for s in ("epel-release-latest-9", "dnf module enable", "dnf install -y --allowerasing")]
    assert order == sorted(order)


@pytest.mark.parametrize("system_name", ["Debian 12, x86_64", "Debian 13, arm64"])
def test_the_driver_pins_leave_dkms_to_the_repository_that_has_a_new_enough_one(system_name: str) -> None:
    # NVIDIA's DKMS packages from 570.148.08 on require dkms >= 3.1.8 (dnf's and apt's own refusals quoted in public
    # reports, see 'dkms-requirement-reports' in packages.json; bookworm's dkms is 3.0.10), which the CUDA repository
    # ships: a pin of the driver's branch that caught dkms would hold it at a version no repository has.
    import fnmatch

    text = _rendered(system_name, 0)
    pref = text[text.index("`/etc/apt/preferences.d/cuda.pref`:"):]
    globs = [g for line in pref.splitlines() if line.startswith("Package: ") for g in line.split()[1:]]
    assert globs and [g for g in globs if fnmatch.fnmatch("dkms", g)] == []


@pytest.mark.parametrize(("index", "present", "absent"), PREINSTALLED_EXPECTED,
                         ids=[str(r[0]) for r in PREINSTALLED_EXPECTED])
def test_preinstalled_driver_path_installs_and_prepares_nothing_of_the_driver(index: int, present: tuple[str, ...],
                                                                            absent: tuple[str, ...]) -> None:
    name, manager, system, choice = paths.preinstalled_paths()[index]
    text = paths.render_path(NODE, CLUSTER, manager, system, choice)
    assert [fact for fact in present if fact not in text] == []
    assert [fact for fact in absent if fact in text] == []


def test_the_rendered_driver_step_of_a_preinstalled_driver_is_empty_as_the_stage_returns_early() -> None:
    from dataclasses import replace

    manager, system = next((m, s) for n, m, s in paths.SYSTEMS if n == "RHEL 9, x86_64")
    node = replace(NODE, driver=replace(NODE.driver, install_method="preinstalled"))
    assert paths.steps(node, CLUSTER, paths.state_for(manager, system))[0] == ("driver", [], [])


def test_every_path_has_a_row_of_vendor_facts() -> None:
    rows = {(name, choice) for name, choice, _, _ in EXPECTED}
    rendered = {(name, paths.CHOICES.index(choice)) for name, _, _, choice in paths.paths()}
    assert sorted(rendered - rows) == []
    assert len(DISTRO_EXPECTED) == len(paths.distro_paths())
    assert len(PREINSTALLED_EXPECTED) == len(paths.preinstalled_paths())


def test_preflight_accepts_the_system_of_every_rendered_path() -> None:
    """A path the page documents must not be refused at its first step: a real Debian 13 node on the rig was, while
    the page already rendered Debian 13 and Rocky 10 (preflight's table lagged behind the paths)."""
    from gpu_provision.stages import preflight

    for name, manager, system, choice in paths.paths() + paths.distro_paths() + paths.preinstalled_paths():
        state = paths.state_for(manager, system, choice.secure_boot)
        assert preflight._os_findings(state) == [], name


def test_every_path_renders_and_the_page_is_current() -> None:
    assert len(paths.paths()) == sum(3 if s["os_id"] == "ubuntu" else 2 for _, _, s in paths.SYSTEMS)
    assert (ROOT / "docs" / "install-paths.md").read_text() == paths.render(CLUSTER)


def test_a_second_run_on_a_converged_rhel_node_prepares_nothing() -> None:
    from dataclasses import replace

    from gpu_provision.stages import driver
    from gpu_provision.state import NodeStateData

    manager, system = next((m, s) for n, m, s in paths.SYSTEMS if n == "Rocky Linux 10, x86_64")
    state = paths.state_for(manager, system)
    assert driver.preparation_commands(NODE, state) and driver.branch_lock_commands(NODE, state)
    raw = dict(state.raw)
    raw["packages"] = {"manager": "dnf", "packages": {"epel-release": {"version": "10-2.el10", "held": False}}}
    raw["files"] = {driver.VERSIONLOCK_LIST: {"exists": True, "type": "file",
                                              "content": driver.BRANCH_LOCK_MARK + "*nvidia*580*\n"}}
    done = NodeStateData(raw)
    assert driver.preparation_commands(NODE, done) == [] and driver.branch_lock_commands(NODE, done) == []
    nine = paths.state_for("dnf", next(s for n, _, s in paths.SYSTEMS if n == "RHEL 9, x86_64"))
    raw9 = dict(nine.raw)
    raw9["packages"] = raw["packages"]
    raw9["files"] = {driver.MODULE_FILE: {"exists": True, "type": "file",
                                          "content": "[nvidia-driver]\nname=nvidia-driver\nstream=580-open\n"}}
    assert driver.preparation_commands(NODE, NodeStateData(raw9)) == []
    assert driver.preparation_commands(replace(NODE, driver=replace(NODE.driver, kernel_modules="proprietary")),
                                       NodeStateData(raw9)) == ["dnf module reset -y nvidia-driver",
                                                                "dnf module enable -y nvidia-driver:580-dkms"]


def _rhel9_with_module_file(content: str | None):
    from gpu_provision.stages import driver
    from gpu_provision.state import NodeStateData

    state = paths.state_for("dnf", next(s for n, _, s in paths.SYSTEMS if n == "RHEL 9, x86_64"))
    raw = dict(state.raw)
    raw["packages"] = {"manager": "dnf", "packages": {"epel-release": {"version": "9-8.el9", "held": False}}}
    if content is not None:
        raw["files"] = {driver.MODULE_FILE: {"exists": True, "type": "file", "content": content}}
    return NodeStateData(raw)


# dnf's module file as dnf 4 writes it (RHEL 9 'Managing software with the DNF tool', chapter 11): the enabled
# stream on 'stream=', 'state=enabled'; after 'dnf module reset' both are empty; 'dnf module disable' leaves
# 'state=disabled'. dnf refuses to enable a second stream of a module while one is enabled, so a change of branch
# or of kernel modules resets the module first (then enables the stream NVIDIA's Kernel Modules tables name).
MODULE_STREAM_CHANGES: list[tuple[str | None, str, str, list[str]]] = [
    (None, "580", "open", ["dnf module enable -y nvidia-driver:580-open"]),
    ("[nvidia-driver]\nname=nvidia-driver\nstream=580-open\nprofiles=\nstate=enabled\n", "580", "open", []),
    ("[nvidia-driver]\nname=nvidia-driver\nstream=570-open\nprofiles=\nstate=enabled\n", "580", "open",
     ["dnf module reset -y nvidia-driver", "dnf module enable -y nvidia-driver:580-open"]),
    ("[nvidia-driver]\nname=nvidia-driver\nstream=580-open\nprofiles=\nstate=enabled\n", "580", "proprietary",
     ["dnf module reset -y nvidia-driver", "dnf module enable -y nvidia-driver:580-dkms"]),
    ("[nvidia-driver]\nname=nvidia-driver\nstream=\nprofiles=\nstate=disabled\n", "580", "open",
     ["dnf module reset -y nvidia-driver", "dnf module enable -y nvidia-driver:580-open"]),
    ("[nvidia-driver]\nname=nvidia-driver\nstream=\nprofiles=\nstate=\n", "580", "open",
     ["dnf module enable -y nvidia-driver:580-open"]),
]


@pytest.mark.parametrize(("content", "branch", "kernel_modules", "expected"), MODULE_STREAM_CHANGES)
def test_a_module_stream_change_resets_the_module_then_enables_the_stream(content: str | None, branch: str,
                                                                         kernel_modules: str,
                                                                         expected: list[str]) -> None:
    from dataclasses import replace

    from gpu_provision.stages import driver

    node = replace(NODE, driver=replace(NODE.driver, branch=branch, version=None, kernel_modules=kernel_modules))
    assert driver.preparation_commands(node, _rhel9_with_module_file(content)) == expected


def test_enforcing_selinux_on_a_dnf_node_is_a_kubernetes_difference_until_permissive() -> None:
    from gpu_provision.stages import kubernetes
    from gpu_provision.state import NodeStateData

    manager, system = next((m, s) for n, m, s in paths.SYSTEMS if n == "RHEL 9, x86_64")
    state = paths.state_for(manager, system)
    assert paths.SELINUX_CONFIG in kubernetes.request(NODE, CLUSTER).contents
    found = [d for d in kubernetes.extra_differences(NODE, CLUSTER, state) if d.kind == "selinux"]
    assert [(d.expected, d.actual) for d in found] == [("not enforcing", "enforcing")]
    raw = dict(state.raw)
    raw["files"] = {paths.SELINUX_CONFIG: {"exists": True, "type": "file", "content": "SELINUX=permissive\n"}}
    assert kubernetes.selinux_commands(NodeStateData(raw)) == []
    assert not [d for d in kubernetes.extra_differences(NODE, CLUSTER, NodeStateData(raw)) if d.kind == "selinux"]


# kubernetes.io/releases/<minor>/ (End Of Life Date), read for December 2026: a minor past its end of life is not
# installed, the default is a supported one, and pkgs.k8s.io serves one repository per minor.
KUBERNETES_AS_OF = "2026-12-03"
KUBERNETES_END_OF_LIFE = {"1.31": "2025-10-28", "1.32": "2026-02-28", "1.33": "2026-06-28", "1.34": "2026-10-27",
                          "1.35": "2027-02-28", "1.36": "2027-06-28", "1.37": "2027-10-28"}


def test_kubernetes_minors_are_those_upstream_supports_and_the_default_is_one_of_them() -> None:
    from gpu_provision.spec.defaults import KUBERNETES_MINORS, KUBERNETES_VERSION
    from gpu_provision.spec.vendordata import package_data

    supported = [m for m, end in KUBERNETES_END_OF_LIFE.items() if end > KUBERNETES_AS_OF]
    assert list(KUBERNETES_MINORS) == supported
    assert KUBERNETES_VERSION.rsplit(".", 1)[0] in supported
    assert package_data()["kubernetes"]["end_of_life"] == {m: KUBERNETES_END_OF_LIFE[m] for m in supported}
    text = _rendered("Debian 12, x86_64", 0)
    assert f"https://pkgs.k8s.io/core:/stable:/v{KUBERNETES_VERSION.rsplit('.', 1)[0]}/deb/" in text
