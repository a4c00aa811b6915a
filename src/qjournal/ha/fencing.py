"""Fencing of an old active NameNode before a new one becomes active.

Why it exists (seed 004, "防止假死引发脑裂"): a NameNode that lost its ZooKeeper
lock may not know it (a long GC pause, a partition). QJM's epochs already stop it
from getting edits accepted by a quorum, but it could still serve stale reads and
believe itself active. So the winner of an election first *fences* the node the
breadcrumb names: gracefully if it answers, forcibly otherwise.

Theory of operation (:func:`fence_old_active`):

1. Graceful: ``transition_to_standby(request_source="zkfc")`` on the old active with
   ``ha.failover-controller.graceful-fence.rpc-timeout.ms``. Success ends fencing.
2. Otherwise the methods of ``dfs.ha.fencing.methods`` (one per line) are tried in
   order until one succeeds:

   * ``shell(<command>)``: ``/bin/sh -c <command>`` with Hadoop's environment
     (``target_host``, ``target_port``, ``target_address``, ``target_nameserviceid``,
     ``target_namenodeid``, plus every ``$target_*`` for the ZKFC address) and a
     timeout (``dfs.ha.fencing.shell.timeout.ms``); exit status 0 = fenced.
   * ``pidfence(<dir>)``: for a cluster on one machine. Reads ``<dir>/<namenode id>.pid``
     (the NameNode's ``--pid-file``), checks that the process is a qjournal
     NameNode, SIGKILLs it and waits for it to be gone. A pid file whose process is
     already dead counts as fenced; a missing pid file does not.
   * ``sshfence([user][:port])``: ``ssh`` to the target host and kill whatever
     listens on the target port (``fuser -k -n tcp``). Fails cleanly with a message
     when no ``ssh`` client is installed.

3. If nothing succeeded, :class:`~qjournal.errors.FencingError` is raised and the
   caller must not become active.

Invariants:

1. Methods are tried in configured order; the first success stops the walk.
2. A method's failure (including a timeout or a missing tool) is reported with the
   method, target and reason, never raised past the walk except as the final
   ``FencingError``.
3. Parsing ``dfs.ha.fencing.methods`` is pure and rejects unknown methods at
   configuration time (``ConfigError``), not at fencing time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from typing import Awaitable, Callable

from qjournal.errors import ConfigError, FencingError, QJournalError
from qjournal.ha.health_monitor import ProxyFactory, tcp_proxy_factory
from qjournal.util.proc import pid_alive, read_cmdline
from qjournal.protocol.protocols import HA_SERVICE

__all__ = ["HATarget", "FenceMethod", "parse_fencing_methods", "fence_old_active",
           "FencingSettings", "run_fence_method", "FENCE_METHODS", "FenceMethodRunner"]

log = logging.getLogger("qjournal.ha.fencing")

FENCE_METHODS = ("shell", "pidfence", "sshfence")


@dataclass(frozen=True)
class HATarget:
    """A NameNode (and its ZKFC) as written into the lock and breadcrumb znodes."""

    nameservice: str
    nn_id: str
    host: str
    port: int
    zkfc_host: str = ""
    zkfc_port: int = 0

    def to_bytes(self) -> bytes:
        """Stable JSON (sorted keys) so equal targets give equal znode data."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "HATarget":
        """Parse znode data.

        Raises:
            FencingError: the data is not a target written by qjournal.
        """
        try:
            d = json.loads(data.decode("utf-8"))
            return cls(nameservice=str(d["nameservice"]), nn_id=str(d["nn_id"]), host=str(d["host"]),
                       port=int(d["port"]), zkfc_host=str(d.get("zkfc_host", "")),
                       zkfc_port=int(d.get("zkfc_port", 0)))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
            raise FencingError(f"unreadable HA target in znode data {data[:200]!r}: {e}") from e

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def env(self) -> dict[str, str]:
        """Hadoop's fencing environment variables for this target."""
        return {"target_host": self.host, "target_port": str(self.port),
                "target_address": self.address, "target_nameserviceid": self.nameservice,
                "target_namenodeid": self.nn_id,
                "target_zkfc_address": f"{self.zkfc_host}:{self.zkfc_port}"}


@dataclass(frozen=True)
class FenceMethod:
    """One line of ``dfs.ha.fencing.methods``."""

    name: str
    arg: str

    def __str__(self) -> str:
        return f"{self.name}({self.arg})"


_METHOD_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(?:\((.*)\))?\s*$", re.S)


def parse_fencing_methods(text: str, key: str = "dfs.ha.fencing.methods") -> list[FenceMethod]:
    """Parse ``dfs.ha.fencing.methods``: one ``name(arg)`` (or bare ``name``) per line.

    Args:
        text: the configured value.
        key: the configuration key, for error messages.

    Returns:
        The methods in order (may be empty: then only graceful fencing is tried).

    Raises:
        ConfigError: a line is malformed, names an unknown method, or ``shell``/``pidfence``
            has no argument.
    """
    out: list[FenceMethod] = []
    for lineno, raw in enumerate((text or "").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _METHOD_RE.match(line)
        if not m:
            raise ConfigError(f"{key} line {lineno}: {line!r} is not name(arg)", key=key)
        name, arg = m.group(1), (m.group(2) or "").strip()
        if name not in FENCE_METHODS:
            raise ConfigError(f"{key} line {lineno}: unknown fencing method {name!r} "
                              f"(known: {', '.join(FENCE_METHODS)})", key=key)
        if name in ("shell", "pidfence") and not arg:
            raise ConfigError(f"{key} line {lineno}: {name} needs an argument", key=key)
        out.append(FenceMethod(name, arg))
    return out


@dataclass
class FencingSettings:
    """Fencing configuration."""

    methods: list[FenceMethod]
    graceful_timeout_ms: int = 5000
    shell_timeout_ms: int = 30000
    pid_wait_ms: int = 10000
    ssh_connect_timeout_ms: int = 30000
    #: ``dfs.ha.fencing.ssh.private-key-files``: each becomes an ``ssh -i`` identity
    ssh_private_key_files: list[str] = field(default_factory=list)
    #: ``qjournal.ha.fencing.ssh.known-hosts-files`` (empty: ssh's defaults)
    ssh_known_hosts_files: list[str] = field(default_factory=list)
    #: ``qjournal.ha.fencing.ssh.strict-host-key-checking``
    ssh_strict_host_key_checking: bool = True
    #: ``ha.failover-controller.graceful-fence.connection.retries``: connect attempts to the
    #: old active beyond the first before graceful fencing gives up
    graceful_connection_retries: int = 1

    @classmethod
    def from_conf(cls, conf) -> "FencingSettings":
        """Read ``dfs.ha.fencing.methods`` and the fencing timeouts.

        Raises:
            ConfigError: malformed methods or durations.
        """
        return cls(methods=parse_fencing_methods(conf.get("dfs.ha.fencing.methods") or ""),
                   graceful_timeout_ms=conf.get_duration_ms(
                       "ha.failover-controller.graceful-fence.rpc-timeout.ms"),
                   shell_timeout_ms=conf.get_duration_ms("dfs.ha.fencing.shell.timeout.ms"),
                   pid_wait_ms=conf.get_duration_ms("dfs.ha.fencing.pidfence.wait.ms"),
                   ssh_connect_timeout_ms=conf.get_duration_ms(
                       "dfs.ha.fencing.ssh.connect-timeout"),
                   ssh_private_key_files=conf.get_list("dfs.ha.fencing.ssh.private-key-files"),
                   ssh_known_hosts_files=conf.get_list("qjournal.ha.fencing.ssh.known-hosts-files"),
                   ssh_strict_host_key_checking=conf.get_bool("qjournal.ha.fencing.ssh.strict-host-key-checking"),
                   graceful_connection_retries=max(0, int(conf.get_int(
                       "ha.failover-controller.graceful-fence.connection.retries"))))


async def graceful_fence(target: HATarget, proxy_factory: ProxyFactory, timeout_ms: int,
                         connection_retries: int = 0) -> str | None:
    """Ask the old active to become standby.

    Args:
        connection_retries: further connect attempts after a failed connect (a refused
            or reset connection); all attempts share one ``timeout_ms`` deadline, so
            retries never lengthen the failover budget. A failed
            ``transition_to_standby`` call is not retried.

    Returns:
        None on success, else the reason it failed.
    """
    proxy = None
    try:
        clock = asyncio.get_running_loop().time
        deadline = clock() + timeout_ms / 1000.0
        for attempt in range(connection_retries + 1):
            try:
                proxy = await asyncio.wait_for(proxy_factory(), max(0.0, deadline - clock()))
                break
            except (QJournalError, OSError, asyncio.TimeoutError) as e:
                if attempt == connection_retries or clock() >= deadline:
                    raise
                log.info("graceful fence of %s: connect attempt %d failed: %s", target.nn_id,
                         attempt + 1, e, extra={"event": "fence_connect_retry", "target": target.nn_id})
        await proxy.call(HA_SERVICE.transition_to_standby, timeout_ms=timeout_ms, request_source="zkfc")
        return None
    except (QJournalError, OSError, asyncio.TimeoutError) as e:
        return f"{type(e).__name__}: {e}"
    finally:
        if proxy is not None:
            try:
                await proxy.close()
            except Exception:
                pass


async def run_fence_method(method: FenceMethod, target: HATarget, settings: FencingSettings) -> str | None:
    """Run one fencing method.

    Returns:
        None if the target is fenced, else the reason the method failed (invariant 2).
    """
    try:
        if method.name == "shell":
            return await _shell_fence(method.arg, target, settings.shell_timeout_ms)
        if method.name == "pidfence":
            return await _pid_fence(method.arg, target, settings.pid_wait_ms)
        if method.name == "sshfence":
            return await _ssh_fence(method.arg, target, settings)
        return f"unknown method {method.name}"
    except asyncio.CancelledError:
        raise
    except Exception as e:
        return f"{type(e).__name__}: {e}"


#: ``(method, target, settings) -> None on success, else the reason``: how a configured method runs
FenceMethodRunner = Callable[[FenceMethod, HATarget, FencingSettings], Awaitable[str | None]]


async def fence_old_active(target: HATarget, settings: FencingSettings,
                           proxy_factory: ProxyFactory | None = None,
                           connect_timeout_ms: int | None = None,
                           run_method: FenceMethodRunner | None = None) -> str:
    """Fence ``target``: graceful transition to standby, then the configured methods.

    Args:
        target: the old active named by the breadcrumb.
        settings: methods and timeouts.
        proxy_factory: how to reach the target's HAServiceProtocol (default: TCP to
            ``target.host:target.port``).
        connect_timeout_ms: connect deadline for the default factory.
        run_method: runs one configured method (default :func:`run_fence_method`, real
            processes; the simulator fences its simulated processes).

    Returns:
        The name of what fenced it: ``"graceful"`` or the method (e.g. ``"pidfence(/run)"``).

    Raises:
        FencingError: nothing succeeded; the message lists every attempt and why it failed.
    """
    factory = proxy_factory or tcp_proxy_factory(
        target.host, target.port, connect_timeout_ms or settings.graceful_timeout_ms)
    run = run_method or run_fence_method
    clock = asyncio.get_running_loop().time
    attempts: list[str] = []
    t0 = clock()
    reason = await graceful_fence(target, factory, settings.graceful_timeout_ms,
                                  settings.graceful_connection_retries)
    if reason is None:
        log.info("fenced %s gracefully", target.nn_id,
                 extra={"event": "fence", "method": "graceful", "target": target.nn_id,
                        "ms": round((clock() - t0) * 1000, 1)})
        return "graceful"
    attempts.append(f"graceful transition_to_standby: {reason}")
    for method in settings.methods:  # invariant 1
        t1 = clock()
        reason = await run(method, target, settings)
        if reason is None:
            log.info("fenced %s with %s", target.nn_id, method,
                     extra={"event": "fence", "method": str(method), "target": target.nn_id,
                            "ms": round((clock() - t1) * 1000, 1)})
            return str(method)
        attempts.append(f"{method}: {reason}")
        log.warning("fencing %s with %s failed: %s", target.nn_id, method, reason)
    raise FencingError(f"could not fence {target.nameservice}/{target.nn_id} at {target.address}: "
                       + "; ".join(attempts), target=target.nn_id, attempts=attempts)


# ---------------------------------------------------------------- methods


async def _shell_fence(command: str, target: HATarget, timeout_ms: int) -> str | None:
    env = dict(os.environ)
    env.update(target.env())
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, env=env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_ms / 1000.0)
    except asyncio.TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        return f"shell command timed out after {timeout_ms} ms"
    if proc.returncode == 0:
        return None
    tail = out.decode("utf-8", "replace").strip()[-300:]
    return f"shell command exited with {proc.returncode}: {tail}"


def _is_namenode_process(pid: int) -> bool:
    argv = read_cmdline(pid)
    if argv is None:
        return False
    return b"namenode" in argv and any(b"qjournal" in a for a in argv)


async def _pid_fence(pid_dir: str, target: HATarget, wait_ms: int) -> str | None:
    path = os.path.join(pid_dir, f"{target.nn_id}.pid")
    try:
        with open(path) as f:
            pid = int(f.read().strip())
    except FileNotFoundError:
        return f"no pid file {path}"
    except (OSError, ValueError) as e:
        return f"unreadable pid file {path}: {e}"
    if not pid_alive(pid):
        return None  # a dead process is fenced
    if not _is_namenode_process(pid):
        return f"pid {pid} from {path} is not a qjournal namenode process; refusing to kill it"
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    except PermissionError as e:
        return f"cannot kill pid {pid}: {e}"
    deadline = time.monotonic() + wait_ms / 1000.0
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return f"pid {pid} still alive {wait_ms} ms after SIGKILL"
        await asyncio.sleep(0.01)  # polling /proc for the exit of a process we do not own
    return None


def ssh_fence_argv(ssh: str, arg: str, target: HATarget, settings: FencingSettings) -> list[str]:
    """The ``ssh`` command line of ``sshfence([user][:port])`` against ``target``.

    Host keys are checked (``StrictHostKeyChecking=yes``, against the configured known_hosts files or
    ssh's own) unless the operator turned it off: a fence "succeeds" only on the host it names, never
    on a machine in the middle that answers for it. ``BatchMode`` keeps ssh from asking anything.
    """
    user, _, port = (arg or "").partition(":")
    argv = [ssh, "-o", "BatchMode=yes",
            "-o", f"StrictHostKeyChecking={'yes' if settings.ssh_strict_host_key_checking else 'no'}",
            "-o", f"ConnectTimeout={max(1, settings.ssh_connect_timeout_ms // 1000)}"]
    if settings.ssh_known_hosts_files:
        argv += ["-o", "UserKnownHostsFile=" + " ".join(settings.ssh_known_hosts_files),
                 "-o", "GlobalKnownHostsFile=/dev/null"]
    elif not settings.ssh_strict_host_key_checking:
        argv += ["-o", "UserKnownHostsFile=/dev/null"]
    if port:
        argv += ["-p", port]
    for key_file in settings.ssh_private_key_files:
        argv += ["-i", key_file, "-o", "IdentitiesOnly=yes"]
    argv += [f"{user}@{target.host}" if user else target.host,
             f"fuser -k -n tcp {int(target.port)} || ! fuser -n tcp {int(target.port)}"]
    return argv


async def _ssh_fence(arg: str, target: HATarget, settings: FencingSettings) -> str | None:
    ssh = shutil.which("ssh")
    if ssh is None:
        return "no ssh client installed on this machine"
    argv = ssh_fence_argv(ssh, arg, target, settings)
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(),
                                        (settings.ssh_connect_timeout_ms + settings.shell_timeout_ms) / 1000)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        return "ssh timed out"
    if proc.returncode == 0:
        return None
    text = out.decode("utf-8", "replace").strip()
    if "Host key verification failed" in text or "REMOTE HOST IDENTIFICATION HAS CHANGED" in text:
        files = " ".join(settings.ssh_known_hosts_files) or "ssh's known_hosts files"
        return (f"ssh refused the host key of {target.host}: it is unknown or changed in {files} "
                f"(qjournal.ha.fencing.ssh.known-hosts-files; add the host's key with ssh-keyscan after "
                f"checking it): {text[-200:]}")
    return f"ssh exited with {proc.returncode}: {text[-300:]}"

