"""Start and stop a real ZooKeeper (standalone or a 3-node ensemble) from the Debian package.

Why this module exists: automatic failover is only as good as its tests, and its
tests must run against the real coordination service (STYLE.md, the kazoo model:
"tests run against a real ZooKeeper"). The cluster launcher, the demo, the
failover benchmark and ``tests/ha`` all need the same thing: a ZooKeeper on free
loopback ports, in a private run directory, that is known to be serving before
anyone connects and that leaves nothing running when stopped.

Theory of operation:

* The server is started as ``java -cp <jars> org.apache.zookeeper.server.quorum.QuorumPeerMain
  <zoo.cfg>`` with a generated ``zoo.cfg``. The jars are found on disk
  (:func:`find_zookeeper_classpath`), never hard-coded to one version.
* ``tickTime`` is small (500 ms by default) so the 2 s session timeouts used by the
  failover controllers are inside ``[minSessionTimeout, maxSessionTimeout]``;
  ``admin.enableServer=false`` avoids the Jetty admin port (8080) clashing
  between runs; the four-letter words ``srvr``/``stat``/``ruok``/``mntr`` are
  whitelisted because readiness is decided by ``srvr``.
* Logging goes through slf4j-simple at WARN into ``<run dir>/zk<N>.log``: quiet,
  and still there when something goes wrong.
* Readiness: a server is ready when ``srvr`` answers with a ``Mode:`` line that is
  ``standalone``, ``leader`` or ``follower`` (a quorum member that has not joined a
  quorum answers "This ZooKeeper instance is not currently serving requests").
* TLS (:class:`ZooKeeperTls`, ``qjournal cluster up --secure``): the client port is
  ZooKeeper 3.5+'s ``secureClientPort`` on the Netty connection factory, PEM key
  store and trust store, ``ssl.clientAuth=need`` (mutual TLS); there is no plain
  client port, and the readiness probe speaks TLS with a client certificate. The
  Debian package's jar manifest does not name ``netty-codec`` (nor
  ``netty-resolver``), which the TLS handler needs: the classpath adds them when
  present. The quorum ports (ensembles of 3) stay plain on loopback.

Invariants:

1. Every server this module starts is recorded (pid file + :class:`ZooKeeperServer`)
   before :meth:`ZooKeeperEnsemble.start` waits on it, so a failed start still stops it.
2. :meth:`ZooKeeperEnsemble.stop` returns only when no started server process is alive.
3. Ports come from the kernel (bind to port 0) and are checked free again right
   before writing ``zoo.cfg``.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import socket
import ssl
import subprocess
import time
from dataclasses import asdict, dataclass, field

from qjournal.errors import ConfigError, QJournalError
from qjournal.util.fs import atomic_write
from qjournal.util.proc import pid_alive, read_last_lines  # pid_alive: re-exported, tests import it from here

__all__ = [
    "ZooKeeperError", "ZooKeeperServer", "ZooKeeperEnsemble", "ZooKeeperTls", "find_zookeeper_classpath",
    "four_letter_word", "free_ports", "server_mode", "zoo_cfg_text", "server_argv", "LOCAL_ZOO_CFG",
]

#: directories searched for the ZooKeeper jars, in order ($QJOURNAL_ZOOKEEPER_HOME first)
DEFAULT_JAR_DIRS = ["/usr/share/zookeeper", "/usr/share/zookeeper/lib", "/usr/share/java",
                    "/usr/lib/zookeeper", "/usr/lib/zookeeper/lib", "/opt/zookeeper/lib"]

MAIN_CLASS = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


class ZooKeeperError(QJournalError):
    """ZooKeeper could not be found, started or stopped (names the run dir / port)."""


def _first_jar(dirs: list[str], patterns: list[str]) -> str | None:
    for d in dirs:
        for pat in patterns:
            hits = sorted(glob.glob(os.path.join(d, pat)))
            if hits:
                return hits[0]
    return None


def find_zookeeper_classpath(extra_dirs: list[str] | None = None) -> list[str]:
    """Locate the jars needed to run a ZooKeeper server.

    Looks in ``$QJOURNAL_ZOOKEEPER_HOME`` (and its ``lib``), ``extra_dirs`` and the usual
    Debian / tarball locations for the server jar, its jute jar, slf4j-api and a
    quiet slf4j binding (slf4j-simple, else slf4j-nop). The Debian jar's manifest
    names its other dependencies, which the JVM then loads from ``/usr/share/java``.

    Args:
        extra_dirs: directories to search before the defaults.

    Returns:
        The jar paths, in classpath order.

    Raises:
        ZooKeeperError: no ZooKeeper server jar (or no slf4j-api) was found.
    """
    dirs: list[str] = list(extra_dirs or [])
    home = os.environ.get("QJOURNAL_ZOOKEEPER_HOME")
    if home:
        dirs += [home, os.path.join(home, "lib")]
    dirs += DEFAULT_JAR_DIRS
    dirs = [d for d in dirs if os.path.isdir(d)]
    server = _first_jar(dirs, ["zookeeper.jar", "zookeeper-3.*[0-9].jar"])
    if server is None:
        raise ZooKeeperError(f"no ZooKeeper server jar (zookeeper.jar / zookeeper-3.*.jar) in {dirs}; "
                             "install the Debian package 'zookeeper' or set QJOURNAL_ZOOKEEPER_HOME")
    jars = [server]
    for patterns, required in ((["zookeeper-jute.jar", "zookeeper-jute-3.*.jar"], False),
                               (["slf4j-api.jar", "slf4j-api-*.jar"], True),
                               (["slf4j-simple.jar", "slf4j-simple-*.jar", "slf4j-nop.jar",
                                 "slf4j-nop-*.jar"], False),
                               (["metrics-core.jar", "metrics-core-*.jar"], False),
                               (["commons-cli.jar", "commons-cli-*.jar"], False),
                               # the TLS client port's handler (not in the Debian manifest)
                               (["netty-codec.jar", "netty-codec-4*.jar"], False),
                               (["netty-resolver.jar", "netty-resolver-4*.jar"], False)):
        jar = _first_jar(dirs, patterns)
        if jar is None and required:
            raise ZooKeeperError(f"no {patterns[0]} found in {dirs} (needed by the ZooKeeper server)")
        if jar is not None:
            jars.append(jar)
    return jars


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """Ask the kernel for ``n`` distinct free TCP ports on ``host``.

    Args:
        n: how many ports.
        host: the interface to bind.

    Returns:
        ``n`` port numbers that were free a moment ago (all sockets are held open
        until every port is chosen, so they are distinct).
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def four_letter_word(host: str, port: int, word: str = "srvr", timeout_s: float = 2.0,
                     ssl_context: ssl.SSLContext | None = None) -> str:
    """Send a ZooKeeper four-letter command and return the whole answer.

    Args:
        host, port: the server's client address.
        word: the command (``srvr``, ``stat``, ``ruok``, ``mntr``).
        timeout_s: socket timeout for connect and each read.
        ssl_context: speak TLS (a secure client port), with this client context.

    Returns:
        The decoded answer ("" if the server closed without answering).

    Raises:
        OSError: connection refused / timed out / TLS refused.
    """
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        s = ssl_context.wrap_socket(raw, server_hostname=host) if ssl_context is not None else raw
        s.sendall(word.encode("ascii"))
        chunks = []
        while True:
            b = s.recv(65536)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode("utf-8", "replace")


def server_mode(host: str, port: int, timeout_s: float = 2.0,
                ssl_context: ssl.SSLContext | None = None) -> str | None:
    """The ``Mode:`` of a server (``standalone``/``leader``/``follower``), or None if not serving
    (``ssl_context``: a secure client port)."""
    try:
        answer = four_letter_word(host, port, "srvr", timeout_s, ssl_context)
    except OSError:
        return None
    for line in answer.splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


#: ``zoo.cfg`` keys of the local ensembles beyond :func:`zoo_cfg_text`'s (small files, no purging: short runs)
LOCAL_ZOO_CFG = {"maxClientCnxns": "0", "autopurge.purgeInterval": "0", "preAllocSize": "4096",
                 "snapCount": "100000"}


def zoo_cfg_text(data_dir: str, client_port: int, quorum: list[tuple[int, str, int, int]], *,
                 tick_time_ms: int = 500, min_session_timeout_ms: int | None = None,
                 max_session_timeout_ms: int | None = None, client_address: str | None = None,
                 tls: "ZooKeeperTls | None" = None, extra: dict[str, str] | None = None) -> str:
    """The ``zoo.cfg`` of one server: the one place that knows what qjournal's ZooKeepers need.

    Args:
        data_dir: ``dataDir`` (snapshots, the transaction log, ``myid``).
        client_port: the client port (the secure one when ``tls``).
        quorum: ``(server id, host, quorum port, election port)`` of every member; empty for a
            standalone server.
        tick_time_ms: ``tickTime`` (sessions may last 2 to 20 ticks unless min/max say otherwise).
        min_session_timeout_ms / max_session_timeout_ms: the session bounds (None: ZooKeeper's).
        client_address: the address the client port binds (None: every address of the host).
        tls: mutual TLS on the client port (the only client port then).
        extra: more keys, written last, sorted.

    Returns:
        The file's text.
    """
    port_key = "secureClientPort" if tls else "clientPort"
    lines = [f"tickTime={tick_time_ms}", "initLimit=20", "syncLimit=10", f"dataDir={data_dir}",
             f"{port_key}={client_port}"]
    if client_address is not None:
        lines.append(f"{port_key}Address={client_address}")
    if min_session_timeout_ms is not None:
        lines.append(f"minSessionTimeout={min_session_timeout_ms}")
    if max_session_timeout_ms is not None:
        lines.append(f"maxSessionTimeout={max_session_timeout_ms}")
    # no Jetty admin port (8080 clashes); readiness and status are decided by srvr
    lines += ["admin.enableServer=false", "4lw.commands.whitelist=srvr,stat,ruok,mntr,cons"]
    lines += [f"{k}={v}" for k, v in sorted((extra or {}).items())]
    lines += tls.config_lines() if tls else []
    lines += [f"server.{sid}={host}:{qp}:{ep}" for sid, host, qp, ep in quorum]
    return "\n".join(lines) + "\n"


def server_argv(cfg_path: str, heap_mb: int, log_dir: str) -> list[str]:
    """The command line of one ZooKeeper server (``java ... QuorumPeerMain <zoo.cfg>``): the local
    ensembles and the ``qjournal zookeeper server`` of a deployment start the same one.

    Raises:
        ZooKeeperError: no ZooKeeper jars (:func:`find_zookeeper_classpath`).
    """
    cp = ":".join(find_zookeeper_classpath())
    return ["java", f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            f"-Dzookeeper.log.dir={log_dir}",
            "-cp", cp, MAIN_CLASS, cfg_path]


@dataclass(frozen=True)
class ZooKeeperTls:
    """Mutual TLS on the client port (module docstring). PEM files.

    Attributes:
        keystore: the server's private key followed by its certificate.
        truststore: the CA bundle client certificates must chain to.
        client_cert / client_key: a client identity for the readiness probe.
    """

    keystore: str
    truststore: str
    client_cert: str
    client_key: str

    def client_context(self) -> ssl.SSLContext:
        """A client context for probes (the server is checked against the trust store)."""
        ctx = ssl.create_default_context(cafile=self.truststore)
        ctx.load_cert_chain(self.client_cert, self.client_key)
        return ctx

    def config_lines(self) -> list[str]:
        """The ``zoo.cfg`` lines of a secure client port."""
        return ["serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
                f"ssl.keyStore.location={self.keystore}", "ssl.keyStore.type=PEM",
                f"ssl.trustStore.location={self.truststore}", "ssl.trustStore.type=PEM",
                "ssl.clientAuth=need"]


@dataclass
class ZooKeeperServer:
    """One ZooKeeper server process of an ensemble."""

    server_id: int
    client_port: int
    quorum_port: int
    election_port: int
    data_dir: str
    cfg_path: str
    log_path: str
    pid_path: str
    proc: subprocess.Popen | None = None
    pid: int | None = None

    def alive(self) -> bool:
        """True while the server process exists (and is not a zombie)."""
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and pid_alive(self.pid)


@dataclass
class ZooKeeperEnsemble:
    """A standalone ZooKeeper (``size=1``) or an ensemble of three on loopback.

    Usage::

        zk = ZooKeeperEnsemble(run_dir, size=3)
        zk.start()            # returns when every server is serving
        zk.connect_string     # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        zk.kill(zk.leader_id())
        zk.stop()
    """

    run_dir: str
    size: int = 1
    tick_time_ms: int = 500
    min_session_timeout_ms: int = 1000
    max_session_timeout_ms: int = 60000
    heap_mb: int = 128
    host: str = "127.0.0.1"
    servers: list[ZooKeeperServer] = field(default_factory=list)
    #: mutual TLS on the client port (None: plain)
    tls: ZooKeeperTls | None = None

    def __post_init__(self) -> None:
        if self.size not in (1, 3, 5):
            raise ConfigError(f"ZooKeeper ensemble size must be 1, 3 or 5, got {self.size}")
        self.run_dir = os.path.abspath(self.run_dir)

    # ------------------------------------------------------------------ config
    @property
    def connect_string(self) -> str:
        """The ``ha.zookeeper.quorum`` value for this ensemble."""
        return ",".join(f"{self.host}:{s.client_port}" for s in self.servers)

    def _write_configs(self) -> None:
        os.makedirs(self.run_dir, exist_ok=True)
        ports = free_ports(3 * self.size, self.host)
        self.servers = []
        for i in range(self.size):
            sid = i + 1
            data_dir = os.path.join(self.run_dir, f"zk{sid}")
            os.makedirs(data_dir, exist_ok=True)
            self.servers.append(ZooKeeperServer(
                server_id=sid, client_port=ports[3 * i], quorum_port=ports[3 * i + 1],
                election_port=ports[3 * i + 2], data_dir=data_dir,
                cfg_path=os.path.join(self.run_dir, f"zk{sid}.cfg"),
                log_path=os.path.join(self.run_dir, f"zk{sid}.log"),
                pid_path=os.path.join(self.run_dir, f"zk{sid}.pid")))
        quorum = [(o.server_id, self.host, o.quorum_port, o.election_port) for o in self.servers] \
            if self.size > 1 else []
        for s in self.servers:
            text = zoo_cfg_text(s.data_dir, s.client_port, quorum, tick_time_ms=self.tick_time_ms,
                                min_session_timeout_ms=self.min_session_timeout_ms,
                                max_session_timeout_ms=self.max_session_timeout_ms, client_address=self.host,
                                tls=self.tls, extra=LOCAL_ZOO_CFG)
            if quorum:
                with open(os.path.join(s.data_dir, "myid"), "w") as f:
                    f.write(f"{s.server_id}\n")
            with open(s.cfg_path, "w") as f:
                f.write(text)

    def _argv(self, s: ZooKeeperServer) -> list[str]:
        return server_argv(s.cfg_path, self.heap_mb, self.run_dir)

    # ------------------------------------------------------------------ lifecycle
    def start(self, ready_timeout_s: float = 30.0) -> None:
        """Write the configs, start every server and wait until all serve.

        Args:
            ready_timeout_s: deadline for the whole ensemble to answer ``srvr`` with a mode.

        Raises:
            ZooKeeperError: a server exited or the deadline passed (the log tail is in
                the message); every started server is stopped first.
        """
        self._write_configs()
        try:
            for s in self.servers:
                self._spawn(s)
            self.wait_ready(ready_timeout_s)
        except BaseException:
            self.stop()
            raise

    def _spawn(self, s: ZooKeeperServer) -> None:
        log = open(s.log_path, "ab")
        try:
            s.proc = subprocess.Popen(self._argv(s), stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, cwd=self.run_dir,
                                      start_new_session=True)
        finally:
            log.close()
        s.pid = s.proc.pid
        with open(s.pid_path, "w") as f:  # invariant 1
            f.write(f"{s.pid}\n")
        self._write_state()

    def wait_ready(self, timeout_s: float = 30.0, server_ids: list[int] | None = None) -> None:
        """Wait until the given servers (default: all alive ones) answer ``srvr`` with a mode.

        Raises:
            ZooKeeperError: a server died or the deadline passed.
        """
        deadline = time.monotonic() + timeout_s
        wanted = [s for s in self.servers if server_ids is None or s.server_id in server_ids]
        pending = list(wanted)
        while pending:
            for s in list(pending):
                if not s.alive():
                    raise ZooKeeperError(f"ZooKeeper server {s.server_id} (client port {s.client_port}) "
                                         f"exited before serving{_tail(s.log_path)}")
                if self.mode(s, timeout_s=1.0) is not None:
                    pending.remove(s)
            if not pending:
                return
            if time.monotonic() > deadline:
                ids = [s.server_id for s in pending]
                raise ZooKeeperError(f"ZooKeeper servers {ids} in {self.run_dir} not serving after "
                                     f"{timeout_s}s{_tail(pending[0].log_path)}")
            time.sleep(0.05)  # polling interval of a readiness probe, not synchronisation

    def mode(self, s: ZooKeeperServer, timeout_s: float = 2.0) -> str | None:
        """:func:`server_mode` of one server (over TLS when the client port is secure)."""
        ctx = self.tls.client_context() if self.tls is not None else None
        return server_mode(self.host, s.client_port, timeout_s, ctx)

    def server(self, server_id: int) -> ZooKeeperServer:
        """The server with this id. Raises KeyError if there is none."""
        for s in self.servers:
            if s.server_id == server_id:
                return s
        raise KeyError(f"no ZooKeeper server {server_id} in {self.run_dir}")

    def leader_id(self) -> int | None:
        """The id of the server whose mode is ``leader`` (or ``standalone``), or None."""
        for s in self.servers:
            if s.alive() and self.mode(s) in ("leader", "standalone"):
                return s.server_id
        return None

    def kill(self, server_id: int, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` (default SIGKILL) to one server and, for SIGKILL/SIGTERM, wait for its exit."""
        s = self.server(server_id)
        if s.pid is None or not s.alive():
            return
        try:
            os.kill(s.pid, sig)
        except ProcessLookupError:
            return
        if sig in (signal.SIGKILL, signal.SIGTERM):
            _wait_dead(s, 15.0)

    def pause(self, server_id: int) -> None:
        """SIGSTOP a server: its clients lose their connection (SUSPENDED) but not yet their session."""
        self.kill(server_id, signal.SIGSTOP)

    def resume(self, server_id: int) -> None:
        """SIGCONT a paused server."""
        self.kill(server_id, signal.SIGCONT)

    def restart(self, server_id: int, ready_timeout_s: float = 30.0) -> None:
        """Start a stopped server again on the same ports and data dir and wait for it to serve."""
        s = self.server(server_id)
        if s.alive():
            self.kill(server_id)
        self._spawn(s)
        self.wait_ready(ready_timeout_s, [server_id])

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every server (SIGTERM, then SIGKILL after ``timeout_s``); returns when none is alive."""
        for s in self.servers:
            if s.pid is not None and s.alive():
                for sig in (signal.SIGCONT, signal.SIGTERM):
                    try:
                        os.kill(s.pid, sig)
                    except ProcessLookupError:
                        break
        for s in self.servers:
            if s.pid is not None and not _wait_dead(s, timeout_s):
                try:
                    os.kill(s.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                _wait_dead(s, timeout_s)
            if s.alive():  # invariant 2
                raise ZooKeeperError(f"ZooKeeper server {s.server_id} pid {s.pid} survived SIGKILL")
            try:
                os.unlink(s.pid_path)
            except FileNotFoundError:
                pass
        self._write_state(stopped=True)

    # ------------------------------------------------------------------ state file
    @property
    def state_path(self) -> str:
        return os.path.join(self.run_dir, "zookeeper.json")

    def _write_state(self, stopped: bool = False) -> None:
        state = {"connect_string": self.connect_string, "size": self.size, "stopped": stopped,
                 "tls": asdict(self.tls) if self.tls is not None else None,
                 "servers": [{"id": s.server_id, "client_port": s.client_port,
                              "quorum_port": s.quorum_port, "election_port": s.election_port,
                              "pid": s.pid, "cfg": s.cfg_path, "log": s.log_path,
                              "data_dir": s.data_dir, "pid_file": s.pid_path}
                             for s in self.servers]}
        atomic_write(self.state_path, json.dumps(state, indent=1).encode(), sync=False)

    @classmethod
    def from_state(cls, run_dir: str) -> "ZooKeeperEnsemble":
        """Rebuild the handle of an ensemble started by another process (``qjournal zookeeper stop``).

        Raises:
            ZooKeeperError: no readable ``zookeeper.json`` in ``run_dir``.
        """
        path = os.path.join(os.path.abspath(run_dir), "zookeeper.json")
        try:
            with open(path) as f:
                state = json.load(f)
        except (OSError, ValueError) as e:
            raise ZooKeeperError(f"no ZooKeeper state in {path}: {e}") from e
        ens = cls(run_dir, size=state["size"],
                  tls=ZooKeeperTls(**state["tls"]) if state.get("tls") else None)
        for d in state["servers"]:
            ens.servers.append(ZooKeeperServer(
                server_id=d["id"], client_port=d["client_port"], quorum_port=d["quorum_port"],
                election_port=d["election_port"], data_dir=d["data_dir"], cfg_path=d["cfg"],
                log_path=d["log"], pid_path=d["pid_file"], pid=d["pid"]))
        return ens


def _wait_dead(s: ZooKeeperServer, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while s.alive():
        if s.proc is not None:
            try:
                s.proc.wait(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        else:
            time.sleep(0.05)  # not our child: poll /proc
        if time.monotonic() > deadline:
            return not s.alive()
    return True


def _tail(path: str, lines: int = 15) -> str:
    try:
        text = read_last_lines(path, lines)
    except OSError:
        return ""
    return "\n--- " + path + " ---\n" + "\n".join(text)
