"""nvidia-container-toolkit: repository, the four packages pinned and held, the nvidia runtime registered with the
container runtime, the CDI spec, and ``/dev/char`` links for the device files (nvidia-container-toolkit#48).

``nvidia-ctk`` runs only when the probed state shows it is needed: the runtime configuration lacks the nvidia runtime
(or its default), the CDI spec is missing or older than the driver, or device files lack their ``/dev/char`` link.

The toolkit release the cluster file pins decides the way (:mod:`gpu_provision.spec.toolkit`): from 1.18 containerd
gets the nvidia runtime in a drop-in rendered here as ``nvidia-ctk`` writes it (:mod:`gpu_provision.stages.nvidia_dropin`),
the CDI spec lives in ``/var/run/cdi`` and NVIDIA's ``nvidia-cdi-refresh.path`` regenerates it after driver
installs; before 1.18 ``nvidia-ctk runtime configure`` edits the whole file and the spec is ``/etc/cdi/nvidia.yaml``.
Docker's ``daemon.json`` is merged by ``nvidia-ctk`` in both (it takes no drop-in).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import tomlkit
from pyinfra import host
from pyinfra.api import deploy

from gpu_provision.desired import Difference, FileWant, PackageWant, UnitWant, Want
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.operations import commands, files, packages, repos, services
from gpu_provision.operations.commands import current_state
from gpu_provision.spec import toolkit as toolkit_mode
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.spec.vendordata import package_data
from gpu_provision.stages import driver, nvidia_dropin, runtime
from gpu_provision.stages.runtime import CONTAINERD_CONFIG, CONTAINERD_UNIT, DAEMON_JSON
from gpu_provision.state import NodeStateData, Request

NAME = "toolkit"
#: The CDI spec of toolkits before 1.18; from 1.18 :func:`gpu_provision.spec.toolkit.cdi_spec` names the spec.
CDI_SPEC = "/etc/cdi/nvidia.yaml"
RUN_CDI_SPEC = "/var/run/cdi/nvidia.yaml"
NVIDIA_DROPIN = toolkit_mode.containerd_drop_in()
UDEV_RULE = "/lib/udev/rules.d/71-nvidia-dev-char.rules"
# From NVIDIA's container toolkit troubleshooting notes for nvidia-container-toolkit#48: recreate the /dev/char
# links whenever the driver binds, so containers keep their devices across `systemctl daemon-reload`.
UDEV_TEXT = ('ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
             'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"\n')


def managed(node: Node) -> bool:
    """The toolkit goes on nodes that carry GPUs."""
    return node.has_gpus


def package_version(node: Node) -> str:
    """The packages' version as the repositories spell it (``1.17.8-1``)."""
    version = node.toolkit.version
    return version if "-" in version else f"{version}-1"


def package_wants(node: Node) -> list[PackageWant]:
    """All four toolkit packages at the same version, held."""
    return [PackageWant(name, package_version(node), held=True) for name in package_data()["toolkit"]["packages"]]


def file_wants(node: Node) -> list[FileWant]:
    """The udev rule that recreates the /dev/char links."""
    return [FileWant(UDEV_RULE, content=UDEV_TEXT)]


def dropin_wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[FileWant]:
    """containerd's nvidia drop-in where the toolkit release uses one (see :mod:`gpu_provision.stages.nvidia_dropin`)."""
    content = nvidia_dropin.text(node, cluster, state)
    return [FileWant(NVIDIA_DROPIN, content=content)] if content is not None else []


def unit_wants(node: Node) -> list[UnitWant]:
    """NVIDIA's ``nvidia-cdi-refresh.path`` enabled and watching, where the toolkit ships it and CDI is wanted."""
    if not node.toolkit.cdi:
        return []
    return [UnitWant(name, enabled=True, running=True) for name in toolkit_mode.refresh_units(node)]


def wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
    """Repository files, packages, the udev rule, the containerd drop-in and the CDI refresh unit (nothing on nodes
    without GPUs)."""
    if not managed(node):
        return []
    repo = repos.repository_files("nvidia-container-toolkit", cluster.mirrors.container_toolkit, state, (),
                                  cluster.mirrors.package_proxy)
    return [*repo, *package_wants(node), *file_wants(node), *dropin_wants(node, cluster, state), *unit_wants(node)]


def request(node: Node, cluster: Cluster) -> Request:
    """Toolkit packages, runtime configuration text, the CDI spec, and the runtime section."""
    if not managed(node):
        return Request()
    return Request(
        packages=set(package_data()["toolkit"]["packages"]),
        files={UDEV_RULE, CDI_SPEC, RUN_CDI_SPEC, DAEMON_JSON, CONTAINERD_CONFIG, NVIDIA_DROPIN}
        | repos.repository_request("nvidia-container-toolkit").files,
        contents={DAEMON_JSON, CONTAINERD_CONFIG, NVIDIA_DROPIN},
        units={CONTAINERD_UNIT, *toolkit_mode.refresh_units(node)},
        sections={"system", "gpu", "runtime"},
    )


def _toml_has(text: str | None, found: Any) -> bool:
    """Whether any table of TOML ``text`` satisfies ``found(table)``."""
    if not text:
        return False
    try:
        doc = tomlkit.parse(text).unwrap()
    except Exception:  # a broken file simply lacks the setting; containerd itself reports why
        return False
    stack: list[Any] = [doc]
    while stack:
        table = stack.pop()
        if found(table):
            return True
        stack.extend(v for v in table.values() if isinstance(v, dict))
    return False


def runtime_missing(node: Node, state: NodeStateData, kinds: Sequence[str] | None = None) -> str | None:
    """Why a container runtime's configuration needs ``nvidia-ctk runtime configure``, or None.

    + kinds: the runtimes to look at (default: the node's own; :func:`gpu_provision.stages.runtime.runtimes` adds
      containerd where kubelet uses it under Docker)
    """
    found = runtime_finding(node, state, kinds)
    return found[0] if found else None


def runtime_finding(node: Node, state: NodeStateData,
                    kinds: Sequence[str] | None = None) -> tuple[str, tuple[str, ...]] | None:
    """:func:`runtime_missing`'s reason with the configuration files it was read from, or None."""
    for kind in kinds or (node.container_runtime.kind,):
        reason = _missing_for(kind, node.toolkit.default_runtime, state)
        if reason:
            return reason, (DAEMON_JSON,) if kind == "docker" else (CONTAINERD_CONFIG, NVIDIA_DROPIN)
    return None


def _missing_for(kind: str, default: bool, state: NodeStateData) -> str | None:
    if kind == "docker":
        try:
            config = json.loads(state.file(DAEMON_JSON).content or "{}")
        except ValueError:
            config = {}
        if "nvidia" not in (config.get("runtimes") or {}):
            return "daemon.json has no nvidia runtime"
        if default and config.get("default-runtime") != "nvidia":
            return "nvidia is not Docker's default runtime"
        return None
    texts = [state.file(CONTAINERD_CONFIG).content, state.file(NVIDIA_DROPIN).content]
    if not any(_toml_has(t, lambda tbl: isinstance(tbl.get("runtimes"), dict) and "nvidia" in tbl["runtimes"])
               for t in texts):
        return "containerd has no nvidia runtime"
    if default and not any(_toml_has(t, lambda tbl: tbl.get("default_runtime_name") == "nvidia") for t in texts):
        return "nvidia is not containerd's default runtime"
    return None


def configure_command(node: Node, kinds: Sequence[str] | None = None) -> str:
    """``nvidia-ctk runtime configure`` for each runtime (default: the node's own), each then restarted."""
    default = " --set-as-default" if node.toolkit.default_runtime else ""
    return " && ".join(f"nvidia-ctk runtime configure --runtime={kind}{default} && "
                       f"{{ systemctl reset-failed {kind} 2>/dev/null; systemctl restart {kind}; }}"
                       for kind in kinds or (node.container_runtime.kind,))


def command_kinds(node: Node, cluster: Cluster, state: NodeStateData) -> tuple[str, ...]:
    """The runtimes ``nvidia-ctk runtime configure`` still configures: all of them, except containerd where the
    deploy writes its drop-in itself."""
    kinds = runtime.runtimes(node, cluster)
    if dropin_wants(node, cluster, state):
        kinds = tuple(k for k in kinds if k != "containerd")
    return kinds


def cdi_outdated(state: NodeStateData, reading: str = "cdi_spec_mtime") -> str | None:
    """Why the CDI spec must be generated: missing, or older than the installed driver.

    + reading: the probe's reading of the spec's age (``cdi_run_spec_mtime`` for ``/var/run/cdi/nvidia.yaml``)
    """
    section = state.section("runtime")
    spec, driver_at = section.get(reading), section.get("driver_installed_at")
    if spec is None:
        return "no CDI spec"
    if driver_at is not None and spec < driver_at:
        return "CDI spec is older than the driver"
    return None


def spec_reading(node: Node) -> str:
    """The probe's reading of the age of ``node``'s CDI spec."""
    return "cdi_run_spec_mtime" if toolkit_mode.cdi_spec(node) == RUN_CDI_SPEC else "cdi_spec_mtime"


def stale_spec(node: Node, state: NodeStateData) -> str | None:
    """Why the static spec of an older toolkit must go: a 1.18 node keeps its spec in /var/run/cdi, and two specs
    naming the same devices conflict in CDI's registry."""
    stale = toolkit_mode.stale_cdi_spec(node)
    if stale and node.toolkit.cdi and state.file(stale).exists:
        return f"{stale} left beside {toolkit_mode.cdi_spec(node)}"
    return None


def dev_char_missing(state: NodeStateData) -> str | None:
    """Why ``create-dev-char-symlinks`` must run: device files without their /dev/char link."""
    missing = state.section("runtime").get("dev_char_missing") or []
    return f"no /dev/char link for {', '.join(missing)}" if missing else None


def extra_differences(node: Node, cluster: Cluster, state: NodeStateData) -> list[Difference]:
    """The runtime registration, the CDI spec and the /dev/char links."""
    if not managed(node):
        return []
    kinds = runtime.runtimes(node, cluster)
    registered = runtime_finding(node, state, kinds)
    checks = [("nvidia-runtime", "+".join(kinds), *(registered or (None, ()))),
              ("dev-char", "/dev/char", dev_char_missing(state), ())]
    if node.toolkit.cdi:
        checks.append(("cdi-spec", toolkit_mode.cdi_spec(node), cdi_outdated(state, spec_reading(node)), ()))
        stale = toolkit_mode.stale_cdi_spec(node)
        if stale:
            checks.append(("cdi-spec-stale", stale, stale_spec(node, state), ()))
    return [Difference(kind, item, "present and current", reason, NAME, ", ".join(read))
            for kind, item, reason, read in checks if reason]


@deploy("NVIDIA container toolkit")
def toolkit_stage() -> None:
    """Install the pinned toolkit, register the nvidia runtime, generate the CDI spec, keep /dev/char links."""
    target = commands.this_host()
    node, cluster = node_for(host), cluster_for(host)
    if not managed(node):
        target.noop("no GPUs expected on this node")
        return
    req = request(node, cluster)
    repos.apt_repository(name="NVIDIA container toolkit repository", repo_id="nvidia-container-toolkit",
                         repo=cluster.mirrors.container_toolkit, proxy=cluster.mirrors.package_proxy)
    packages.wants(name="Container toolkit packages (pinned, held)", wants=package_wants(node),
                   lock_timeout=node.packages.lock_timeout)
    files.wants(name="udev rule for /dev/char links", wants=file_wants(node))
    # The driver must be usable for the next steps; a node waiting for its reboot gets them after it.
    driver_req = req.merge(driver.request(node, cluster))

    def ready() -> bool:
        return driver.reboot_reason(node, current_state(target, driver_req)) is None

    prepared = current_state(target, req)
    dropin = dropin_wants(node, cluster, prepared)
    if dropin:
        files.wants(name="nvidia runtime drop-in for containerd", wants=dropin, request=req)
        services.wants(name="containerd restarted after its nvidia drop-in changed",
                       wants=[UnitWant(CONTAINERD_UNIT, restart_on=(NVIDIA_DROPIN,))])
    kinds = command_kinds(node, cluster, prepared)
    if kinds:
        commands.guarded(name=f"Register the nvidia runtime with {' and '.join(kinds)}",
                         command=configure_command(node, kinds), needed=lambda s: runtime_missing(node, s, kinds),
                         request=req,
                         noop="nvidia runtime already registered")
    if node.toolkit.cdi:
        spec, reading = toolkit_mode.cdi_spec(node), spec_reading(node)
        commands.guarded(name="Generate the CDI spec", command=f"nvidia-ctk cdi generate --output={spec}",
                         needed=lambda s: cdi_outdated(s, reading), request=req, noop="CDI spec current", _if=ready)
        stale = toolkit_mode.stale_cdi_spec(node)
        if stale:
            commands.guarded(name="Remove the CDI spec an older toolkit left", command=f"rm -f {stale}",
                             needed=lambda s: stale_spec(node, s), request=req, noop="no stale CDI spec")
        units = unit_wants(node)
        if units:
            services.wants(name="nvidia-cdi-refresh.path enabled (regenerates the spec after driver installs)",
                           wants=units)
    commands.guarded(name="Create /dev/char links for NVIDIA devices",
                     command="nvidia-ctk system create-dev-char-symlinks --create-all", needed=dev_char_missing,
                     request=req, noop="/dev/char links present", _if=ready)
