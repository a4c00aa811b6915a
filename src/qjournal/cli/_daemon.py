"""What the daemon subcommands (``journalnode``, ``namenode``, ``zkfc``) share.

Why this module exists: the process conventions of docs/architecture.md
(``HOST:PORT`` flags, ``--pid-file``, SIGTERM/SIGINT stop the daemon cleanly)
are the same for every daemon, so the code that follows them is written once;
so is the error guard of the local launchers' subcommands (``cluster``, ``spark``).
It is not a subcommand (``cli/main.py`` does not list it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from typing import Callable

from qjournal.errors import QJournalError
from qjournal.util.fs import atomic_write

__all__ = ["host_port_arg", "remove_pid_file", "stop_on_signals", "write_pid_file", "guarded"]


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
