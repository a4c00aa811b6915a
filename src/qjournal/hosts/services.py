"""``systemctl`` for a test host: run the units a host has installed, as systemd would run them.

Why: a deployment is only shown to work if the hosts run what the shipped units run. There is no
systemd on the test machine (and one per namespace would be a machine of its own), so this module
reads the unit file the host installed (``/etc/systemd/system/<unit>`` inside the host, written by
``qjournal deploy units``) and does what systemd does with its ``[Service]`` section:

* the command is ``ExecStart=`` as written, with ``Environment=``, under ``LimitNOFILE=``
  (``prlimit``, which execs; capped at the machine's hard limit when the test lacks the capability
  to raise it), its stdout and stderr appended to the ``StandardOutput=append:``
  file (inside the host);
* ``Type=notify``: a notification socket is passed in ``$NOTIFY_SOCKET`` and the start returns
  when the daemon sends ``READY=1`` (sd_notify, :func:`qjournal.cli._daemon.announce_ready`), or
  fails when it exits first or ``TimeoutStartSec=`` passes; ``Type=simple``: the start returns once
  the process runs;
* stop: SIGTERM to the main process, SIGKILL after ``TimeoutStopSec=``; restart: stop, then start;
* drop-ins (``/etc/systemd/system/<unit>.d/*.conf``) as systemd applies them: how the fault harness
  (issue 28, :mod:`qjournal.hosts.clock` and :mod:`qjournal.hosts.disk`) puts a daemon under libfaketime
  or ``fiu-run``, as an operator would give one unit an extra environment or a wrapper.

What it does not do, and why that is fine for the tests: the processes run as root, not as
``User=`` (the hosts share the machine's account database; creating accounts would change the
machine), and nothing restarts a process by itself (``Restart=``): the tests restart on purpose and
say so. ``systemd-analyze verify`` checks the units themselves.
"""

from __future__ import annotations

import os
import resource
import socket
import time

from qjournal.deploy import layout
from qjournal.deploy.units import ServiceUnit, parse_unit
from qjournal.errors import ConfigError
from qjournal.hosts.netns import STATE_DIR, Host, HostsError
from qjournal.util.proc import Daemon, read_last_lines

__all__ = ["ServiceManager", "seconds"]


def seconds(text: str, default_s: float) -> float:
    """A systemd time span (``90``, ``90s``, ``2min``, ``500ms``) in seconds (``default_s`` if empty).

    Raises:
        ConfigError: a span this parser does not know.
    """
    t = text.strip()
    if not t:
        return default_s
    for suffix, factor in (("ms", 0.001), ("min", 60.0), ("s", 1.0), ("h", 3600.0)):
        if t.endswith(suffix) and t[: -len(suffix)].strip().replace(".", "", 1).isdigit():
            return float(t[: -len(suffix)]) * factor
    if t.replace(".", "", 1).isdigit():
        return float(t)
    raise ConfigError(f"time span {text!r}: expected a number with ms, s, min or h")


class ServiceManager:
    """The units of one host (module docstring).

    Args:
        host: the host.
        prefix: the run's prefix (the notification sockets live in its state directory).
    """

    def __init__(self, host: Host, prefix: str) -> None:
        self.host = host
        self.prefix = prefix

    def unit(self, name: str) -> ServiceUnit:
        """The unit ``name`` as installed on the host.

        Raises:
            HostsError: not installed; ConfigError: malformed.
        """
        path = self.host.path(os.path.join(layout.UNIT_DIR, name))
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise HostsError(f"{self.host.name}: unit {name} is not installed ({path}: {e.strerror})") from e
        drop_in_dir = path + ".d"
        drop_ins = []
        for f in sorted(os.listdir(drop_in_dir)) if os.path.isdir(drop_in_dir) else []:
            if f.endswith(".conf"):
                with open(os.path.join(drop_in_dir, f)) as fh:
                    drop_ins.append(fh.read())
        return parse_unit(text, name, drop_ins)

    def daemon(self, name: str) -> Daemon | None:
        """The main process of unit ``name`` (None if it never started)."""
        return self.host.daemons.get(name)

    def is_active(self, name: str) -> bool:
        d = self.daemon(name)
        return d is not None and d.alive()

    def start(self, name: str) -> Daemon:
        """``systemctl start NAME``: returns once the unit is started (``Type=notify``: ready).

        Raises:
            HostsError: not installed, already running, or it exited / did not notify in time
                (the log's tail is in the message).
        """
        u = self.unit(name)
        if self.is_active(name):
            raise HostsError(f"{self.host.name}: {name} is running already")
        argv = list(u.exec_start)
        if u.limit_nofile is not None:
            # raising the hard limit needs CAP_SYS_RESOURCE, which a sandboxed test machine may lack
            # (systemd has it): then the machine's hard limit is the most the unit can get
            n = min(u.limit_nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
            argv = ["prlimit", f"--nofile={n}:{n}", "--", *argv]
        log_inside = u.log_file()
        if log_inside is None:
            raise HostsError(f"{self.host.name}: {name} has no StandardOutput=append:FILE; the hosts keep logs "
                             "in files")
        log = self.host.path(log_inside)
        env = dict(u.environment)
        timeout_s = seconds(u.raw["Service"].get("TimeoutStartSec", [""])[0], 90.0)
        if u.type == "simple":
            return self.host.spawn(name, argv, log_path=log, env=env, ready_timeout_s=None)
        if u.type != "notify":
            raise HostsError(f"{self.host.name}: {name} has Type={u.type}; the hosts run simple and notify units")
        sock_path = os.path.join(STATE_DIR, self.prefix, f"{self.host.name}-{name}.notify")
        try:
            os.unlink(sock_path)
        except FileNotFoundError:
            pass
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.bind(sock_path)
            env["NOTIFY_SOCKET"] = sock_path
            d = self.host.spawn(name, argv, log_path=log, env=env, ready_timeout_s=None)
            deadline = time.monotonic() + timeout_s
            while True:
                s.settimeout(0.2)
                try:
                    msg = s.recv(4096).decode("utf-8", "replace")
                except socket.timeout:
                    msg = ""
                if "READY=1" in msg.split("\n"):
                    break
                if not d.alive():
                    raise HostsError(f"{self.host.name}: {name} exited with {d.proc.returncode} before it was "
                                     f"ready{_tail(log)}")
                if time.monotonic() > deadline:
                    d.kill()
                    raise HostsError(f"{self.host.name}: {name} sent no READY=1 within {timeout_s:.0f}s{_tail(log)}")
        os.unlink(sock_path)
        return d

    def stop(self, name: str) -> int | None:
        """``systemctl stop NAME``: SIGTERM, SIGKILL after ``TimeoutStopSec=``. Returns the exit status
        (None: it was not running)."""
        d = self.daemon(name)
        if d is None or not d.alive():
            return None
        u = self.unit(name)
        return d.stop(seconds(u.raw["Service"].get("TimeoutStopSec", [""])[0], 90.0))

    def restart(self, name: str) -> Daemon:
        """``systemctl restart NAME``."""
        self.stop(name)
        return self.start(name)


def _tail(path: str, lines: int = 20) -> str:
    try:
        text = read_last_lines(path, lines)
    except OSError:
        return ""
    return f"\n--- {path} ---\n" + "\n".join(text)
