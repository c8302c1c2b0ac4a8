"""The apt caching proxy on the rig bridge (apt-cacher-ng, port 3142): the nodes' only way to the Debian archive.

It runs with a configuration of its own (not the system's ``/etc/apt-cacher-ng``), listens only on the bridge
address and, with ``ForceManaged``, fetches only from the Debian archive and security archive; any other URL a
node asks for is refused (403, decided locally), and so is every HTTPS tunnel (``PassThroughPattern`` matches
nothing). Its cache lives in the rig cache directory, so downloads are shared by all nodes and kept
between rig runs.

Index files (``InRelease``) are taken as fresh for an hour (``FreshIndexMaxAge``, apt-cacher-ng's default is 27 s).
apt-cacher-ng 3.7 moves a stale index aside under a name with the current second in it: nodes of one test module
running ``apt-get update`` in the same second made it fail ("Failure to move file ... out of the way ... errno: File
exists", then "Error creating file item"), and the node whose request it dropped hung in apt's http method on the
closed connection (CLOSE-WAIT) until the deploy's 480 s timeout. An hour keeps refreshes rare within a test run;
the indexes they point to are fetched by hash, so a node never mixes two versions of an index.
"""

from __future__ import annotations

from pathlib import Path

from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS, RigPaths
from gpu_provision_rig.procs import read_pid, start_daemon, stop_daemon

SUPPORT_DIR = "/usr/lib/apt-cacher-ng"

ACNG_CONF = """\
# Written by the gpu-provision rig.
CacheDir: {cache}
LogDir: {logs}
SupportDir: {support}
Port: {port}
BindAddress: {address}
SocketPath: {socket}
PidFile: {pidfile}
ForeGround: 1
ForceManaged: 1
PassThroughPattern: ^$
ExThreshold: 4
FreshIndexMaxAge: 3600
Remap-debrep: deb.debian.org/debian ; http://deb.debian.org/debian
Remap-secdeb: deb.debian.org/debian-security security.debian.org/debian-security ; http://deb.debian.org/debian-security
"""


def _conf_dir(paths: RigPaths) -> Path:
    return paths.state / "apt-cacher-ng"


def _pidfile(paths: RigPaths) -> Path:
    return paths.run / "apt-cacher-ng.pid"


def start_proxy(paths: RigPaths) -> int:
    """Start the proxy (no-op if running); the bridge address must already exist. Returns its pid."""
    conf = _conf_dir(paths)
    cache = paths.cache / "apt-cacher-ng"
    logs = paths.logs / "apt-cacher-ng"
    for d in (conf, cache, logs, paths.run):
        d.mkdir(parents=True, exist_ok=True)
    (conf / "acng.conf").write_text(ACNG_CONF.format(
        cache=cache, logs=logs, support=SUPPORT_DIR, port=APT_PROXY_PORT, address=BRIDGE_ADDRESS,
        socket=paths.run / "apt-cacher-ng.socket", pidfile=paths.run / "apt-cacher-ng.own-pid"))
    return start_daemon(["apt-cacher-ng", "-c", str(conf)], _pidfile(paths), paths.logs / "apt-cacher-ng.out")


def stop_proxy(paths: RigPaths) -> bool:
    """Stop the proxy; True if it was running."""
    return stop_daemon(_pidfile(paths))


def proxy_pid(paths: RigPaths) -> int | None:
    """Pid of the running proxy, or None."""
    return read_pid(_pidfile(paths))
