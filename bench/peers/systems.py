"""The systems the peer benchmark drives: qjournal, etcd and ZooKeeper, each started here on loopback.

Why: a comparison with etcd and ZooKeeper means something only when they run on the same machine, in the same run,
driven by load generators of the same design as qjournal's own (Python asyncio, one connection per client, one call
in flight per client, or N calls in flight on one connection for the "pipelined" rows). Each system is started with
its durable defaults as shipped:

* qjournal: three JournalNode processes and one NameNode process whose edits dir is the quorum journal
  (``dfs.namenode.edits.dir = qjournal://...``): a create is answered after its edit is fsynced on two of three.
* etcd (Debian ``etcd-server``): a three-member cluster; etcd fsyncs its WAL before a put is answered (no
  ``--unsafe-no-fsync``).
* ZooKeeper (Debian ``zookeeper``): a three-server ensemble from qjournal's own ``ZooKeeperEnsemble``
  (``forceSync=yes`` is ZooKeeper's default: the transaction log is fsynced before a create is answered).

``QuorumLog`` is qjournal's bare quorum log on the qjournal system's JournalNodes, written by ``qjm_writer.py`` in a
process of its own (``run(seconds, value)`` answers the latencies and the writer's CPU).

Each driver has the same shape: ``connect(n)`` opens n clients, ``op(i, seq, value)`` does one durable write on
client i, ``close()``; ``pids()`` names the server processes whose CPU the benchmark reports.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from typing import Any

from qjournal.ha.zookeeper import ZooKeeperEnsemble, free_ports
from qjournal.namenode.dfs_client import DFSClient
from qjournal.util.proc import qjournal_argv, start_daemon


def wait_port(port: int, deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if time.monotonic() > end:
                raise TimeoutError(f"{what} did not listen on 127.0.0.1:{port} within {deadline_s:.0f} s")
            time.sleep(0.05)


def user_sys_s(pid: int) -> tuple[float, float]:
    """(utime, stime) of a process in seconds, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (0 once it is gone)."""
    try:
        return sum(user_sys_s(pid))
    except OSError:
        return 0.0


def rss_bytes(pid: int) -> int:
    """Resident memory of a process (``VmRSS`` of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


class QJournal:
    """Three JournalNodes and a NameNode writing through them; an op is ``create`` of an empty file."""

    name = "qjournal"

    def __init__(self, root: str) -> None:
        self.root = os.path.join(root, "qjournal")
        os.makedirs(self.root)
        self.daemons: list[Any] = []
        self.clients: list[DFSClient] = []
        self.addr: tuple[str, int] = ("", 0)
        #: extra ``-D`` options of the NameNode, and a step run on its formatted name dir before it starts
        self.nn_opts: list[str] = []
        self.before_nn_start: Any = None

    async def start(self) -> None:
        from qjournal.config import Configuration
        from qjournal.namenode.format import format_namenode
        quiet = ["-D", "qjournal.log.json=false", "-D", "qjournal.log.level=WARNING"]
        for i in range(3):
            self.daemons.append(start_daemon(
                f"jn{i}", qjournal_argv(*quiet, "journalnode", "--edits-dir", f"{self.root}/jn{i}",
                                        "--rpc-address", "127.0.0.1:0", "--http-address", "127.0.0.1:0"),
                log_path=f"{self.root}/jn{i}.log"))
        uri = "qjournal://" + ";".join(d.ready["rpc"] for d in self.daemons) + "/peers"
        opts = [*quiet, "-D", f"dfs.namenode.name.dir=file://{self.root}/nn",
                "-D", f"dfs.namenode.edits.dir={uri}", "-D", "qjournal.namenode.superuser=bench",
                "-D", "dfs.namenode.checkpoint.check.period=3600s"]
        conf = Configuration()
        conf.set("dfs.namenode.name.dir", f"file://{self.root}/nn")
        conf.set("dfs.namenode.edits.dir", uri)
        await format_namenode(conf, cluster_id="CID-peers", namespace_id=17, format_shared=False)
        if self.before_nn_start is not None:
            self.before_nn_start(f"{self.root}/nn")
        nn = start_daemon("nn", qjournal_argv(*opts, *self.nn_opts, "namenode", "--rpc-address", "127.0.0.1:0"),
                          log_path=f"{self.root}/nn.log", ready_timeout_s=600.0)
        self.daemons.append(nn)
        host, port = nn.ready["rpc"].rsplit(":", 1)
        self.addr = (host, int(port))

    async def connect(self, n: int, tag: str) -> None:
        self.clients = [DFSClient(addresses=[("nn", *self.addr)], user="bench") for _ in range(n)]
        self.tag = tag
        for i, c in enumerate(self.clients):
            await c.mkdirs(f"/{tag}/c{i}")

    async def op(self, i: int, seq: int, value: bytes) -> None:
        await self.clients[i].create(f"/{self.tag}/c{i}/f{seq}")

    async def close(self) -> None:
        for c in self.clients:
            await c.close()
        self.clients = []

    def pids(self) -> list[int]:
        return [d.pid for d in self.daemons]

    def stop(self) -> None:
        for d in self.daemons:
            d.stop()


class QuorumLog:
    """qjournal's bare quorum log on the qjournal system's JournalNodes: one record per sync, one in flight, written
    by ``qjm_writer.py``, a process of its own on the product's event loop (as the NameNode runs the writer)."""

    name = "qjm-log"

    def __init__(self, qj) -> None:
        self.qj = qj
        self.proc: asyncio.subprocess.Process | None = None
        self.loop_name = "?"

    async def start(self) -> None:
        jns = [d.ready["rpc"] for d in self.qj.daemons[:3]]
        uri = "qjournal://" + ";".join(jns) + "/rawlog"
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "qjm_writer.py"), uri,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            limit=1 << 26)  # an answer is one line holding every commit's latency
        self.loop_name = (await self._answer())["loop"]

    async def _answer(self) -> dict:
        line = await self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"qjm_writer.py exited with status {await self.proc.wait()}")  # type: ignore[union-attr]
        return json.loads(line)

    async def run(self, seconds: float, value: int) -> tuple[list[float], float]:
        """One cell: (latency of every commit, the writer process's CPU seconds)."""
        self.proc.stdin.write(json.dumps({"cmd": "run", "seconds": seconds, "value": value}).encode() + b"\n")  # type: ignore[union-attr]
        got = await self._answer()
        return got["lat"], got["cpu_s"]

    def pids(self) -> list[int]:
        return [d.pid for d in self.qj.daemons[:3]]

    async def shutdown(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            await self.proc.wait()


# ----------------------------------------------------------------------------------- etcd
class Etcd:
    """A three-member etcd cluster; an op is a put of ``value`` under a new key."""

    name = "etcd"

    def __init__(self, root: str) -> None:
        self.root = os.path.join(root, "etcd")
        os.makedirs(self.root)
        self.procs: list[subprocess.Popen] = []
        self.argvs: list[list[str]] = []  # each member's command line (a restart reuses it)
        self.client_ports: list[int] = []
        self.clients: list[Any] = []

    async def start(self) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError("etcd not found: run bench/peers/setup.sh (Debian package etcd-server)")
        ports = free_ports(6)
        peers = [ports[2 * i] for i in range(3)]
        self.client_ports = [ports[2 * i + 1] for i in range(3)]
        cluster = ",".join(f"e{i}=http://127.0.0.1:{peers[i]}" for i in range(3))
        for i in range(3):
            argv = [binary, "--name", f"e{i}", "--data-dir", f"{self.root}/e{i}",
                    "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
                    "--listen-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                    "--advertise-client-urls", f"http://127.0.0.1:{self.client_ports[i]}",
                    "--initial-cluster", cluster, "--initial-cluster-state", "new",
                    "--initial-cluster-token", "qjournal-peers", "--log-level", "warn"]
            log = open(f"{self.root}/e{i}.log", "wb")
            self.argvs.append(argv)
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))
            log.close()
        for p in self.client_ports:
            wait_port(p, 30, "etcd")
        # a put succeeds only once a leader is elected
        import aetcd
        deadline = time.monotonic() + 30
        async with aetcd.Client("127.0.0.1", self.client_ports[0]) as c:
            while True:
                try:
                    await c.put(b"/ready", b"1")
                    return
                except Exception:  # noqa: BLE001 - no leader yet
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)

    async def connect(self, n: int, tag: str) -> None:
        import aetcd
        self.tag = tag.encode()
        # clients spread over the members, as etcd's own benchmark tool does
        self.clients = [aetcd.Client("127.0.0.1", self.client_ports[i % 3]) for i in range(n)]
        for c in self.clients:
            await c.connect()

    async def op(self, i: int, seq: int, value: bytes) -> None:
        await self.clients[i].put(b"/%s/c%d/k%d" % (self.tag, i, seq), value)

    async def close(self) -> None:
        for c in self.clients:
            await c.close()
        self.clients = []

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


# ----------------------------------------------------------------------------------- ZooKeeper
class ZooKeeper:
    """A three-server ensemble; an op is a create of a znode holding ``value``."""

    name = "zookeeper"

    def __init__(self, root: str) -> None:
        self.ensemble = ZooKeeperEnsemble(os.path.join(root, "zookeeper"), size=3, heap_mb=512)
        self.clients: list[Any] = []

    async def start(self) -> None:
        await asyncio.to_thread(self.ensemble.start)

    async def connect(self, n: int, tag: str) -> None:
        import aiozk
        servers = [f"127.0.0.1:{s.client_port}" for s in self.ensemble.servers]
        self.tag = tag
        self.clients = [aiozk.ZKClient(servers[i % 3], session_timeout=30) for i in range(n)]
        for c in self.clients:
            await c.start()
        await self.clients[0].ensure_path(f"/{tag}")
        for i, c in enumerate(self.clients):
            await c.create(f"/{tag}/c{i}")

    async def op(self, i: int, seq: int, value: bytes) -> None:
        await self.clients[i].create(f"/{self.tag}/c{i}/k{seq}", data=value)

    async def close(self) -> None:
        for c in self.clients:
            await c.close()
        self.clients = []

    def pids(self) -> list[int]:
        return [s.pid for s in self.ensemble.servers if s.pid]

    def stop(self) -> None:
        self.ensemble.stop()


SYSTEMS = {"qjournal": QJournal, "etcd": Etcd, "zookeeper": ZooKeeper}
