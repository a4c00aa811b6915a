"""What the daemon subcommands (``journalnode``, ``namenode``, ``zkfc``) share.

Why this module exists: the process conventions of docs/architecture.md
(``HOST:PORT`` flags, ``--pid-file``, SIGTERM/SIGINT stop the daemon cleanly)
are the same for every daemon, so the code that follows them is written once;
so is the error guard of the local launchers' subcommands (``cluster``, ``spark``).
It is not a subcommand (``cli/main.py`` does not list it).

The event loop: :func:`run_daemon` runs a daemon's main coroutine on the loop
``qjournal.event-loop`` names: ``asyncio`` (the standard library's), ``uvloop``
(libuv's, the optional ``qjournal[fast]`` extra), or ``auto`` (the default:
uvloop when it is installed, as uvicorn chooses). Measured in
docs/performance.md ("Commit path"): about a tenth less NameNode CPU per call.

Readiness: :func:`announce_ready` prints the ``READY {json}`` line the launchers and tests wait
for and, under a service manager that asked for it (``$NOTIFY_SOCKET``: systemd's ``Type=notify``
units of docs/deploy.md), sends ``READY=1`` there: ``systemctl start`` then returns once the daemon
serves, and units ordered after it start only then.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import socket
import sys
from typing import Any, Callable, Coroutine

from qjournal.errors import ConfigError, QJournalError
from qjournal.util.fs import atomic_write
from qjournal.util.logs import parse_logger_levels, setup_logging

try:  # optional: pip install 'qjournal[fast]'
    import uvloop
except ImportError:  # pragma: no cover - depends on the installation
    uvloop = None

__all__ = ["announce_ready", "event_loop_factory", "guarded", "setup_daemon_logging", "notify_service_manager", "host_port_arg", "remove_pid_file", "run_daemon",
           "stop_on_signals", "write_pid_file"]

log = logging.getLogger(__name__)

EVENT_LOOPS = ("auto", "asyncio", "uvloop")


def setup_daemon_logging(role: str, conf: Any) -> None:
    """A daemon's logs as its configuration says: ``qjournal.log.level``, ``qjournal.log.json`` and the levels of
    single loggers in ``qjournal.log.levels`` (``qjournal.ipc=TRACE`` traces every RPC call and answer).

    Raises:
        ConfigError: an unknown level or a malformed ``logger=LEVEL`` entry, naming the key.
    """
    try:
        levels = parse_logger_levels(conf.get_list("qjournal.log.levels"))
    except ValueError as e:
        raise ConfigError(f"qjournal.log.levels: {e}", key="qjournal.log.levels") from None
    try:
        setup_logging(role, conf.get("qjournal.log.level") or "INFO", json=bool(conf.get_bool("qjournal.log.json")),
                      levels=levels)
    except ValueError as e:
        raise ConfigError(f"qjournal.log.level: {e}", key="qjournal.log.level") from None


def event_loop_factory(conf: Any) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The loop factory ``qjournal.event-loop`` asks for (None: asyncio's own loop).

    Raises:
        ConfigError: an unknown value, or ``uvloop`` when uvloop is not installed.
    """
    choice = (conf.get("qjournal.event-loop") or "auto").strip().lower()
    if choice not in EVENT_LOOPS:
        raise ConfigError(f"qjournal.event-loop is {choice!r}; expected one of {', '.join(EVENT_LOOPS)}",
                          key="qjournal.event-loop")
    if choice == "asyncio" or (choice == "auto" and uvloop is None):
        return None
    if uvloop is None:
        raise ConfigError("qjournal.event-loop is uvloop but uvloop is not installed "
                          "(pip install 'qjournal[fast]'; or set it to auto or asyncio)", key="qjournal.event-loop")
    return uvloop.new_event_loop


def run_daemon(conf: Any, main: Coroutine[Any, Any, int]) -> int:
    """``asyncio.run(main)`` on the loop of :func:`event_loop_factory`.

    Raises:
        ConfigError: as :func:`event_loop_factory` (``main`` is closed unrun).
    """
    try:
        factory = event_loop_factory(conf)
    except ConfigError:
        main.close()
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        log.info("event loop: %s", type(runner.get_loop()).__module__.split(".")[0])
        return runner.run(main)


def guarded(prefix: str) -> Callable:
    """Decorator for a subcommand function: a ``QJournalError`` becomes ``<prefix>: message`` on
    stderr and exit status 1; a None result is status 0."""
    def decorate(fn: Callable[[argparse.Namespace], int | None]) -> Callable[[argparse.Namespace], int]:
        def wrapper(args: argparse.Namespace) -> int:
            try:
                return fn(args) or 0
            except QJournalError as e:
                print(f"{prefix}: {e}", file=sys.stderr)
                return 1
        return wrapper
    return decorate


def host_port_arg(text: str) -> tuple[str, int]:
    """argparse ``type=`` for a ``HOST:PORT`` flag (an empty host means ``0.0.0.0``).

    Returns:
        ``(host, port)``.

    Raises:
        argparse.ArgumentTypeError: no ``:`` or a port that is not a number.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "0.0.0.0", int(port)


def write_pid_file(path: str | None) -> None:
    """Write this process's id to ``path`` (atomically: a reader never sees a partial file).

    Args:
        path: the ``--pid-file`` (None: nothing to do).

    Raises:
        OSError: the file cannot be written.
    """
    if not path:
        return
    atomic_write(path, f"{os.getpid()}\n".encode(), sync=False)


def remove_pid_file(path: str | None) -> None:
    """Remove the ``--pid-file`` on a clean exit; a file already gone is fine.

    Args:
        path: the ``--pid-file`` (None: nothing to do).
    """
    if not path:
        return
    try:
        os.unlink(path)
    except OSError:
        pass


def stop_on_signals(stop: asyncio.Event | None = None) -> asyncio.Event:
    """An event that SIGTERM and SIGINT set (call from the running loop).

    Args:
        stop: the event to set (None: a new one).

    Returns:
        The event; the daemon waits on it and then stops cleanly.
    """
    if stop is None:
        stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def notify_service_manager(state: str) -> bool:
    """Send ``state`` (e.g. ``READY=1``) to the service manager's ``$NOTIFY_SOCKET`` (sd_notify(3)).

    Returns:
        False when no service manager asked (no ``$NOTIFY_SOCKET``); True once sent.

    Raises:
        OSError: the socket named in ``$NOTIFY_SOCKET`` cannot be reached.
    """
    path = os.environ.get("NOTIFY_SOCKET")
    if not path:
        return False
    if path.startswith("@"):  # an abstract socket
        path = "\0" + path[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
        s.connect(path)
        s.sendall(state.encode())
    return True


def announce_ready(ready: dict) -> None:
    """The daemon serves: print ``READY {json}`` on stdout and tell the service manager (module
    docstring). A service manager that cannot be reached is logged, not fatal: the daemon serves."""
    print(f"READY {json.dumps(ready)}", flush=True)
    try:
        notify_service_manager(f"READY=1\nMAINPID={os.getpid()}\nSTATUS=serving {ready.get('rpc', '')}")
    except OSError as e:
        log.warning("could not notify the service manager at %s: %s", os.environ.get("NOTIFY_SOCKET"), e)
