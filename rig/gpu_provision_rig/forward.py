"""TCP forwarder from a loopback address to one rig node: the controller's only way to reach a node.

Run as ``python -m gpu_provision_rig.forward LISTEN_ADDR:PORT TARGET_ADDR:PORT --node-pidfile FILE``. It refuses
to listen on anything but 127.0.0.0/8 and to forward to anything outside the rig's two subnets
(:data:`TARGET_SUBNETS`: the nspawn nodes' bridge and the VMs' isolated network). While the node process named by
``--node-pidfile`` is not running it closes every open connection and accepts new ones only to close them, so a
client of a dead node sees the connection end at once instead of waiting on a silent peer.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
from pathlib import Path

from gpu_provision_rig.config import LIBVIRT_SUBNET, SUBNET
from gpu_provision_rig.procs import read_pid

log = logging.getLogger("gpu_provision_rig.forward")

#: The rig's bridge (nspawn nodes) and the isolated libvirt network of its VMs: nothing else is a target.
TARGET_SUBNETS = (SUBNET, LIBVIRT_SUBNET)
CHUNK = 65536
LIVENESS_PERIOD_S = 0.3
CONNECT_TIMEOUT_S = 10.0


class Forwarder:
    """Accepts on the loopback side and pipes bytes both ways to the node while the node is alive."""

    def __init__(self, target: tuple[str, int], node_pidfile: Path | None):
        self.target = target
        self.node_pidfile = node_pidfile
        self.writers: set[asyncio.StreamWriter] = set()

    def node_alive(self) -> bool:
        """Whether the node's process is running (always True without a pid file to watch)."""
        return self.node_pidfile is None or read_pid(self.node_pidfile) is not None

    async def handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        """Serve one client connection."""
        if not self.node_alive():
            client_w.close()
            return
        try:
            node_r, node_w = await asyncio.wait_for(asyncio.open_connection(*self.target), CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            log.info("connect to %s:%d failed: %s", *self.target, exc)
            client_w.close()
            return
        self.writers.update((client_w, node_w))
        try:
            await asyncio.gather(self._pipe(client_r, node_w), self._pipe(node_r, client_w))
        finally:
            for w in (client_w, node_w):
                self.writers.discard(w)
                w.close()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(CHUNK):
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            writer.close()

    async def watch_node(self) -> None:
        """Cut all connections whenever the node is found dead."""
        while True:
            await asyncio.sleep(LIVENESS_PERIOD_S)
            if self.writers and not self.node_alive():
                log.info("node is down: closing %d connection ends", len(self.writers))
                for w in list(self.writers):
                    w.transport.abort()


async def serve(listen: tuple[str, int], target: tuple[str, int], node_pidfile: Path | None) -> None:
    """Forward ``listen`` -> ``target`` until SIGTERM or SIGINT."""
    forwarder = Forwarder(target, node_pidfile)
    server = await asyncio.start_server(forwarder.handle, listen[0], listen[1], reuse_address=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    watcher = asyncio.create_task(forwarder.watch_node())
    log.info("forwarding %s:%d -> %s:%d", *listen, *target)
    async with server:
        await stop.wait()
    watcher.cancel()
    for w in list(forwarder.writers):
        w.transport.abort()


def _endpoint(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of the forwarder daemon."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("listen", type=_endpoint, help="loopback ADDRESS:PORT to listen on")
    parser.add_argument("target", type=_endpoint, help="node ADDRESS:PORT in one of the rig's subnets")
    parser.add_argument("--node-pidfile", type=Path, help="pid file of the node process to watch")
    args = parser.parse_args(argv)
    if not ipaddress.ip_address(args.listen[0]).is_loopback:
        parser.error(f"listen address {args.listen[0]} is not a loopback address")
    if not any(ipaddress.ip_address(args.target[0]) in ipaddress.ip_network(net) for net in TARGET_SUBNETS):
        parser.error(f"target {args.target[0]} is outside the rig's subnets {', '.join(TARGET_SUBNETS)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s forward %(message)s")
    asyncio.run(serve(args.listen, args.target, args.node_pidfile))


if __name__ == "__main__":
    main()
