"""A real Redis Cluster for tests: three masters, optionally a replica each, on 127.0.0.1 or on
another address of this machine (one that other network namespaces reach: ``tests.hosts``).

:func:`redis_cluster` starts ``redis-server --cluster-enabled yes`` on free ports in a
temporary directory, joins them with ``redis-cli --cluster create … --cluster-yes`` (with
``--cluster-replicas 1`` when replicas are asked for: a master's failover needs one), waits
until every node reports ``cluster_state:ok`` and every master has its replica, and on exit
kills every process it started. The binaries are the distribution's (``redis-server``,
``redis-cli``: ``scripts/install_test_tools.sh``).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from config.services import free_port

# How long a master may stay silent before its replica takes over (redis: cluster-node-timeout).
NODE_TIMEOUT_MS = 1000


@dataclass
class Cluster:
    """A running cluster: its node processes by port, and the URL infrai reads it from."""

    ports: list[int]
    folder: Path
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        """``redis+cluster://HOST:P1,HOST:P2,…`` (every node a seed)."""
        return "redis+cluster://" + ",".join(f"{self.host}:{p}" for p in self.ports)

    def cli(self, port: int, *args: str) -> str:
        """``redis-cli -h host -p port args…``'s output (raises when it fails)."""
        return subprocess.run(
            ["redis-cli", "-h", self.host, "-p", str(port), *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout

    def masters(self) -> dict[int, list[tuple[int, int]]]:
        """The live masters' ports and the slot ranges each serves (``CLUSTER SHARDS`` of a
        live node, so it reflects a failover)."""
        port = next(p for p, proc in self.processes.items() if proc.poll() is None)
        masters: dict[int, list[tuple[int, int]]] = {}
        for line in self.cli(port, "CLUSTER", "NODES").splitlines():
            parts = line.split()
            flags = parts[2].split(",")
            if "master" in flags and "fail" not in flags and "fail?" not in flags:
                slots = [s for s in parts[8:] if not s.startswith("[")]
                if slots:
                    ranges = [tuple(int(x) for x in (s.split("-") * 2)[:2]) for s in slots]
                    masters[int(parts[1].split(":")[1].split("@")[0])] = ranges  # type: ignore[misc]
        return masters

    def master_of(self, slot: int) -> int:
        """The port of the master serving ``slot`` now."""
        for port, ranges in self.masters().items():
            if any(lo <= slot <= hi for lo, hi in ranges):
                return port
        raise LookupError(f"no master serves slot {slot}")

    def kill(self, port: int) -> None:
        """Kill the node on ``port`` (SIGKILL: no goodbye to the others)."""
        proc = self.processes[port]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def wait_ok(self, *, seconds: float = 30.0) -> None:
        """Until every live node says ``cluster_state:ok`` (raises after ``seconds``)."""
        deadline = time.monotonic() + seconds
        while True:
            live = [p for p, proc in self.processes.items() if proc.poll() is None]
            if all("cluster_state:ok" in self.cli(p, "CLUSTER", "INFO") for p in live):
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the cluster did not reach cluster_state:ok")
            time.sleep(0.1)

    def error_counts(self) -> dict[str, int]:
        """``INFO errorstats`` summed over the live nodes: ``{"CROSSSLOT": 2, …}``."""
        counts: dict[str, int] = {}
        for port, proc in self.processes.items():
            if proc.poll() is not None:
                continue
            for line in self.cli(port, "INFO", "errorstats").splitlines():
                if line.startswith("errorstat_"):
                    name, _, rest = line.removeprefix("errorstat_").partition(":count=")
                    counts[name] = counts.get(name, 0) + int(rest.strip())
        return counts


def _start_node(folder: Path, host: str, port: int) -> subprocess.Popen[bytes]:
    node = folder / str(port)
    node.mkdir()
    argv = ["redis-server", "--port", str(port), "--bind", host, "--dir", str(node)]
    argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
    argv += ["--cluster-node-timeout", str(NODE_TIMEOUT_MS), "--save", "", "--appendonly", "no"]
    argv += ["--enable-debug-command", "yes", "--logfile", str(node / "redis.log")]
    # Off a loopback address Redis answers only "DENIED" without a password: a test's private
    # nodes, reached only from this machine's own namespaces.
    argv += ["--protected-mode", "no"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_ping(host: str, port: int, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        done = subprocess.run(
            ["redis-cli", "-h", host, "-p", str(port), "PING"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if done.stdout.strip() == "PONG":
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"redis-server on port {port} did not start")
        time.sleep(0.02)


@contextmanager
def redis_cluster(*, replicas: bool = False, host: str = "127.0.0.1") -> Iterator[Cluster]:
    """A fresh three-master cluster (with one replica per master when ``replicas``) listening
    on ``host``, torn down on exit. Needs ``redis-server`` and ``redis-cli`` on the PATH."""
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        raise RuntimeError("redis-server / redis-cli missing: run scripts/install_test_tools.sh")
    folder = Path(tempfile.mkdtemp(prefix="infrai-redis-cluster-"))
    ports: list[int] = []
    while len(ports) < (6 if replicas else 3):
        port = free_port()
        if port not in ports and port + 10000 < 65536:  # the cluster bus is port + 10000
            ports.append(port)
    cluster = Cluster(ports=ports, folder=folder, host=host)
    try:
        for port in ports:
            cluster.processes[port] = _start_node(folder, host, port)
        for port in ports:
            _wait_ping(host, port)
        create = ["redis-cli", "--cluster", "create", *[f"{host}:{p}" for p in ports]]
        create += ["--cluster-replicas", "1" if replicas else "0", "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=60)
        cluster.wait_ok()
        if replicas:
            _wait_replicas(cluster)
        yield cluster
    finally:
        for proc in cluster.processes.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_replicas(cluster: Cluster, *, seconds: float = 30.0) -> None:
    """Until each of the three masters has a replica that finished its first sync."""
    deadline = time.monotonic() + seconds
    while True:
        synced = 0
        for port in cluster.ports:
            info = cluster.cli(port, "INFO", "replication")
            if "role:slave" in info and "master_link_status:up" in info:
                synced += 1
        if synced == 3:
            return
        if time.monotonic() > deadline:
            raise TimeoutError("the replicas did not sync")
        time.sleep(0.1)
