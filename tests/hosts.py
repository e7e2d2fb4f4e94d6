"""Hosts on this machine for multi-host tests: network namespaces joined by a bridge.

:func:`network` creates, in the root namespace, a bridge holding the first address of a private
``/24`` and, per host, a network namespace with its loopback up and an address on that subnet,
joined to the bridge by a veth pair. Traffic goes only between the namespaces and the bridge:
no default route in a namespace, no NAT, no forwarding (nothing is enabled). What the hosts share
(PostgreSQL, Redis, the fake vendors) listens on the bridge's address in the root namespace, and
the root namespace reaches each host's address over the bridge; a host's processes run under
``ip netns exec`` (:meth:`Host.command`).

Every name carries this process's id (``infrai-h1-<pid>``, bridge ``ibr<pid>``), so a run that
crashed cannot block the next (and the next run deletes what a dead run left: :func:`_sweep`).
On exit every process still in a namespace is killed, then the namespaces (with their veths)
and the bridge are deleted — also when the test failed. Needs root and iproute2 (``ip``:
``scripts/install_test_tools.sh``).

:func:`redis_server` is a plain Redis (no cluster) on a given address, for what does not speak
Cluster (Django's cache, the channel layer, Celery's broker).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from config.services import free_port, pid_alive

# The /24s tried, from one derived from the pid on: 10.200.0.0/16 … 10.249.255.0/24.
_FIRST_NET, _NETS = int(ipaddress.IPv4Address("10.200.0.0")) >> 8, 50 * 256
_NAMESPACE = re.compile(r"^infrai-h\d+-(\d+)$")
_BRIDGE = re.compile(r"^ibr(\d+)$")


@dataclass(frozen=True)
class Host:
    """One host: a network namespace and its address on the bridge."""

    name: str
    address: str

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *argv]


@dataclass(frozen=True)
class Network:
    """The bridge (its address is the root namespace's on the subnet) and the hosts on it."""

    bridge: str
    address: str
    subnet: ipaddress.IPv4Network
    hosts: tuple[Host, ...]


def ip(*args: str) -> str:
    """``ip args…``'s output (raises with its error when it fails)."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def _subnet() -> ipaddress.IPv4Network:
    """A /24 of 10.200.0.0–10.249.255.255 that no address of the root namespace is in."""
    taken = [
        ipaddress.ip_interface(line.split()[3]).network
        for line in ip("-4", "-o", "addr", "show").splitlines()
    ]
    for step in range(_NETS):
        n = _FIRST_NET + (os.getpid() + step) % _NETS
        net = ipaddress.IPv4Network((n << 8, 24))
        if not any(net.overlaps(t) for t in taken):
            return net
    raise RuntimeError("no free /24 in 10.200.0.0–10.249.255.255")


def _namespace_pids(name: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", name], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()]


def _kill_namespace(name: str) -> None:
    """Kill what still runs in namespace ``name`` (SIGKILL), then delete it (its veth end goes
    with it, and so does the peer in the root namespace)."""
    for _ in range(3):
        pids = _namespace_pids(name)
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _sweep() -> None:
    """Delete the namespaces and bridges of runs whose process is gone (a crashed run)."""
    for line in ip("netns", "list").splitlines():
        name = line.split()[0] if line.strip() else ""
        if (m := _NAMESPACE.match(name)) and not pid_alive(int(m.group(1))):
            _kill_namespace(name)
    for line in ip("-o", "link", "show", "type", "bridge").splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if (m := _BRIDGE.match(name)) and not pid_alive(int(m.group(1))):
            subprocess.run(["ip", "link", "del", name], capture_output=True)


@contextlib.contextmanager
def network(count: int = 2) -> Iterator[Network]:
    """``count`` hosts (``infrai-h1-<pid>`` …, addresses .2, .3 …) on a new bridge (address
    .1), all deleted on exit with every process left in them."""
    if shutil.which("ip") is None:
        raise RuntimeError("iproute2's ip is missing: run scripts/install_test_tools.sh")
    if os.geteuid() != 0:
        raise RuntimeError("network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    _sweep()
    pid = os.getpid()
    subnet = _subnet()
    address = str(subnet.network_address + 1)
    bridge = f"ibr{pid}"
    hosts = tuple(
        Host(f"infrai-h{n}-{pid}", str(subnet.network_address + 1 + n)) for n in range(1, count + 1)
    )
    try:
        ip("link", "add", bridge, "type", "bridge")
        ip("addr", "add", f"{address}/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        for n, host in enumerate(hosts, 1):
            ip("netns", "add", host.name)
            outside = f"ih{n}v{pid}"
            ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", host.name)
            ip("link", "set", outside, "master", bridge)
            ip("link", "set", outside, "up")
            ip("-n", host.name, "link", "set", "lo", "up")
            ip("-n", host.name, "addr", "add", f"{host.address}/24", "dev", "eth0")
            ip("-n", host.name, "link", "set", "eth0", "up")
        yield Network(bridge=bridge, address=address, subnet=subnet, hosts=hosts)
    finally:
        for host in hosts:
            _kill_namespace(host.name)
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)


@contextlib.contextmanager
def redis_server(host: str) -> Iterator[str]:
    """A plain ``redis-server`` on ``host`` (nothing kept on disk); yields its URL (database 0),
    killed and deleted on exit."""
    folder = Path(tempfile.mkdtemp(prefix="infrai-redis-"))
    port = free_port()
    argv = ["redis-server", "--bind", host, "--port", str(port), "--save", "", "--appendonly"]
    argv += ["no", "--dir", str(folder), "--logfile", str(folder / "redis.log")]
    argv += ["--protected-mode", "no"]  # else off loopback it answers only "DENIED"
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            ping = ["redis-cli", "-h", host, "-p", str(port), "PING"]
            if subprocess.run(ping, capture_output=True, text=True).stdout.strip() == "PONG":
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on {host}:{port} did not start")
            time.sleep(0.02)
        yield f"redis://{host}:{port}/0"
    finally:
        proc.kill()
        proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)
