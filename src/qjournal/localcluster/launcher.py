"""Local cluster launcher: ZooKeeper, three JournalNodes, two NameNodes, two ZKFCs (and observers) as real processes.

Why it exists: the demo, the failover benchmark, the chaos tests and a developer
trying the system all need the same thing: a complete HA deployment on one
machine, on free loopback ports, with Hadoop-style configuration files, logs and
pid files in one run directory, that can be inspected (``status``), broken
(``kill NAME``), repaired (``restart NAME``) and torn down without leaving a
process behind (``down``).

Theory of operation:

* ``up`` picks every port from the kernel, writes ``<run>/conf/{core-site,hdfs-site}.xml``
  (one configuration for every process; per-process values such as the NameNode id
  and name dir are passed as ``-D`` overrides so clients can share the same conf
  dir), then starts, in dependency order, ZooKeeper -> JournalNodes -> ``namenode
  -format`` (nn1) -> nn1 -> ``namenode -bootstrapStandby`` (nn2) -> nn2 ->
  ``zkfc -formatZK`` (done in-process) -> both ZKFCs, waiting on each daemon's ``READY`` line, and
  finally waits until exactly one NameNode is active.
* ``--observers N`` (HDFS-12943): N more NameNodes (``nn3``, ``nn4``, ...) are
  bootstrapped and started after nn2 and, once a NameNode is active, made
  observers (``transition_to_observer``). They have no ZKFC: observers take no
  part in the election. The client configuration then names the
  ``ObserverReadProxyProvider``, so ``qjournal dfs`` reads go to the observers (without observers it
  names ``ConfiguredFailoverProxyProvider``, so Hadoop's FsShell can use ``webhdfs://ns1/`` with the conf dir).
  ``restart`` of an observer makes it an observer again.
* ``--secure`` (docs/security.md): ``<run>/pki`` holds a throwaway CA and one
  certificate per role on this host (``nn/127.0.0.1``, ``jn/127.0.0.1``,
  ``zkfc/127.0.0.1``, ``zookeeper/127.0.0.1``) plus the administrator's
  (``hdfs``, the NameNodes' superuser, and the identity of the conf dir: what
  ``qjournal dfs``, ``dfsadmin``, ``haadmin``, ``status`` and the demo present).
  Each daemon gets its role's certificate as ``-D`` overrides. The configuration
  turns on mutual TLS for RPC and HTTPS, ``hadoop.security.authorization`` with
  ``<run>/conf/hadoop-policy.xml`` (:data:`SECURE_POLICY`: NameNodes write the
  journal, JournalNodes sync from each other, ZKFCs and the administrator call
  HA, the administrator refreshes and reads ``/jmx``), ZooKeeper's secure client
  port (mutual TLS) and a digest ACL on the HA znodes whose password is in
  ``<run>/pki/zk-auth`` (mode 0600, ``ha.zookeeper.auth = @file``).
* Every started process is recorded in ``<run>/cluster.json`` (argv, pid, log,
  address) *before* the next one starts, so a failed ``up`` can still be torn down.
* Processes are started in their own sessions, so they outlive ``qjournal cluster up``;
  later commands find them through the state file. A pid is only signalled if
  its command line still looks like the process we started (pid reuse guard).

Invariants:

1. ``down`` returns only when no process recorded in the state file is alive
   (it raises :class:`ClusterError` otherwise).
2. The state file is rewritten atomically after every change.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from qjournal.config.conf import Configuration, split_host_port
from qjournal.errors import QJournalError
from qjournal.ha.elector import ElectorSettings, digest_acl_id
from qjournal.ha.zkfc import format_zk
from qjournal.ha.zookeeper import ZooKeeperEnsemble, ZooKeeperTls, free_ports
from qjournal.namenode.dfs_client import CONFIGURED_FAILOVER_PROXY_PROVIDER, OBSERVER_READ_PROXY_PROVIDER
from qjournal.transport import RpcClient, pki
from qjournal.transport.tls import client_context_from_conf
from qjournal.util.fs import atomic_write
from qjournal.util.proc import (kill_after, pid_alive, qjournal_argv, read_cmdline, read_last_lines,
                                start_daemon)
from qjournal.protocol.protocols import HA_SERVICE, ZKFC

__all__ = ["LocalCluster", "ClusterError", "ProcessRecord", "CLUSTER_STATE_FILE"]

CLUSTER_STATE_FILE = "cluster.json"
NAMESERVICE = "ns1"
#: the NameNodes in the election (each with a ZKFC); observers come after them
NN_IDS = ["nn1", "nn2"]
JN_NAMES = ["jn1", "jn2", "jn3"]

#: ``--secure``: the certificate's principal of each role on this host, and the administrator
ROLE_PRINCIPALS = {"namenode": "nn/127.0.0.1", "journalnode": "jn/127.0.0.1", "zkfc": "zkfc/127.0.0.1",
                   "zookeeper": "zookeeper/127.0.0.1"}
ADMIN_USER = "hdfs"
#: ``--secure``: <run>/conf/hadoop-policy.xml (short names by the DEFAULT auth_to_local rule)
SECURE_POLICY = {
    "security.qjournal.service.protocol.acl": "nn",
    "security.interqjournal.service.protocol.acl": "jn",
    "security.client.protocol.acl": "*",
    "security.ha.service.protocol.acl": f"zkfc,{ADMIN_USER}",
    "security.zkfc.protocol.acl": f"zkfc,{ADMIN_USER}",
    "security.namenode.protocol.acl": "nn",
    "security.refresh.policy.protocol.acl": ADMIN_USER,
    "security.refresh.user.mappings.protocol.acl": ADMIN_USER,
    "hadoop.security.instrumentation.requires.admin": "true",
    "dfs.cluster.administrators": ADMIN_USER,
}


class ClusterError(QJournalError):
    """The local cluster could not be started, inspected or stopped (names the process / run dir)."""


@dataclass
class ProcessRecord:
    """One daemon of the cluster as recorded in the state file."""

    name: str
    kind: str                  # zookeeper | journalnode | namenode | zkfc
    argv: list[str]
    log: str
    pid: int | None = None
    address: str = ""
    ready: dict = field(default_factory=dict)

    def alive(self) -> bool:
        return self.pid is not None and pid_alive(self.pid) and _cmdline_matches(self.pid, self.argv)


def _cmdline_matches(pid: int, argv: list[str]) -> bool:
    """Guard against pid reuse: the live process must run our command."""
    cmd = read_cmdline(pid)
    if cmd is None:
        return False
    want = [a.encode() for a in argv if a.startswith(("journalnode", "namenode", "zkfc"))]
    return bool(cmd) and all(w in cmd for w in want)


class LocalCluster:
    """A local HA cluster rooted at ``run_dir``.

    Args:
        run_dir: where configuration, data, logs, pid files and the state file live.
        zk_servers: ZooKeeper ensemble size (1 or 3).
        session_timeout_ms: ``ha.zookeeper.session-timeout.ms`` of the ZKFCs.
        extra_conf: more configuration keys for every process.
        edits_dirs: a NameNode's local edits directory elsewhere than ``<run>/<nn>/edits``
            (e.g. on another disk), by NameNode id.
        out: progress printer (``print`` by default; ``lambda s: None`` to silence).
    """

    def __init__(self, run_dir: str, zk_servers: int = 1, session_timeout_ms: int = 2000,
                 extra_conf: dict[str, str] | None = None, out: Callable[[str], None] = print,
                 edits_dirs: dict[str, str] | None = None, observers: int = 0, secure: bool = False) -> None:
        if not 0 <= observers <= 8:
            raise ClusterError(f"--observers {observers}: between 0 and 8 observers")
        #: NameNode ids started as observers (no ZKFC)
        self.observer_ids = [f"nn{len(NN_IDS) + 1 + i}" for i in range(observers)]
        self.nn_ids = NN_IDS + self.observer_ids
        self.edits_dirs = {nn: os.path.abspath(d) for nn, d in (edits_dirs or {}).items()}
        self.run_dir = os.path.abspath(run_dir)
        self.zk_servers = zk_servers
        self.session_timeout_ms = session_timeout_ms
        self.extra_conf = dict(extra_conf or {})
        self.out = out
        self.conf_dir = os.path.join(self.run_dir, "conf")
        #: ``--secure`` (module docstring); its certificates live in :attr:`pki_dir`
        self.secure = secure
        self.pki_dir = os.path.join(self.run_dir, "pki")
        self.procs: dict[str, ProcessRecord] = {}
        self.zk: ZooKeeperEnsemble | None = None
        self._daemons: dict[str, Any] = {}  # name -> util.proc.Daemon (only in the starting process)
        self._lock = threading.Lock()        # parallel starts share the state file

    # ------------------------------------------------------------------ state file
    @property
    def state_path(self) -> str:
        return os.path.join(self.run_dir, CLUSTER_STATE_FILE)

    def _save(self) -> None:
        with self._lock:
            self._save_locked()

    def _save_locked(self) -> None:
        state = {"run_dir": self.run_dir, "conf_dir": self.conf_dir, "nameservice": NAMESERVICE,
                 "zk_servers": self.zk_servers, "session_timeout_ms": self.session_timeout_ms,
                 "observers": self.observer_ids, "secure": self.secure,
                 "quorum": self.zk.connect_string if self.zk else "",
                 "processes": [vars(p) for p in self.procs.values()]}
        atomic_write(self.state_path, json.dumps(state, indent=1).encode(), sync=False)  # invariant 2

    @classmethod
    def open(cls, run_dir: str, out: Callable[[str], None] = print) -> "LocalCluster":
        """Attach to a cluster started by ``up`` (possibly by another process).

        Raises:
            ClusterError: no state file in ``run_dir``.
        """
        path = os.path.join(os.path.abspath(run_dir), CLUSTER_STATE_FILE)
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError) as e:
            raise ClusterError(f"no cluster state in {path} (run `qjournal cluster up` first): {e}") from e
        c = cls(run_dir, zk_servers=state.get("zk_servers", 1),
                session_timeout_ms=state.get("session_timeout_ms", 2000), out=out,
                observers=len(state.get("observers", [])), secure=bool(state.get("secure")))
        for d in state.get("processes", []):
            c.procs[d["name"]] = ProcessRecord(**d)
        zk_dir = os.path.join(c.run_dir, "zookeeper")
        if os.path.exists(os.path.join(zk_dir, "zookeeper.json")):
            c.zk = ZooKeeperEnsemble.from_state(zk_dir)
        return c

    # ------------------------------------------------------------------ configuration
    def _write_conf(self, ports: dict[str, int]) -> None:
        assert self.zk is not None
        conf = Configuration()
        jn_uri = ";".join(f"127.0.0.1:{ports[f'{jn}.rpc']}" for jn in JN_NAMES)
        values = {
            "dfs.nameservices": NAMESERVICE,
            f"dfs.ha.namenodes.{NAMESERVICE}": ",".join(self.nn_ids),
            "dfs.namenode.shared.edits.dir": f"qjournal://{jn_uri}/{NAMESERVICE}",
            "dfs.ha.automatic-failover.enabled": "true",
            "dfs.ha.fencing.methods": f"pidfence({self.run_dir})\nshell(/bin/true)",
            # RPC tailing from the JournalNodes' edit caches: every 10 ms under load, backing off
            # to 200 ms when idle (docs/performance.md: standby lag)
            "dfs.ha.tail-edits.period": "10ms",
            "dfs.ha.tail-edits.period.backoff-max": "200ms",
            "dfs.ha.tail-edits.in-progress": "true",
            "ha.zookeeper.quorum": self.zk.connect_string,
            "ha.zookeeper.session-timeout.ms": str(self.session_timeout_ms),
            "ha.health-monitor.check-interval.ms": "500",
            "ha.health-monitor.rpc-timeout.ms": "5000",
            "ha.health-monitor.connect-retry-interval.ms": "500",
            "ha.health-monitor.sleep-after-disconnect.ms": "500",
            "ha.failover-controller.graceful-fence.rpc-timeout.ms": "1000",
            "ha.failover-controller.sleep-after-failure-to-become-active.ms": "500",
            "dfs.client.failover.sleep.base.millis": "50",
            "dfs.client.failover.sleep.max.millis": "200",
            "dfs.client.failover.max.attempts": "100",
            "ipc.client.connect.timeout": "1000",
            "qjournal.client.rpc-timeout.ms": "10000",
            # a JournalNode whose directory was lost comes back by itself (docs/operations.md)
            "dfs.journalnode.enable.sync.format": "true",
            "dfs.journalnode.sync.interval": "5s",
        }
        # clients read from the observers if there are any; naming a provider also makes the conf dir
        # usable by Hadoop's own client (webhdfs://ns1/ is a logical URI only with one)
        values[f"dfs.client.failover.proxy.provider.{NAMESERVICE}"] = (
            OBSERVER_READ_PROXY_PROVIDER if self.observer_ids else CONFIGURED_FAILOVER_PROXY_PROVIDER)
        for nn in self.nn_ids:
            values[f"dfs.namenode.rpc-address.{NAMESERVICE}.{nn}"] = f"127.0.0.1:{ports[f'{nn}.rpc']}"
            if f"{nn}.http" in ports:  # two NameNodes on one host: not both on the default 9870
                values[f"dfs.namenode.http-address.{NAMESERVICE}.{nn}"] = f"127.0.0.1:{ports[f'{nn}.http']}"
                values[f"dfs.namenode.https-address.{NAMESERVICE}.{nn}"] = f"127.0.0.1:{ports[f'{nn}.http']}"
            if f"zkfc.{nn}" in ports:
                values[f"dfs.ha.zkfc.rpc-address.{NAMESERVICE}.{nn}"] = f"127.0.0.1:{ports[f'zkfc.{nn}']}"
            if f"zkfc.{nn}.http" in ports:
                values[f"qjournal.zkfc.http-address.{NAMESERVICE}.{nn}"] = f"127.0.0.1:{ports[f'zkfc.{nn}.http']}"
        if self.secure:
            values.update(self._secure_conf())
        values.update(self.extra_conf)
        for k, v in sorted(values.items()):
            conf.set(k, v)
        os.makedirs(self.conf_dir, exist_ok=True)
        conf.write_xml(os.path.join(self.conf_dir, "hdfs-site.xml"))
        Configuration().write_xml(os.path.join(self.conf_dir, "core-site.xml"))
        if self.secure:
            Configuration(SECURE_POLICY).write_xml(os.path.join(self.conf_dir, "hadoop-policy.xml"))

    # ------------------------------------------------------------------ --secure
    def _cert(self, principal: str) -> pki.CertPaths:
        stem = principal.split("/")[0]
        return pki.CertPaths(os.path.join(self.pki_dir, f"{stem}.crt"), os.path.join(self.pki_dir, f"{stem}.key"),
                             os.path.join(self.pki_dir, "ca.crt"))

    def _make_pki(self) -> ZooKeeperTls:
        """The CA, one certificate per role and the administrator's, and ZooKeeper's key store and
        digest credentials (module docstring). Returns ZooKeeper's TLS settings."""
        os.makedirs(self.pki_dir, mode=0o700, exist_ok=True)
        ca = pki.make_ca(self.pki_dir, "ca")
        for principal in [*ROLE_PRINCIPALS.values(), ADMIN_USER]:
            pki.make_cert(self.pki_dir, ca, principal.split("/")[0], cn=principal)
        zk = self._cert(ROLE_PRINCIPALS["zookeeper"])
        keystore = os.path.join(self.pki_dir, "zookeeper-keystore.pem")
        with open(zk.key) as k, open(zk.cert) as c:
            atomic_write(keystore, (k.read() + c.read()).encode(), sync=False)
        password = os.urandom(18).hex()
        auth = os.path.join(self.pki_dir, "zk-auth")
        atomic_write(auth, f"digest:zkfc:{password}\n".encode(), sync=False)
        atomic_write(os.path.join(self.pki_dir, "zk-acl"),
                     f"digest:{digest_acl_id('zkfc', password)}:rwcda\n".encode(), sync=False)
        for name in sorted(os.listdir(self.pki_dir)):
            os.chmod(os.path.join(self.pki_dir, name), 0o600)
        admin = self._cert(ADMIN_USER)
        return ZooKeeperTls(keystore, ca.cert, admin.cert, admin.key)

    def _secure_conf(self) -> dict[str, str]:
        """The keys ``--secure`` adds to the shared configuration (the administrator's identity)."""
        admin = self._cert(ADMIN_USER)
        groups = os.path.join(self.conf_dir, "groups")
        os.makedirs(self.conf_dir, exist_ok=True)
        atomic_write(groups, f"{ADMIN_USER}=supergroup\n".encode(), sync=False)
        return {"qjournal.rpc.tls.enabled": "true", "qjournal.rpc.tls.cert.file": admin.cert,
                "qjournal.rpc.tls.key.file": admin.key, "qjournal.rpc.tls.ca.file": admin.ca,
                "dfs.http.policy": "HTTPS_ONLY", "hadoop.security.authorization": "true",
                "qjournal.namenode.superuser": ADMIN_USER, "qjournal.security.group.mapping.file": groups,
                "ha.zookeeper.acl": f"@{os.path.join(self.pki_dir, 'zk-acl')}",
                "ha.zookeeper.auth": f"@{os.path.join(self.pki_dir, 'zk-auth')}",
                "dfs.ha.zkfc.client.ssl.enabled": "true"}

    def _identity(self, kind: str) -> list[str]:
        """``-D`` overrides giving a daemon (or a tool acting as one) its role's certificate."""
        if not self.secure:
            return []
        c = self._cert(ROLE_PRINCIPALS[kind])
        return ["-D", f"qjournal.rpc.tls.cert.file={c.cert}", "-D", f"qjournal.rpc.tls.key.file={c.key}"]

    def _client_ssl(self) -> Any:
        """The TLS client context of the launcher's own calls (the conf dir's identity), or None."""
        return client_context_from_conf(Configuration.load(self.conf_dir)) if self.secure else None

    def _nn_overrides(self, nn: str) -> list[str]:
        d = os.path.join(self.run_dir, nn)
        edits = self.edits_dirs.get(nn, f"{d}/edits")
        return ["-D", f"dfs.namenode.name.dir=file://{d}/name", "-D", f"dfs.namenode.edits.dir=file://{edits}",
                "-D", f"dfs.ha.namenode.id={nn}", *self._identity("namenode")]

    # ------------------------------------------------------------------ up
    def up(self, ready_timeout_s: float = 60.0, fresh: bool = False) -> None:
        """Start the whole cluster and wait for one active NameNode.

        Args:
            ready_timeout_s: deadline of each daemon's READY line and of the first election.
            fresh: wipe a non-empty run directory of a stopped cluster first.

        Raises:
            ClusterError: a cluster is running in ``run_dir``, the directory holds old data
                and ``fresh`` is false, or a step failed (everything started so far is
                stopped again).
        """
        if os.path.exists(self.state_path):
            try:
                old = LocalCluster.open(self.run_dir, out=lambda s: None)
                if any(p.alive() for p in old.procs.values()):
                    raise ClusterError(f"a cluster is already running in {self.run_dir}; "
                                       "run `qjournal cluster down` first")
            except ClusterError as e:
                if "already running" in str(e):
                    raise
        if os.path.isdir(self.run_dir) and os.listdir(self.run_dir):
            if not os.path.exists(self.state_path):
                raise ClusterError(f"run directory {self.run_dir} is not empty and holds no {CLUSTER_STATE_FILE}; "
                                   "refusing to use (or wipe) it: pick another --run-dir")
            if not fresh:
                raise ClusterError(f"run directory {self.run_dir} is not empty (a previous cluster's data?); "
                                   "remove it or pass fresh=True / --fresh to wipe it")
            shutil.rmtree(self.run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        t0 = time.monotonic()
        try:
            self._up(ready_timeout_s)
        except BaseException:
            self.out("cluster: start-up failed, stopping what was started")
            try:
                self.down()
            except ClusterError as e:
                self.out(f"cluster: {e}")
            raise
        self.out(f"cluster: up in {time.monotonic() - t0:.1f}s (run dir {self.run_dir})")

    def _up(self, ready_timeout_s: float) -> None:
        names = [f"{jn}.{k}" for jn in JN_NAMES for k in ("rpc", "http")] + \
                [f"{nn}.rpc" for nn in self.nn_ids] + [f"zkfc.{nn}{k}" for nn in NN_IDS for k in ("", ".http")] + \
                [f"{nn}.http" for nn in self.nn_ids]
        ports = dict(zip(names, free_ports(len(names))))
        self.out(f"cluster: starting ZooKeeper ({self.zk_servers} server{'s' if self.zk_servers > 1 else ''})")
        tls = self._make_pki() if self.secure else None
        self.zk = ZooKeeperEnsemble(os.path.join(self.run_dir, "zookeeper"), size=self.zk_servers, tls=tls)
        self.zk.start(ready_timeout_s)
        for s in self.zk.servers:
            self.procs[f"zk{s.server_id}"] = ProcessRecord(
                f"zk{s.server_id}", "zookeeper", ["java", "QuorumPeerMain", s.cfg_path], s.log_path, s.pid,
                f"127.0.0.1:{s.client_port}")
        self._save()
        self._write_conf(ports)
        base = ["--conf", self.conf_dir]
        self._start_parallel([(jn, "journalnode", qjournal_argv(
            *base, *self._identity("journalnode"), "journalnode", "--edits-dir", os.path.join(self.run_dir, jn),
            "--rpc-address", f"127.0.0.1:{ports[f'{jn}.rpc']}",
            "--http-address", f"127.0.0.1:{ports[f'{jn}.http']}",
            "--pid-file", os.path.join(self.run_dir, f"{jn}.pid"))) for jn in JN_NAMES], ready_timeout_s)
        self._run_tool("format nn1", qjournal_argv(*base, *self._nn_overrides("nn1"), "namenode", "-format",
                                                   "--nn-id", "nn1", "-clusterid", "qjournal-local"))
        self._start("nn1", "namenode", self._nn_argv("nn1"), ready_timeout_s)
        self._run_tool("bootstrap nn2", qjournal_argv(*base, *self._nn_overrides("nn2"), "namenode",
                                                      "-bootstrapStandby", "--nn-id", "nn2"))
        self._start("nn2", "namenode", self._nn_argv("nn2"), ready_timeout_s)
        for nn in self.observer_ids:
            self._run_tool(f"bootstrap {nn}", qjournal_argv(*base, *self._nn_overrides(nn), "namenode",
                                                            "-bootstrapStandby", "--nn-id", nn))
        self._start_parallel([(nn, "namenode", self._nn_argv(nn)) for nn in self.observer_ids], ready_timeout_s)
        self.out("cluster: format ZooKeeper (zkfc -formatZK)")
        self._format_zk()
        self._start_parallel([(f"zkfc-{nn}", "zkfc", qjournal_argv(
            *base, *self._identity("zkfc"), "zkfc", "--nn-id", nn, "--pid-file", os.path.join(self.run_dir, f"zkfc-{nn}.pid")))
            for nn in NN_IDS], ready_timeout_s)
        active = self.wait_for_active(ready_timeout_s)
        self.out(f"cluster: {active} is active")
        for nn in self.observer_ids:
            self._make_observer(nn)

    def _make_observer(self, nn: str) -> None:
        """``haadmin -transitionToObserver nn`` (no --forcemanual needed: observers are out of the election).

        Raises:
            ClusterError: the NameNode did not answer or refused.
        """
        self.out(f"cluster: {nn} -> observer")
        try:
            _run_async(self._transition_to_observer(self._rec(nn), self._client_ssl()))
        except QJournalError as e:
            raise ClusterError(f"cluster: {nn} could not become an observer: {e}") from e

    @staticmethod
    async def _transition_to_observer(rec: ProcessRecord, ssl: Any, timeout_ms: int = 10000) -> None:
        c = await RpcClient.connect_tcp(*split_host_port(rec.address), connect_timeout_ms=timeout_ms, ssl=ssl)
        try:
            await c.call(HA_SERVICE.transition_to_observer, timeout_ms=timeout_ms, request_source="user")
        finally:
            await c.close()

    def _format_zk(self) -> None:
        """What ``qjournal zkfc -formatZK -force`` does, in-process (saves a process start)."""
        conf = Configuration.load(self.conf_dir)
        format_zk(ElectorSettings.from_conf(conf, NAMESERVICE), force=True)

    def _nn_argv(self, nn: str) -> list[str]:
        return qjournal_argv("--conf", self.conf_dir, *self._nn_overrides(nn), "namenode", "--nn-id", nn,
                             "--pid-file", os.path.join(self.run_dir, f"{nn}.pid"))

    def _start(self, name: str, kind: str, argv: list[str], ready_timeout_s: float = 60.0) -> ProcessRecord:
        log_path = os.path.join(self.run_dir, f"{name}.log")
        self.out(f"cluster: starting {name}")
        rec = ProcessRecord(name, kind, argv, log_path)
        with self._lock:
            self.procs[name] = rec
        try:
            d = start_daemon(name, argv, log_path=log_path, ready_timeout_s=ready_timeout_s)
        except Exception as e:
            self._save()
            raise ClusterError(f"cluster: {name} did not start: {e}") from e
        rec.pid, rec.ready = d.pid, d.ready
        rec.address = str(d.ready.get("rpc", ""))
        self._daemons[name] = d
        self._save()
        return rec

    def _start_parallel(self, specs: list[tuple[str, str, list[str]]], ready_timeout_s: float) -> None:
        """Start independent daemons at once (each still waits for its own READY line)."""
        if not specs:
            return
        with concurrent.futures.ThreadPoolExecutor(len(specs)) as ex:
            futures = [ex.submit(self._start, name, kind, argv, ready_timeout_s) for name, kind, argv in specs]
            errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]

    def _run_tool(self, what: str, argv: list[str], timeout_s: float = 120.0) -> None:
        self.out(f"cluster: {what}")
        log_path = os.path.join(self.run_dir, "tools.log")
        with open(log_path, "ab") as log:
            log.write(f"\n$ {' '.join(argv)}\n".encode())
            log.flush()
            r = subprocess.run(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, timeout=timeout_s)
        if r.returncode != 0:
            with open(log_path, "rb") as f:
                tail = f.read().decode("utf-8", "replace").splitlines()[-15:]
            raise ClusterError(f"cluster: {what} failed with status {r.returncode}:\n" + "\n".join(tail))

    # ------------------------------------------------------------------ inspection
    def nn_states(self) -> dict[str, dict | None]:
        """``get_service_status`` of each NameNode (None if it does not answer)."""
        return _run_async(self._query_all("namenode", HA_SERVICE.get_service_status, {}))

    def zkfc_states(self, events: bool = False) -> dict[str, dict | None]:
        """``get_zkfc_status`` of each ZKFC (None if it does not answer)."""
        return _run_async(self._query_all("zkfc", ZKFC.get_zkfc_status, {"events": events}))

    async def _query_all(self, kind: str, method: str, kwargs: dict) -> dict[str, dict | None]:
        names = sorted(n for n, p in self.procs.items() if p.kind == kind)
        ssl = self._client_ssl()
        results = await asyncio.gather(*(self._query(self.procs[n], method, kwargs, ssl) for n in names))
        return dict(zip(names, results))

    @staticmethod
    async def _query(rec: ProcessRecord, method: str, kwargs: dict, ssl: Any = None,
                     timeout_ms: int = 1500) -> dict | None:
        if not rec.address or not rec.alive():
            return None
        try:
            c = await RpcClient.connect_tcp(*split_host_port(rec.address), connect_timeout_ms=timeout_ms, ssl=ssl)
        except Exception:
            return None
        try:
            return await c.call(method, timeout_ms=timeout_ms, **kwargs)
        except Exception:
            return None
        finally:
            await c.close()

    def active_namenode(self) -> str | None:
        """The id of the NameNode reporting ``active`` (None if none or more than one)."""
        act = [n for n, s in sorted(self.nn_states().items()) if s and s.get("state") == "active"]
        return act[0] if len(act) == 1 else None

    def wait_for_active(self, timeout_s: float, exclude: str | None = None,
                        progress: Callable[[float], None] | None = None) -> str:
        """Wait until exactly one NameNode (other than ``exclude``) is active.

        Raises:
            ClusterError: not within ``timeout_s``.
        """
        t0 = time.monotonic()
        deadline = t0 + timeout_s
        while True:
            act = self.active_namenode()
            if act is not None and act != exclude:
                return act
            if time.monotonic() > deadline:
                raise ClusterError(f"no active NameNode after {timeout_s}s; states: {self.nn_states()}")
            if progress is not None:
                progress(time.monotonic() - t0)
            time.sleep(0.05)  # poll interval of a status probe, not synchronisation

    def status_rows(self) -> list[dict]:
        """One row per process: name, pid, alive, role/HA state, health, last applied txid (NameNodes), address."""
        nn = self.nn_states()
        zkfc = self.zkfc_states()
        rows = []
        for name in self._ordered_names():
            p = self.procs[name]
            alive = p.alive() if p.kind != "zookeeper" else (p.pid is not None and pid_alive(p.pid))
            state, health, txid = "-", "-", None
            if p.kind == "namenode" and nn.get(name):
                state = nn[name]["state"]
                txid = nn[name].get("last_applied_txid")
                if state == "observer":
                    health = "serving reads"
                else:
                    health = "ready" if nn[name].get("ready_to_become_active", True) else \
                        nn[name].get("not_ready_reason", "not ready")
            elif p.kind == "zkfc" and zkfc.get(name):
                z = zkfc[name]
                state, health = z["elector_state"].lower(), z["health"]
            elif p.kind == "zookeeper" and alive and self.zk is not None:
                state = self.zk.mode(self.zk.server(int(name[2:]))) or "not serving"
            elif p.kind == "journalnode" and alive:
                state = "serving"
            rows.append({"name": name, "pid": p.pid, "alive": alive, "state": state, "health": health,
                         "txid": txid, "address": p.address})
        return rows

    def format_status(self) -> str:
        rows = self.status_rows()
        head = f"{'NAME':<10} {'PID':>8} {'ALIVE':<6} {'ROLE/HA STATE':<14} {'HEALTH':<24} {'TXID':>8} ADDRESS"
        lines = [head]
        for r in rows:
            txid = "-" if r.get("txid") is None else str(r["txid"])
            lines.append(f"{r['name']:<10} {str(r['pid'] or '-'):>8} {('yes' if r['alive'] else 'NO'):<6} "
                         f"{r['state']:<14} {r['health']:<24} {txid:>8} {r['address']}")
        return "\n".join(lines)

    def _ordered_names(self) -> list[str]:
        order = {"zookeeper": 0, "journalnode": 1, "namenode": 2, "zkfc": 3}
        return sorted(self.procs, key=lambda n: (order.get(self.procs[n].kind, 9), n))

    # ------------------------------------------------------------------ faults / repair
    def kill(self, name: str, sig: int = signal.SIGKILL, wait_s: float = 10.0) -> int:
        """Send ``sig`` to one process (SIGKILL by default) and wait for it to die.

        Returns:
            The pid signalled.

        Raises:
            ClusterError: unknown name, not running, or still alive after ``wait_s``.
        """
        rec = self._rec(name)
        if rec.kind == "zookeeper":
            if self.zk is None:
                raise ClusterError("no ZooKeeper state")
            self.zk.kill(int(name[2:]), sig)
            return rec.pid or 0
        if not rec.alive():
            raise ClusterError(f"{name} is not running")
        assert rec.pid is not None
        os.kill(rec.pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            d = self._daemons.get(name)
            deadline = time.monotonic() + wait_s
            while pid_alive(rec.pid):
                if d is not None:
                    try:
                        d.proc.wait(timeout=0.05)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    time.sleep(0.02)  # not our child: poll /proc
                if time.monotonic() > deadline:
                    raise ClusterError(f"{name} (pid {rec.pid}) still alive {wait_s}s after signal {sig}")
        return rec.pid

    def restart(self, name: str, ready_timeout_s: float = 60.0) -> ProcessRecord:
        """Start a process again with its recorded command line (killing it first if alive)."""
        rec = self._rec(name)
        if rec.kind == "zookeeper":
            assert self.zk is not None
            self.zk.restart(int(name[2:]), ready_timeout_s)
            s = self.zk.server(int(name[2:]))
            rec.pid = s.pid
            self._save()
            return rec
        if rec.alive():
            self.kill(name, signal.SIGTERM)
        rec = self._start(name, rec.kind, rec.argv, ready_timeout_s)
        if name in self.observer_ids:
            self._make_observer(name)
        return rec

    def logs(self, name: str, lines: int = 50) -> str:
        """The last ``lines`` lines of a process's log."""
        rec = self._rec(name)
        try:
            return "\n".join(read_last_lines(rec.log, lines))
        except OSError as e:
            raise ClusterError(f"cannot read the log of {name} at {rec.log}: {e}") from e

    def _rec(self, name: str) -> ProcessRecord:
        if name not in self.procs:
            raise ClusterError(f"no process {name!r} in the cluster at {self.run_dir}; "
                               f"known: {', '.join(self._ordered_names())}")
        return self.procs[name]

    # ------------------------------------------------------------------ down
    def down(self, timeout_s: float = 15.0) -> None:
        """Stop everything (ZKFCs, NameNodes, JournalNodes, ZooKeeper); verify nothing is left.

        Raises:
            ClusterError: a process survived SIGKILL (invariant 1).
        """
        order = {"zkfc": 0, "namenode": 1, "journalnode": 2}
        names = sorted((n for n, p in self.procs.items() if p.kind != "zookeeper"),
                       key=lambda n: (order.get(self.procs[n].kind, 9), n))
        for group in (0, 1, 2):
            batch = [n for n in names if order.get(self.procs[n].kind) == group]
            for n in batch:
                rec = self.procs[n]
                if rec.alive():
                    try:
                        os.kill(rec.pid, signal.SIGCONT)
                        os.kill(rec.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
            deadline = time.monotonic() + timeout_s
            for n in batch:
                rec = self.procs[n]
                kill_after(rec.pid, rec.alive, deadline, reap=lambda n=n: self._reap(n))
                self._reap(n)
        if self.zk is not None:
            self.zk.stop()
        left = [f"{n} (pid {p.pid})" for n, p in sorted(self.procs.items())
                if p.kind != "zookeeper" and p.alive()]
        if self.zk is not None:
            left += [f"zk{s.server_id} (pid {s.pid})" for s in self.zk.servers if s.alive()]
        if os.path.isdir(self.run_dir):
            self._save()
        if left:
            raise ClusterError(f"processes still running after down: {', '.join(left)}")
        self.out(f"cluster: down; nothing left running from {self.run_dir}")

    def _reap(self, name: str) -> None:
        d = self._daemons.get(name)
        if d is not None:
            try:
                d.proc.wait(timeout=0)
            except subprocess.TimeoutExpired:
                pass


def _run_async(coro) -> Any:
    """Run a coroutine from sync code (also when called from a thread of a running loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()
