"""Hosts as network namespaces: each with its own address, host name, directories and processes.

Why: an operator runs qjournal on five or more machines; a test that wants to show the same has to
give every process a machine of its own: its own address (so nothing can lean on 127.0.0.1), its
own host name (resolved by every other host), its own configuration directory, data and logs (so
nothing can lean on a directory that all processes share), and a network that the next issue can
cut between two hosts. As root, Linux gives all of that without touching the machine's network.

Theory of operation:

* A :class:`Network` has a unique *prefix* per run (``qjh-<hex>``). Its bridge ``br0`` lives in a
  namespace of its own (``<prefix>--bridge``); the machine's own network namespace is never
  touched: no link, route or address is added there. Each :class:`Host` is a namespace
  ``<prefix>-<name>`` with one veth pair: ``eth0`` inside the host with the host's address, the
  other end a port of the bridge. Addresses come from one /24 (``198.18.x.0/24``, the range set
  aside for network tests, RFC 2544); the bridge has no address and no uplink, so no packet ever
  leaves the run's namespaces.
* Names: ``/etc/netns/<ns>/hosts`` lists ``localhost`` and every host of the run with its address
  (``ip netns exec`` bind-mounts it over ``/etc/hosts``); it is rewritten in place (same inode,
  never empty) when a host joins, so running processes resolve the new name. The host name
  (``uname -n``) is a UTS namespace kept in ``/run/qjournal-hosts/<prefix>/<name>.uts``.
* Files: each host has a root directory of its own (``<base>/<name>``); its *private directories*
  (e.g. ``/etc/qjournal``, ``/var/lib/qjournal``) are bind-mounted at their real paths inside every
  command the host runs, and *shared mounts* (e.g. one ``/opt/qjournal`` for every host) likewise.
  So each process sees only its own host's configuration, data and logs, at the paths an operator
  uses. A missing mount point is created on the machine (an empty directory) and removed again by
  the last run that ends.
* Commands: :meth:`Host.argv` wraps a command as ``ip netns exec <ns> nsenter --uts=<file> sh -c
  '<bind mounts>; exec "$@"'``; every step execs, so the pid the caller sees is the command's.
* Clean-up: a run holds an ``flock`` on ``/run/qjournal-hosts/<prefix>.lock`` for its whole life.
  :meth:`Network.close` (call it in ``finally``) kills every process inside the run's namespaces,
  deletes the namespaces (which destroys their links), the ``/etc/netns`` entries, the UTS files
  and the lock. At start, every run first removes what crashed runs left: any ``qjh-`` namespace,
  ``/etc/netns`` entry or state whose lock nobody holds. A run that is alive (its lock held) is
  never touched, so runs may go on side by side (pytest-xdist, another checkout).

Invariants:

1. Nothing is added to the machine's network namespace; every link exists only inside the run's
   namespaces and disappears with them.
2. After :meth:`Network.close` no process of the run is alive and no namespace, ``/etc/netns``
   entry, UTS file or lock of the run exists (it raises :class:`HostsError` otherwise).
3. The run lock is in place (renamed into place while already held) before the first namespace
   is made, so a concurrent clean-up never takes a live run for a crashed one.
"""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import Iterator

from qjournal.errors import QJournalError
from qjournal.util.proc import Daemon, pid_alive, start_daemon

__all__ = ["HostsError", "Network", "Host", "unavailable_reason", "clean_stale", "TAG"]

#: every namespace, /etc/netns entry and state file of this harness starts with it
TAG = "qjh"
STATE_DIR = "/run/qjournal-hosts"
NETNS_DIR = "/run/netns"
ETC_NETNS = "/etc/netns"
#: the range of the hosts' addresses (RFC 2544's network-test range, never routed anywhere)
DEFAULT_SUBNET = "198.18.0.0/24"
#: host addresses start here (the ones below stay unused: issue 28's unanswered next hop)
FIRST_HOST_OCTET = 11
_NAME = re.compile(r"^[a-z][a-z0-9-]{0,19}$")
_BRIDGE = "br0"


class HostsError(QJournalError):
    """A host or the network could not be made, used or removed (names the host / namespace)."""


def unavailable_reason() -> str | None:
    """Why hosts cannot be made here (None: they can).

    Namespaces, veth pairs and bind mounts need root; the tools are ``ip`` (iproute2), ``nsenter``,
    ``unshare`` and ``mount`` (util-linux).
    """
    if os.geteuid() != 0:
        return "hosts need root (network namespaces, veth pairs, bind mounts); CI runs as root"
    missing = [t for t in ("ip", "nsenter", "unshare", "mount", "umount") if shutil.which(t) is None]
    if missing:
        return f"hosts need {', '.join(missing)} (iproute2, util-linux)"
    if not os.path.exists("/proc/self/ns/net"):
        return "this kernel has no network namespaces"
    return None


def _run(argv: list[str], what: str, timeout_s: float = 30.0, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
    if check and r.returncode != 0:
        raise HostsError(f"{what}: `{' '.join(argv)}` failed with status {r.returncode}: "
                         f"{(r.stderr or r.stdout).strip()[-500:]}")
    return r


# ---------------------------------------------------------------------------------------- locks
class _Lock:
    """An ``flock`` on a file, held while the object lives (released by :meth:`release`)."""

    def __init__(self, path: str, blocking: bool = True) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BaseException:
            os.close(self.fd)
            raise

    def release(self) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _global_lock() -> _Lock:
    os.makedirs(STATE_DIR, exist_ok=True)
    return _Lock(os.path.join(STATE_DIR, "global.lock"))


def _run_alive(prefix: str) -> bool:
    """Whether the run ``prefix`` holds its lock (a crashed run's lock is free or gone)."""
    path = os.path.join(STATE_DIR, f"{prefix}.lock")
    if not os.path.exists(path):
        return False
    try:
        probe = _Lock(path, blocking=False)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return True
        if e.errno == errno.ENOENT:
            return False
        raise
    probe.release()
    return False


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def _prefix_of(entry: str) -> str | None:
    """``qjh-1a2b3c-jn1`` -> ``qjh-1a2b3c`` (None for names that are not the harness's)."""
    m = re.match(rf"^({TAG}-[0-9a-f]+)(?:[-.].*)?$", entry)
    return m.group(1) if m else None


def _netns_pids(ns: str) -> list[int]:
    r = _run(["ip", "netns", "pids", ns], f"processes of {ns}", check=False)
    return sorted(int(p) for p in r.stdout.split() if p.isdigit())


def _kill_namespace_processes(namespaces: list[str], timeout_s: float = 15.0) -> list[int]:
    """SIGKILL every process in ``namespaces`` until none is left. Returns the survivors (none
    unless a process is stuck in the kernel past ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pids = sorted({p for ns in namespaces for p in _netns_pids(ns)})
        pids = [p for p in pids if pid_alive(p)]
        if not pids or time.monotonic() > deadline:
            return pids
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)  # the kernel tears the processes down; poll until they are gone


def _destroy(prefix: str) -> list[str]:
    """Remove every trace of the run ``prefix`` (processes, namespaces, /etc/netns, UTS files,
    lock). Returns what could not be removed."""
    problems: list[str] = []
    namespaces = [e for e in _listdir(NETNS_DIR) if _prefix_of(e) == prefix]
    left = _kill_namespace_processes(namespaces)
    if left:
        problems.append(f"processes {left} of {prefix} survived SIGKILL")
    for ns in namespaces:
        r = _run(["ip", "netns", "del", ns], f"delete {ns}", check=False)
        if r.returncode != 0 and os.path.exists(os.path.join(NETNS_DIR, ns)):
            problems.append(f"namespace {ns}: {r.stderr.strip()}")
    for e in _listdir(ETC_NETNS):
        if _prefix_of(e) == prefix:
            shutil.rmtree(os.path.join(ETC_NETNS, e), ignore_errors=True)
    state = os.path.join(STATE_DIR, prefix)
    for e in _listdir(state):
        p = os.path.join(state, e)
        if e.endswith(".uts"):
            _run(["umount", p], f"unmount {p}", check=False)
        try:
            os.unlink(p)
        except OSError as err:
            problems.append(f"{p}: {err}")
    try:
        os.rmdir(state)
    except FileNotFoundError:
        pass
    except OSError as err:
        problems.append(f"{state}: {err}")
    try:
        os.unlink(os.path.join(STATE_DIR, f"{prefix}.lock"))
    except FileNotFoundError:
        pass
    return problems


def _all_prefixes() -> set[str]:
    found = set()
    for d in (NETNS_DIR, ETC_NETNS, STATE_DIR):
        for e in _listdir(d):
            p = _prefix_of(e)
            if p is not None:
                found.add(p)
    return found


def clean_stale() -> list[str]:
    """Remove what crashed runs left behind (runs whose lock nobody holds). Returns their prefixes."""
    if unavailable_reason() is not None:
        return []
    g = _global_lock()
    try:
        stale = sorted(p for p in _all_prefixes() if not _run_alive(p))
        for p in stale:
            problems = _destroy(p)
            if problems:
                raise HostsError(f"stale hosts of {p} could not be removed: {'; '.join(problems)}")
        _remove_unused_mount_points()
        return stale
    finally:
        g.release()


#: mount points this harness made on the machine (removed by the last run that ends), one per line
_MOUNT_POINTS_FILE = os.path.join(STATE_DIR, "mount-points")


def _remove_unused_mount_points() -> None:
    """Remove the empty mount points the harness made, once no run is alive (under the global lock)."""
    if any(_run_alive(p) for p in _all_prefixes()):
        return
    try:
        with open(_MOUNT_POINTS_FILE) as f:
            made = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return
    for d in sorted(made, key=len, reverse=True):
        try:
            os.rmdir(d)
        except OSError:
            pass  # not empty (someone put something there) or already gone: leave it
    os.unlink(_MOUNT_POINTS_FILE)


def _ensure_mount_point(path: str) -> None:
    """Create ``path`` (and missing parents) on the machine, remembering what was made (global lock held)."""
    made = []
    p = path
    while not os.path.exists(p):
        made.append(p)
        p = os.path.dirname(p)
    os.makedirs(path, exist_ok=True)
    if made:
        with open(_MOUNT_POINTS_FILE, "a") as f:
            f.write("".join(m + "\n" for m in made))


# ---------------------------------------------------------------------------------------- hosts
@dataclass
class Host:
    """One host of a :class:`Network`: a network namespace with an address, a name and directories.

    Attributes:
        name: the host name (what every host's ``/etc/hosts`` maps to :attr:`address`).
        ns: the network namespace.
        address: the IPv4 address of its ``eth0``.
        root: the machine directory holding this host's private directories (``root + path``).
        veth: the name of its link's other end, a port of the bridge (in the bridge namespace).
    """

    name: str
    ns: str
    address: str
    root: str
    veth: str
    uts_file: str
    mounts: list[tuple[str, str]]                      # (machine source, path inside the host)
    daemons: dict[str, Daemon] = field(default_factory=dict)

    # -- files
    def path(self, inside: str) -> str:
        """The machine path of ``inside`` (an absolute path as this host sees it)."""
        if not os.path.isabs(inside):
            raise HostsError(f"{self.name}: {inside!r} is not an absolute path")
        best = None
        for src, dst in self.mounts:
            if inside == dst or inside.startswith(dst.rstrip("/") + "/"):
                if best is None or len(dst) > len(best[1]):
                    best = (src, dst)
        if best is None:
            return inside  # not private: the machine's own file
        return best[0] + inside[len(best[1]):]

    # -- commands
    def argv(self, cmd: list[str]) -> list[str]:
        """``cmd`` wrapped to run inside this host (its network, name and directories)."""
        binds = "".join(f"mount --bind {shlex.quote(src)} {shlex.quote(dst)} && "
                        for src, dst in self.mounts)
        return ["ip", "netns", "exec", self.ns, "nsenter", f"--uts={self.uts_file}", "--",
                "sh", "-c", binds + 'exec "$@"', "sh", *cmd]

    def run(self, cmd: list[str], *, timeout_s: float = 120.0, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``cmd`` inside the host and wait (output captured as text).

        Raises:
            HostsError: with ``check``, a non-zero exit status (the output's tail is in the message).
        """
        full_env = dict(os.environ)
        full_env.update(env or {})
        r = subprocess.run(self.argv(cmd), input=input, capture_output=True, text=True, timeout=timeout_s,
                           env=full_env, stdin=None if input is not None else subprocess.DEVNULL)
        if check and r.returncode != 0:
            out = (r.stdout + r.stderr).strip()
            raise HostsError(f"{self.name}: `{shlex.join(cmd)}` failed with status {r.returncode}:\n{out[-2000:]}")
        return r

    def spawn(self, name: str, cmd: list[str], *, log_path: str, env: dict[str, str] | None = None,
              ready_timeout_s: float | None = 60.0) -> Daemon:
        """Start a daemon inside the host, stdout and stderr appended to ``log_path`` (a machine path),
        except that with ``ready_timeout_s`` its stdout is read until its ``READY {json}`` line.

        Raises:
            HostsError: a daemon of that name runs already here, or it exited / stayed silent
                before READY (:class:`~qjournal.util.proc.DaemonStartError` as the cause).
        """
        old = self.daemons.get(name)
        if old is not None and old.alive():
            raise HostsError(f"{self.name}: {name} runs already (pid {old.pid})")
        os.makedirs(os.path.dirname(log_path), exist_ok=True)
        if ready_timeout_s is not None:
            try:
                d = start_daemon(f"{self.name}:{name}", self.argv(cmd), log_path=log_path, env=env,
                                 ready_timeout_s=ready_timeout_s)
            except RuntimeError as e:  # DaemonStartError
                raise HostsError(f"{self.name}: {name} did not start: {e}") from e
        else:
            full_env = dict(os.environ)
            full_env.update(env or {})
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(self.argv(cmd), stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env=full_env, start_new_session=True)
            d = Daemon(f"{self.name}:{name}", proc, log_path=log_path)
        self.daemons[name] = d
        return d

    def stop(self, name: str, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the daemon ``name`` (SIGKILL after ``timeout_s``) and reap it. Returns its exit
        status (None: not started here)."""
        d = self.daemons.get(name)
        if d is None:
            return None
        return d.stop(timeout_s)

    def pids(self) -> list[int]:
        """Every live process inside this host's network namespace."""
        return [p for p in _netns_pids(self.ns) if pid_alive(p)]

    def kill_all(self, sig: int = signal.SIGKILL, timeout_s: float = 15.0) -> list[int]:
        """Send ``sig`` to every process of the host (a host crash with SIGKILL) and, for SIGKILL,
        wait until none is left. Returns the pids signalled.

        Raises:
            HostsError: a process survived SIGKILL for ``timeout_s``.
        """
        pids = self.pids()
        for p in pids:
            try:
                os.kill(p, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGKILL:
            left = _kill_namespace_processes([self.ns], timeout_s)
            if left:
                raise HostsError(f"{self.name}: processes {left} survived SIGKILL")
        for d in self.daemons.values():
            if not d.alive():
                d.proc.wait()
        return pids

    # -- network (issue 28 adds faults on top of these)
    def ip(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """``ip -n <ns> ARGS`` (this host's links, addresses, routes and neighbours)."""
        return _run(["ip", "-n", self.ns, *args], f"{self.name}: ip {' '.join(args)}", check=check)

    def routes(self) -> list[str]:
        """This host's IPv4 routes, one line each (``ip route show``)."""
        return [ln for ln in self.ip("route", "show").stdout.splitlines() if ln.strip()]


class Network:
    """The hosts of one run and the bridge between them (module docstring).

    Usage::

        with Network(tmp_dir, private_dirs=["/etc/qjournal"]) as net:
            a, b = net.add_host("a"), net.add_host("b")
            a.run(["getent", "hosts", "b"])

    Args:
        base_dir: where each host's root directory is made (``<base_dir>/<name>``).
        private_dirs: absolute paths every host has a private copy of.
        shared_mounts: ``{path inside the hosts: machine directory}`` seen by every host alike.
        subnet: the /24 of the hosts' addresses.

    Raises:
        HostsError: hosts cannot be made here (:func:`unavailable_reason`) or a step failed
            (everything made so far is removed again).
    """

    def __init__(self, base_dir: str, *, private_dirs: list[str] | tuple[str, ...] = (),
                 shared_mounts: dict[str, str] | None = None, subnet: str = DEFAULT_SUBNET) -> None:
        self.base_dir = os.path.abspath(base_dir)
        self.private_dirs = [os.path.normpath(d) for d in private_dirs]
        self.shared_mounts = {os.path.normpath(k): os.path.abspath(v) for k, v in (shared_mounts or {}).items()}
        for d in [*self.private_dirs, *self.shared_mounts]:
            if not os.path.isabs(d) or d == "/":
                raise HostsError(f"private and shared directories must be absolute and not /: {d!r}")
        net = ipaddress.ip_network(subnet)
        if net.prefixlen != 24 or net.version != 4:
            raise HostsError(f"subnet {subnet}: a /24 of IPv4 addresses is expected")
        self.subnet = net
        self.prefix = f"{TAG}-{os.getpid():x}{secrets.token_hex(3)}"
        self.bridge_ns = f"{self.prefix}--bridge"
        self.hosts: dict[str, Host] = {}
        self._lock: _Lock | None = None
        self._started = False

    # -- life
    def __enter__(self) -> "Network":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Clean up crashed runs, take this run's lock, make the bridge (invariant 3)."""
        why = unavailable_reason()
        if why is not None:
            raise HostsError(why)
        clean_stale()
        g = _global_lock()
        try:
            tmp = os.path.join(STATE_DIR, f".{self.prefix}.lock.tmp")
            self._lock = _Lock(tmp)
            os.rename(tmp, os.path.join(STATE_DIR, f"{self.prefix}.lock"))
            os.makedirs(os.path.join(STATE_DIR, self.prefix), exist_ok=True)
            for d in [*self.private_dirs, *self.shared_mounts]:
                _ensure_mount_point(d)
        finally:
            g.release()
        self._started = True
        try:
            _run(["ip", "netns", "add", self.bridge_ns], "make the bridge namespace")
            self._bridge_ip("link", "add", _BRIDGE, "type", "bridge")
            self._bridge_ip("link", "set", _BRIDGE, "up")
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Remove every process, namespace, link, file and lock of the run (invariant 2).

        Raises:
            HostsError: something could not be removed (named in the message).
        """
        if not self._started:
            return
        self._started = False
        for h in self.hosts.values():
            for d in h.daemons.values():
                if d.alive():
                    d.kill()
        g = _global_lock()
        try:
            problems = _destroy(self.prefix)
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            _remove_unused_mount_points()
        finally:
            g.release()
        if problems:
            raise HostsError(f"hosts of {self.prefix} not fully removed: {'; '.join(problems)}")

    # -- hosts
    def add_host(self, name: str) -> Host:
        """Make a host: its namespace, link, address, name, directories; every host learns its name.

        Raises:
            HostsError: a bad or taken name, no address left, or a step failed.
        """
        if not self._started:
            raise HostsError("the network is not started")
        if not _NAME.match(name):
            raise HostsError(f"host name {name!r}: lower-case letters, digits and '-', starting with a letter, "
                             "at most 20 characters")
        if name in self.hosts:
            raise HostsError(f"host {name} exists already")
        index = len(self.hosts)
        octet = FIRST_HOST_OCTET + index
        if octet > 250:
            raise HostsError(f"no address left in {self.subnet} for host {name}")
        address = str(self.subnet.network_address + octet)
        ns = f"{self.prefix}-{name}"
        root = os.path.join(self.base_dir, name)
        mounts = [(root + d, d) for d in self.private_dirs] + \
                 [(src, dst) for dst, src in sorted(self.shared_mounts.items())]
        host = Host(name, ns, address, root, f"v{index}", os.path.join(STATE_DIR, self.prefix, f"{name}.uts"),
                    mounts)
        for d in self.private_dirs:
            os.makedirs(root + d, exist_ok=True)
        _run(["ip", "netns", "add", ns], f"make host {name}")
        self.hosts[name] = host
        self._bridge_ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._bridge_ip("link", "set", host.veth, "master", _BRIDGE, "up")
        host.ip("addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        host.ip("link", "set", "eth0", "up")
        host.ip("link", "set", "lo", "up")
        etc = os.path.join(ETC_NETNS, ns)
        os.makedirs(etc, exist_ok=True)
        with open(os.path.join(etc, "hostname"), "w") as f:
            f.write(name + "\n")
        with open(host.uts_file, "w"):
            pass
        _run(["unshare", f"--uts={host.uts_file}", "hostname", name], f"host name of {name}")
        self._write_hosts_files()
        return host

    def host(self, name: str) -> Host:
        """The host ``name``.

        Raises:
            HostsError: no such host.
        """
        try:
            return self.hosts[name]
        except KeyError:
            raise HostsError(f"no host {name!r}; hosts: {', '.join(self.hosts)}") from None

    def __iter__(self) -> Iterator[Host]:
        return iter(self.hosts.values())

    def hosts_file(self) -> str:
        """The ``/etc/hosts`` every host sees: localhost, then each host in the order it was made."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        lines += [f"{h.address}\t{h.name}" for h in self.hosts.values()]
        return "\n".join(lines) + "\n"

    def _write_hosts_files(self) -> None:
        """Write every host's ``/etc/netns/<ns>/hosts`` in place: same inode (the bind mounts of running
        processes see it), overwritten from the start and then cut, so it is never empty."""
        data = self.hosts_file().encode()
        for h in self.hosts.values():
            fd = os.open(os.path.join(ETC_NETNS, h.ns, "hosts"), os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                os.pwrite(fd, data, 0)
                os.ftruncate(fd, len(data))
            finally:
                os.close(fd)

    # -- the bridge (issue 28 adds faults on top of these)
    def _bridge_ip(self, *args: str) -> subprocess.CompletedProcess:
        return _run(["ip", "-n", self.bridge_ns, *args], f"bridge: ip {' '.join(args)}")

    def set_link(self, name: str, up: bool) -> None:
        """Take host ``name``'s port of the bridge down (its cable pulled) or up again."""
        self._bridge_ip("link", "set", self.host(name).veth, "up" if up else "down")

    def unused_address(self) -> str:
        """An address of the subnet that no host has or will get (a next hop nobody answers)."""
        return str(self.subnet.network_address + FIRST_HOST_OCTET - 1)
