"""What ``vagrant up --provider=libvirt`` needs on the rig's machines, and nothing that reaches out.

vagrant-libvirt's defaults would create a NAT network (``vagrant-libvirt``, 192.168.121.0/24) whose guests reach
the world through the host. Instead, ``gpu-provision-rig libvirt up`` prepares:

* **the libvirt daemons** (``virtlogd``, ``libvirtd``): started here when none runs (PID 1 is not systemd on these
  machines) and stopped by ``libvirt down``, which stops only what ``up`` started;
* **an isolated network** :data:`NETWORK_NAME` (libvirt's ``<network>`` without ``<forward>``: no NAT, no routing;
  libvirt rejects forwarding into and out of its bridge), ``10.77.1.0/24`` beside the rig's own ``10.77.0.0/24``,
  with a blackhole route for the subnet as the rig's bridge has. Node N has the fixed MAC ``52:54:00:77:01:NN``
  (the project's Vagrantfile sets it under ``GP_LIBVIRT_NETWORK``) and the fixed lease ``10.77.1.(10+N)``; DHCP
  also gives the guests one route, to the rig's subnet through the host, so they reach the rig's apt proxy and
  mirror (``10.77.0.1``) as the rig's nodes do, and nothing else. dnsmasq answers no outside names (``no-resolv``);
* **loopback forwarders** ``127.0.13.N:22`` → ``10.77.1.(10+N):22`` (:mod:`gpu_provision_rig.forward`): Vagrant
  (``GP_SSH_LOOPBACK``) and pyinfra reach the VMs only there;
* **the box** (:mod:`gpu_provision_rig.box`) added to Vagrant as ``gpu-provision/<name>``;
* ``/dev/kvm`` as udev would leave it (``0660 root:kvm``) while the rig uses it: with it ``0600 root:root``, as it
  is where no udev runs, libvirt probes QEMU again on every call (``vagrant up`` of two VMs took 298–367 s
  instead of 77 s, RIG-NOTES); ``down`` puts back what it found.

``libvirt up`` prints the environment for the project's Vagrantfile (``GP_BOX``, ``GP_LIBVIRT_DRIVER``,
``GP_LIBVIRT_NETWORK``, ``GP_SSH_LOOPBACK``) as shell ``export`` lines; ``libvirt cluster`` turns ``vagrant
ssh-config`` into the cluster file (:func:`rig_cluster`).
"""

from __future__ import annotations

import grp
import ipaddress
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from gpu_provision.vagrant import cluster_document, parse_ssh_config
from gpu_provision_rig.box import Box, ensure_box
from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS, LIBVIRT_SUBNET, SSH_PORT, RigPaths
from gpu_provision_rig.config import SUBNET as RIG_SUBNET
from gpu_provision_rig.errors import RigError
from gpu_provision_rig.procs import read_pid, start_daemon, stop_daemon

log = logging.getLogger(__name__)

NETWORK_NAME = "gpu-provision-vm"
NETWORK_BRIDGE = "gpvm0"
SUBNET = LIBVIRT_SUBNET
HOST_ADDRESS = "10.77.1.1"
#: Node N has ``10.77.1.(NODE_ADDRESS_OFFSET + N)`` and ``127.0.13.N``.
NODE_ADDRESS_OFFSET = 10
LOOPBACK_PREFIX = "127.0.13."
MAC_PREFIX = "52:54:00:77:01:"
#: At most this many VMs: MACs end in two decimal digits (the Vagrantfile's ``%02d``).
MAX_NODES = 99
BLACKHOLE_METRIC = 4096
LIBVIRT_URI = "qemu:///system"
KVM_DEVICE = Path("/dev/kvm")
#: Host packages (Debian) for ``vagrant up --provider=libvirt``: installed without recommends, so no daemon of
#: libvirt's starts by itself and no network of its own (``default``, NAT) is set to start.
LIBVIRT_HOST_PACKAGES: tuple[str, ...] = ("vagrant", "vagrant-libvirt", "libvirt-daemon-system",
                                          "libvirt-daemon-driver-qemu", "qemu-system-x86", "dnsmasq-base")
DAEMON_WAIT_S = 30.0


@dataclass(frozen=True)
class VagrantNode:
    """Node N of the Vagrantfile (``gpu-node<N>``) as the isolated network sees it."""

    index: int

    @property
    def name(self) -> str:
        return f"gpu-node{self.index}"

    @property
    def mac(self) -> str:
        return f"{MAC_PREFIX}{self.index:02d}"

    @property
    def address(self) -> str:
        return str(ipaddress.ip_network(SUBNET)[NODE_ADDRESS_OFFSET + self.index])

    @property
    def ssh_address(self) -> str:
        return f"{LOOPBACK_PREFIX}{self.index}"


def nodes(count: int) -> list[VagrantNode]:
    """Nodes 1..``count``; a RigError outside 1..:data:`MAX_NODES`."""
    if not 1 <= count <= MAX_NODES:
        raise RigError(f"--nodes {count}: the isolated network has fixed leases for 1 to {MAX_NODES} nodes")
    return [VagrantNode(i) for i in range(1, count + 1)]


def network_xml(count: int = MAX_NODES) -> str:
    """The isolated network's libvirt definition: fixed leases for every possible node, one classless static
    route (DHCP option 121, RFC 3442) to the rig's subnet, no ``<forward>`` element (libvirt's isolated mode)."""
    net = ipaddress.ip_network(SUBNET)
    hosts = "\n".join(f"      <host mac='{n.mac}' ip='{n.address}'/>" for n in nodes(count))
    return f"""\
<network xmlns:dnsmasq='http://libvirt.org/schemas/network/dnsmasq/1.0'>
  <name>{NETWORK_NAME}</name>
  <bridge name='{NETWORK_BRIDGE}' stp='off'/>
  <ip address='{HOST_ADDRESS}' netmask='{net.netmask}'>
    <dhcp>
      <range start='{net[200]}' end='{net[250]}'/>
{hosts}
    </dhcp>
  </ip>
  <dnsmasq:options>
    <dnsmasq:option value='dhcp-option=option:classless-static-route,{RIG_SUBNET},{HOST_ADDRESS}'/>
  </dnsmasq:options>
</network>
"""


def vagrant_env(box_name: str) -> dict[str, str]:
    """The project Vagrantfile's settings for this rig."""
    return {"GP_BOX": f"gpu-provision/{box_name}", "GP_LIBVIRT_DRIVER": "qemu",
            "GP_LIBVIRT_NETWORK": f"{NETWORK_NAME}={SUBNET}", "GP_SSH_LOOPBACK": LOOPBACK_PREFIX}


@dataclass
class VagrantProject:
    """A folder holding a Vagrantfile, and the environment Vagrant runs with there (``libvirt up``'s settings)."""

    folder: Path
    env: dict[str, str]

    def vagrant(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        """``vagrant ARGS`` in the folder."""
        return subprocess.run(["vagrant", *args], capture_output=True, text=True, cwd=self.folder, env=self.env,
                              timeout=timeout)

    def ssh(self, node: VagrantNode, command: str) -> subprocess.CompletedProcess[str]:
        """``command`` in ``node`` through ``vagrant ssh`` (Vagrant's own key, the loopback forwarder)."""
        return self.vagrant("ssh", node.name, "-c", command, timeout=300)

    def cluster_file(self, path: Path, user: str = "vagrant") -> Path:
        """:func:`rig_cluster`'s file for the project's machines (from ``vagrant ssh-config``) at ``path``."""
        config = self.vagrant("ssh-config")
        if config.returncode != 0:
            raise RigError(f"vagrant ssh-config exited {config.returncode}: {config.stderr.strip()[-500:]}")
        path.write_text(rig_cluster(config.stdout, user))
        return path


def rig_cluster(ssh_config: str, user: str = "vagrant") -> str:
    """The cluster file ``gpu-provision vagrant-cluster`` makes from ``ssh_config`` (``vagrant ssh-config``
    output), Kubernetes off, with what the rig's VMs need: the rig's apt proxy (they reach nothing else) and Docker
    from Debian's archive (Docker's own repository is out of reach); logging in as ``user``."""
    doc = cluster_document(parse_ssh_config(ssh_config), name="vagrant-rig", kubernetes=False)
    cluster = doc["cluster"]
    assert isinstance(cluster, dict)
    cluster["ssh"]["user"] = user
    cluster["mirrors"] = {"package_proxy": f"http://{BRIDGE_ADDRESS}:{APT_PROXY_PORT}/"}
    doc["defaults"] = {"container_runtime": {"kind": "docker", "docker_source": "distro"}}
    return ("# Written by `gpu-provision-rig libvirt cluster` from `vagrant ssh-config`: the machines of the project's\n"
            "# Vagrantfile as `gpu-provision vagrant-cluster` sees them, with the rig's apt proxy.\n"
            + yaml.safe_dump(doc, sort_keys=False))


def _run(argv: list[str], what: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as exc:
        raise RigError(f"{what}: {argv[0]} is not installed (apt-get install --no-install-recommends "
                       f"{' '.join(LIBVIRT_HOST_PACKAGES)})") from exc
    if check and proc.returncode != 0:
        tail = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[-5:]
        raise RigError(f"{what}: {' '.join(argv)} exited {proc.returncode}: {' | '.join(tail)}")
    return proc


def _virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return _run(["virsh", "-c", LIBVIRT_URI, *args], f"virsh {args[0]}", check=check)


class LibvirtRig:
    """The libvirt side of the rig: daemons, the isolated network, forwarders, the box and ``/dev/kvm``."""

    def __init__(self, paths: RigPaths):
        self.paths = paths
        self.folder = paths.state / "libvirt"

    def _pidfile(self, name: str) -> Path:
        return self.folder / f"{name}.pid"

    @property
    def _kvm_record(self) -> Path:
        return self.folder / "kvm-mode.json"

    def up(self, count: int, suite: str) -> dict[str, str]:
        """Prepare everything for ``count`` VMs of the ``suite`` box; the Vagrantfile's environment."""
        wanted = nodes(count)
        self.folder.mkdir(parents=True, exist_ok=True)
        built = ensure_box(self.paths.cache, suite)
        self._kvm_as_udev_leaves_it()
        self._start_daemons()
        self._add_box(built)
        self._start_network()
        for node in wanted:
            start_daemon([sys.executable, "-m", "gpu_provision_rig.forward", f"{node.ssh_address}:{SSH_PORT}",
                          f"{node.address}:{SSH_PORT}"], self._pidfile(f"forward-{node.index}"),
                         self.paths.logs / f"libvirt-forward-{node.index}.log")
        return vagrant_env(built.name)

    def down(self) -> None:
        """Undo ``up``: forwarders, the network and its route, the daemons ``up`` started, ``/dev/kvm``'s mode.
        VMs still on the network are the user's (``vagrant destroy -f``): refused while any runs."""
        if read_pid(self._pidfile("libvirtd")) is not None or _daemon_running("libvirtd"):
            running = [d for d in _virsh("list", "--name", check=False).stdout.split() if d]
            if running:
                raise RigError(f"VMs still run: {', '.join(running)}; stop them first (vagrant destroy -f)")
            if _virsh("net-info", NETWORK_NAME, check=False).returncode == 0:
                _virsh("net-destroy", NETWORK_NAME, check=False)
                _virsh("net-undefine", NETWORK_NAME, check=False)
        _ip_route("del", check=False)
        for pidfile in sorted(self.folder.glob("forward-*.pid")) if self.folder.is_dir() else []:
            stop_daemon(pidfile)
        for daemon in ("libvirtd", "virtlogd"):
            stop_daemon(self._pidfile(daemon))
        self._kvm_restore()

    def _add_box(self, built: Box) -> None:
        record = self.folder / f"box-{built.name}.added"
        key = built.box_file.name
        if record.is_file() and record.read_text() == key and _box_listed(built.name):
            return
        log.info("adding box gpu-provision/%s to Vagrant", built.name)
        if not _virsh("list", "--all", "--name", check=False).stdout.split():
            # vagrant-libvirt copies a box's image into the pool once, under a new name per added box: drop the
            # copies of earlier builds while no VM can be backed by them.
            prefix = f"gpu-provision-VAGRANTSLASH-{built.name}_vagrant_box_image_"
            table = _virsh("vol-list", "--pool", "default", check=False).stdout.splitlines()[2:]  # after the header
            volumes = [line.split()[0] for line in table if line.strip()]
            for volume in (v for v in volumes if v.startswith(prefix)):
                _virsh("vol-delete", "--pool", "default", volume, check=False)
        _run(["vagrant", "box", "add", "--force", "--name", f"gpu-provision/{built.name}", str(built.box_file)],
             "vagrant box add", timeout=900)
        record.write_text(key)

    def _kvm_as_udev_leaves_it(self) -> None:
        if not KVM_DEVICE.exists() or self._kvm_record.exists():
            return
        try:
            kvm_gid = grp.getgrnam("kvm").gr_gid
        except KeyError:
            return
        st = KVM_DEVICE.stat()
        self._kvm_record.write_text(json.dumps({"mode": stat.S_IMODE(st.st_mode), "gid": st.st_gid}))
        os.chown(KVM_DEVICE, -1, kvm_gid)
        KVM_DEVICE.chmod(0o660)

    def _kvm_restore(self) -> None:
        if not self._kvm_record.is_file():
            return
        saved = json.loads(self._kvm_record.read_text())
        if KVM_DEVICE.exists():
            os.chown(KVM_DEVICE, -1, int(saved["gid"]))
            KVM_DEVICE.chmod(int(saved["mode"]))
        self._kvm_record.unlink()

    def _start_daemons(self) -> None:
        for daemon in ("virtlogd", "libvirtd"):
            if _daemon_running(daemon) and read_pid(self._pidfile(daemon)) is None:
                continue  # someone else's: used, never stopped
            binary = shutil.which(daemon) or f"/usr/sbin/{daemon}"
            if not Path(binary).exists():
                raise RigError(f"{daemon} is not installed (apt-get install --no-install-recommends "
                               f"{' '.join(LIBVIRT_HOST_PACKAGES)})")
            start_daemon([binary], self._pidfile(daemon), self.paths.logs / f"{daemon}.log")
        deadline = time.monotonic() + DAEMON_WAIT_S
        while _virsh("version", check=False).returncode != 0:
            if time.monotonic() > deadline:
                raise RigError(f"libvirtd did not answer within {DAEMON_WAIT_S:.0f} s "
                               f"(log: {self.paths.logs / 'libvirtd.log'})")
            time.sleep(0.5)

    def _start_network(self) -> None:
        info = _virsh("net-info", NETWORK_NAME, check=False)
        if info.returncode != 0:
            definition = self.folder / "network.xml"
            definition.write_text(network_xml())
            _virsh("net-define", str(definition))
            info = _virsh("net-info", NETWORK_NAME)
        if "Active:         yes" not in info.stdout:
            # libvirt refuses a network whose subnet already has a route (the blackhole): route after start.
            _ip_route("del", check=False)
            _virsh("net-start", NETWORK_NAME)
        _ip_route("add", check=False)


def _daemon_running(name: str) -> bool:
    return subprocess.run(["pgrep", "-x", name], capture_output=True).returncode == 0


def _box_listed(name: str) -> bool:
    listed = subprocess.run(["vagrant", "box", "list"], capture_output=True, text=True, timeout=120)
    return f"gpu-provision/{name} " in listed.stdout


def _ip_route(action: str, check: bool = True) -> None:
    shown = _run(["ip", "route", "show", "type", "blackhole", SUBNET], "ip route").stdout
    present = f"metric {BLACKHOLE_METRIC}" in shown
    if (action == "add") == present:
        return
    _run(["ip", "route", action, "blackhole", SUBNET, "metric", str(BLACKHOLE_METRIC)], f"ip route {action}",
         check=check)
