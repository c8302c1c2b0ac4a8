"""Package repositories: signing key, source file, version pins (apt) or a ``.repo`` file (dnf), and the proxy."""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra.api import operation

from gpu_provision.desired import FileWant
from gpu_provision.operations.commands import current_state, mark_changed, this_host
from gpu_provision.operations.files import content_changes, plan, record_changed
from gpu_provision.spec import keyfile
from gpu_provision.spec.model import Repository
from gpu_provision.spec.vendordata import package_data
from gpu_provision.state import NodeStateData, Request

KEYRING_DIR = "/etc/apt/keyrings"
#: Where dnf nodes keep a key shipped from a ``key_file`` (RHEL's own directory for repository keys).
RPM_KEY_DIR = "/etc/pki/rpm-gpg"
PROXY_FILE = "/etc/apt/apt.conf.d/90gpu-provision-proxy"

# Runs on the node with its own python3 (the probe needs it anyway): no curl, wget or gnupg required. The keyring is
# written atomically: a mkstemp file beside it, synced, then renamed.
_FETCH_KEY = (
    "import base64,os,sys,tempfile,urllib.request\n"
    "data=urllib.request.urlopen(sys.argv[1],timeout=60).read()\n"
    "if data.lstrip().startswith(b'-----BEGIN PGP'):\n"
    "    lines=data.decode().strip().splitlines()\n"
    "    body=lines[lines.index('')+1:]\n"
    "    data=base64.b64decode(''.join(l for l in body if not l.startswith(('=','-----'))))\n"
    "d,name=os.path.split(sys.argv[2])\n"
    "os.makedirs(d,exist_ok=True)\n"
    "fd,tmp=tempfile.mkstemp(dir=d,prefix='.'+name+'.')\n"
    "try:\n"
    "    with os.fdopen(fd,'wb') as f:\n"
    "        f.write(data);f.flush();os.fchmod(f.fileno(),0o644);os.fsync(f.fileno())\n"
    "    os.replace(tmp,sys.argv[2])\n"
    "except BaseException:\n"
    "    os.unlink(tmp);raise\n"
)


@dataclass(frozen=True)
class Pin:
    """An apt preferences entry: ``packages`` (globs allowed) held to ``version`` (``580.*``) at ``priority``.

    A priority above 1000 lets apt downgrade to the pinned version.
    """

    packages: tuple[str, ...]
    version: str
    priority: int = 1001


def placeholders(system: Mapping[str, Any], k8s_minor: str = "") -> dict[str, str]:
    """Values for the URL placeholders of :mod:`gpu_provision.spec.defaults`, from the probe's system section."""
    os_id = str(system.get("os_id", ""))
    like = str(system.get("os_like", ""))
    version = str(system.get("os_version", ""))
    machine = str(system.get("arch", ""))
    rpm = os_id in ("rhel", "rocky", "almalinux", "centos", "fedora") or "rhel" in like.split()
    family = "rhel" if rpm else os_id
    major = version.split(".")[0]
    distro = f"{family}{major}" if rpm or family == "debian" else f"{family}{version.replace('.', '')}"
    deb_arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)
    return {
        "distro": distro,
        "os": family,
        "codename": str(system.get("codename", "")),
        "arch": machine if rpm else deb_arch,
        "cuda_arch": "sbsa" if machine == "aarch64" else machine,
        "pkgformat": "rpm" if rpm else "deb",
        "cuda_key": cuda_key(distro, "rpm" if rpm else "deb"),
        "k8s_minor": k8s_minor,
        "k8s_key": package_data()["kubernetes"]["repository"]["key"]["rpm" if rpm else "deb"],
    }


def cuda_key(distro: str, pkgformat: str) -> str:
    """The CUDA repository's signing key file for release ``distro`` (``rhel9``, ``debian13``): the release's own
    where NVIDIA signs it with one (RHEL 10, Debian 13), else the one of its package format."""
    facts = package_data()["cuda_repository"]
    return str(facts["release_keys"].get(distro) or facts["key"][pkgformat])


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with ``{placeholder}`` fields filled (unknown fields left as written)."""
    out = text
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


def keyring_path(name: str) -> str:
    """Where the dearmored signing key of repository ``name`` lives."""
    return f"{KEYRING_DIR}/{name}.gpg"


def rpm_key_path(name: str) -> str:
    """Where a dnf node keeps repository ``name``'s key shipped from a ``key_file``."""
    return f"{RPM_KEY_DIR}/gpu-provision-{name}.asc"


def key_source(repo: Repository, values: Mapping[str, str]) -> str:
    """Where the repository's key comes from, for the comment in its source file."""
    if repo.key_file:
        return f"the key file {posixpath.basename(repo.key_file)} on the controller"
    return fill(repo.key_url or "", values)


def key_file_want(name: str, repo: Repository, dnf: bool) -> FileWant | None:
    """The key of a repository with a ``key_file``, as the file the node's package manager reads: apt's binary
    keyring (the one ``Signed-By`` names) or dnf's armored key; root-owned, mode 0644, no backup. None for a
    repository whose key the node fetches from ``key_url``."""
    if not repo.key_file:
        return None
    binary = keyfile.read_key(repo.key_file)
    if dnf:
        return FileWant(rpm_key_path(name), content=keyfile.armor(binary), mode="0644", backup=False)
    return FileWant(keyring_path(name), content=binary, mode="0644", backup=False)


def apt_files(name: str, repo: Repository, values: Mapping[str, str], pins: Sequence[Pin]) -> list[FileWant]:
    """The deb822 source file (and preferences file when pinned) of an apt repository."""
    suite = fill(repo.suite, values)
    lines = [
        f"# Managed by gpu-provision; key from {key_source(repo, values)}",
        "Types: deb",
        f"URIs: {fill(repo.url, values)}",
        f"Suites: {suite}",
    ]
    # Flat repositories (suite "/") must not name components.
    if repo.components and not suite.endswith("/"):
        lines.append("Components: " + " ".join(repo.components))
    lines.append(f"Signed-By: {keyring_path(name)}")
    out = [FileWant(f"/etc/apt/sources.list.d/{name}.sources", content="\n".join(lines) + "\n")]
    if pins:
        stanzas = [
            f"Package: {' '.join(pin.packages)}\nPin: version {pin.version}\nPin-Priority: {pin.priority}\n"
            for pin in pins
        ]
        out.append(FileWant(f"/etc/apt/preferences.d/{name}.pref",
                            content="# Managed by gpu-provision\n" + "\n".join(stanzas)))
    return out


def dnf_options(name: str) -> dict[str, str]:
    """The signature options (``gpgcheck``, ``repo_gpgcheck``) of repository ``name``'s ``.repo`` file, as the
    vendor's own file sets them (``dnf_repository_options`` in ``gpu_provision/data/packages.json``): NVIDIA's
    container toolkit file checks the signed repository metadata and turns package signature checks off, while the
    CUDA, Docker and Kubernetes files check each package."""
    return dict(package_data()["dnf_repository_options"][name]["options"])


def yum_file(name: str, repo: Repository, values: Mapping[str, str], proxy: str | None) -> FileWant:
    """The ``/etc/yum.repos.d/NAME.repo`` file of a dnf repository (dnf imports the key from ``gpgkey``), with the
    signature options of :func:`dnf_options`.

    A repository described apt-style with components (Docker's) is laid out for dnf as
    ``URL/$releasever/$basearch/COMPONENT``, as Docker's own ``docker-ce.repo`` does.
    """
    baseurl = fill(repo.url, values)
    if repo.components:
        baseurl = f"{baseurl.rstrip('/')}/$releasever/$basearch/{repo.components[0]}"
    lines = [
        "# Managed by gpu-provision",
        f"[{name}]",
        f"name={name}",
        f"baseurl={baseurl}",
        "enabled=1",
        *(f"{key}={value}" for key, value in dnf_options(name).items()),
        f"gpgkey={'file://' + rpm_key_path(name) if repo.key_file else fill(repo.key_url or '', values)}",
    ]
    if proxy:
        lines.append(f"proxy={proxy}")
    return FileWant(f"/etc/yum.repos.d/{name}.repo", content="\n".join(lines) + "\n")


def repository_files(name: str, repo: Repository, state: NodeStateData, pins: Sequence[Pin] = (),
                     proxy: str | None = None, k8s_minor: str = "") -> list[FileWant]:
    """Every file repository ``name`` needs on this node's package manager (for drift checks and the operation)."""
    values = placeholders(state.system, k8s_minor)
    dnf = state.package_manager == "dnf"
    key = key_file_want(name, repo, dnf)
    files = [yum_file(name, repo, values, proxy)] if dnf else apt_files(name, repo, values, pins)
    return ([key] if key else []) + files


def repository_request(name: str) -> Request:
    """What the probe must read for repository ``name`` (either family's files; absent ones cost nothing)."""
    return Request(files={f"/etc/apt/sources.list.d/{name}.sources", f"/etc/apt/preferences.d/{name}.pref",
                          keyring_path(name), f"/etc/yum.repos.d/{name}.repo", rpm_key_path(name)})


def key_command(name: str, repo: Repository, values: Mapping[str, str]) -> str:
    """The node-side command that fetches and dearmors the repository's signing key from its ``key_url``."""
    return (f"python3 -c {shlex.quote(_FETCH_KEY)} {shlex.quote(fill(repo.key_url or '', values))} "
            f"{shlex.quote(keyring_path(name))}")


@operation()
def apt_repository(repo_id: str, repo: Repository, pins: Sequence[Pin] = (), proxy: str | None = None,
                   k8s_minor: str = ""):
    """A package repository the node trusts only with its own key; apt or dnf by the node's package manager.

    + repo_id: file stem (``cuda``, ``nvidia-container-toolkit``, ``docker``, ``kubernetes``)
    + repo: URL, key URL or key file, suite, components; placeholders such as ``{distro}`` are filled from the
      node's OS
    + pins: apt version pins written to ``/etc/apt/preferences.d/NAME.pref`` (dnf pins with versionlock instead,
      see :func:`gpu_provision.operations.packages.wants`)
    + proxy: written into the ``.repo`` file on dnf nodes (apt uses :func:`proxy`)
    + k8s_minor: value of ``{k8s_minor}``

    apt: the key is fetched on the node and dearmored into ``/etc/apt/keyrings/NAME.gpg`` (again whenever the source
    file changes, e.g. a new mirror), or, with a ``key_file``, read on the controller and written there like any
    managed file (root-owned, 0644; dnf nodes get it armored in ``/etc/pki/rpm-gpg``); the source is a deb822
    ``.sources`` file with ``Signed-By``. Changed files are
    recorded so that the next package operation refreshes the index once.

    .. code:: python

        repos.apt_repository(name="CUDA repository", repo_id="cuda", repo=cluster.mirrors.cuda,
                             pins=[Pin(("nvidia-*", "libnvidia-*"), "580.*")])
    """
    host = this_host()
    state = current_state(host, repository_request(repo_id))
    wanted = repository_files(repo_id, repo, state, pins, proxy, k8s_minor)
    changed = content_changes(wanted, state)
    commands: list[Any] = []
    # The key goes with the source: fetched again when the source (its URL, its key URL) changes, not for a pin.
    source_changed = f"/etc/apt/sources.list.d/{repo_id}.sources" in changed
    fetched = state.package_manager != "dnf" and not repo.key_file
    if fetched and (source_changed or not state.file(keyring_path(repo_id)).exists):
        commands.append(key_command(repo_id, repo, placeholders(state.system, k8s_minor)))
        changed.add(keyring_path(repo_id))
    for want in wanted:
        commands.extend(plan(want, state.file(want.path)))
    if not commands:
        host.noop(f"repository {repo_id} already configured")
        return
    record_changed(host, changed)
    mark_changed(host)
    yield from commands


def proxy_want(url: str) -> FileWant:
    """apt's proxy file for ``url``."""
    return FileWant(PROXY_FILE, content=f'# Managed by gpu-provision\nAcquire::http::Proxy "{url}";\n')


@operation()
def proxy(url: str | None):
    """apt's HTTP proxy (``Acquire::http::Proxy``) in ``/etc/apt/apt.conf.d/90gpu-provision-proxy``.

    + url: proxy URL such as ``http://10.0.0.1:3142``; None removes the file

    Only apt nodes: on dnf nodes the proxy goes into each ``.repo`` file.

    .. code:: python

        repos.proxy(name="Package proxy", url=cluster.mirrors.package_proxy)
    """
    host = this_host()
    state = current_state(host, Request(files={PROXY_FILE}))
    if state.package_manager == "dnf":
        host.noop("dnf nodes take the proxy from each .repo file")
        return
    current = state.file(PROXY_FILE)
    if url is None:
        if current.exists:
            record_changed(host, {PROXY_FILE})
            mark_changed(host)
            yield f"rm -f {PROXY_FILE}"
        else:
            host.noop("no package proxy, none configured")
        return
    want = proxy_want(url)
    commands = plan(want, current)
    if not commands:
        host.noop(f"package proxy already {url}")
        return
    record_changed(host, content_changes([want], state))
    mark_changed(host)
    yield from commands
