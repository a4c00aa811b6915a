"""Faults inside a daemon's process: its wall clock (libfaketime) and its system calls (libfiu).

Why: a machine's clock jumps (a bad NTP step, a VM resumed) and drifts, and its disk fails an fsync or
fills up; neither can be done to one process from outside. Both are preload libraries that a daemon
must be started with, so the fault harness gives the units of the faulted hosts a systemd drop-in
(``/etc/systemd/system/<unit>.d/50-qjournal-faults.conf``, applied by :mod:`qjournal.hosts.services` as
systemd applies it) before their first start, and then steers the libraries at run time:

* **clock** (Debian ``faketime``): ``LD_PRELOAD`` = the project's shim (``scripts/faketime-shim.c``,
  built by ``scripts/setup.sh``) then ``libfaketime.so.1``; ``FAKETIME_DONT_FAKE_MONOTONIC=1`` (only
  the wall clock moves); ``FAKETIME_TIMESTAMP_FILE`` names a file per daemon that libfaketime re-reads
  every second (``FAKETIME_CACHE_DURATION=1``): ``+0`` is the true time, ``+600`` ten minutes ahead,
  ``-600`` behind, ``+0 x2`` a clock running twice as fast (libfaketime counts the rate from the
  process's start, so switching a rate on also moves the clock by that much). The shim sends every
  monotonic or relative sleep and wait (``clock_nanosleep``, ``poll``, ``select``, ``epoll_wait``, ...)
  to the C library, past libfaketime, which would otherwise answer EINVAL to Python's ``time.sleep``
  and stretch or shrink every timeout by its rate.
* **disk** (Debian ``fiu-utils``): the environment ``fiu-run -x`` sets (``fiu_run_preload.so`` and
  ``fiu_posix_preload.so`` in ``LD_PRELOAD``, ``FIU_CTRL_FIFO``: what ``fiu-run -x`` exports before it
  execs the program, set by the same drop-in mechanism as the clock's); ``fiu-ctrl -c
  "enable name=posix/io/sync/fdatasync,failinfo=5" PID`` makes every ``fdatasync`` of that process fail
  with EIO until ``disable``. libfiu's points are per function, not per path: a NameNode's write fault
  also hits its log writes. The points used: ``posix/io/sync/fdatasync`` and ``fsync`` (EIO),
  ``posix/io/rw/pwrite`` and ``write`` (ENOSPC or EIO), ``posix/io/rw/pread`` and ``read`` (EIO).

A unit gets one of the two (libfaketime 0.9.10 and libfiu's POSIX preload in one process crash it
at start): the nemesis chooses per host which.

Every fault is counted by kind in :attr:`ProcessFaults.counts` and reported through ``record``.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
from typing import Callable

from qjournal.deploy import layout
from qjournal.hosts.netns import HostsError, Network
from qjournal.hosts.services import ServiceManager

__all__ = ["ProcessFaults", "preload_environment", "shim_path", "libfaketime_path", "unavailable_reason", "DISK_POINTS", "ERRNO",
           "DROP_IN_NAME"]

DROP_IN_NAME = "50-qjournal-faults.conf"
#: the fault points of each disk fault kind
DISK_POINTS = {
    "fsync_eio": ("posix/io/sync/fdatasync", "posix/io/sync/fsync"),
    "write_enospc": ("posix/io/rw/pwrite", "posix/io/rw/write"),
    "write_eio": ("posix/io/rw/pwrite", "posix/io/rw/write"),
    "read_eio": ("posix/io/rw/pread", "posix/io/rw/read"),
}
ERRNO = {"fsync_eio": 5, "write_enospc": 28, "write_eio": 5, "read_eio": 5}
FIU_LIB_DIR = "/usr/lib/fiu"


def shim_path() -> str:
    """The clock shim built by ``scripts/setup.sh`` beside the project's interpreter."""
    return os.path.join(sys.prefix, "lib", "qjournal-faketime-shim.so")


def libfaketime_path() -> str | None:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1"))
    return found[0] if found else None


def unavailable_reason() -> str | None:
    """Why process faults cannot run here (None: they can)."""
    if libfaketime_path() is None:
        return "libfaketime is not installed (Debian faketime; scripts/setup.sh installs it)"
    if not os.path.exists(shim_path()):
        return f"the clock shim {shim_path()} is not built (scripts/setup.sh builds it)"
    if not os.path.exists(os.path.join(FIU_LIB_DIR, "fiu_posix_preload.so")):
        return "libfiu's preload libraries are missing (Debian fiu-utils; scripts/setup.sh installs it)"
    return None


def preload_environment(mode: str, clock_file: str, fifo_prefix: str) -> dict[str, str]:
    """The environment a daemon is started with for ``mode`` (module docstring).

    Args:
        mode: ``clock`` (libfaketime behind the shim) or ``disk`` (libfiu).
        clock_file: the daemon's ``FAKETIME_TIMESTAMP_FILE`` (clock).
        fifo_prefix: the base name of its libfiu control FIFOs (disk), in a directory of the run: a killed
            process leaves its FIFOs behind, and a later process given the same pid would find them.
    """
    if mode == "clock":
        return {"LD_PRELOAD": f"{shim_path()}:{libfaketime_path()}", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                "FAKETIME_TIMESTAMP_FILE": clock_file, "FAKETIME_CACHE_DURATION": "1"}
    if mode == "disk":
        # JE_ARROW_MALLOC_CONF: libfiu wraps malloc and mmap under a lock of its own and takes the
        # loader's lock inside it (dlsym); pyarrow's jemalloc background thread calling malloc while the
        # NameNode loads libarrow (its image format) deadlocked 5 starts in 20
        return {"LD_PRELOAD": f"{FIU_LIB_DIR}/fiu_run_preload.so:{FIU_LIB_DIR}/fiu_posix_preload.so",
                "FIU_CTRL_FIFO": fifo_prefix, "FIU_ENABLE": "", "JE_ARROW_MALLOC_CONF": "background_thread:false"}
    raise HostsError(f"process faults: mode {mode!r} is neither clock nor disk")


class ProcessFaults:
    """Clock and disk faults of the daemons of a set of hosts (module docstring).

    Args:
        net: the hosts.
        services: each host's service manager (where the daemons' pids come from).
        state_dir: a machine directory for the clock files (every host sees the machine's files).
        record: called with ``(kind, detail)`` for each fault applied.
    """

    def __init__(self, net: Network, services: dict[str, ServiceManager], state_dir: str,
                 record: Callable[[str, str], None] | None = None) -> None:
        why = unavailable_reason()
        if why is not None:
            raise HostsError(why)
        self.net = net
        self.services = services
        self.state_dir = os.path.abspath(state_dir)
        os.makedirs(self.state_dir, exist_ok=True)
        self.record = record
        self.counts: dict[str, int] = {}
        self.offsets_s: dict[tuple[str, str], float] = {}
        self.disk_on: dict[tuple[str, str], list[str]] = {}
        self.modes: dict[tuple[str, str], str] = {}
        os.makedirs(os.path.join(self.state_dir, "fiu"), exist_ok=True)
        self.fifo_prefix = os.path.join(self.state_dir, "fiu", "ctrl")

    # -- set-up ----------------------------------------------------------------------------------------
    def clock_file(self, host: str, unit: str) -> str:
        return os.path.join(self.state_dir, f"{host}-{unit}.faketime")

    def install(self, host: str, units: list[str], mode: str) -> None:
        """Write the drop-in of each unit of ``host`` (before the units start; a running unit takes it
        at its next restart). ``mode``: ``clock`` (libfaketime) or ``disk`` (libfiu): not both, since
        libfaketime 0.9.10 and libfiu's POSIX preload in one process crash it at start (SIGSEGV)."""
        if mode not in ("clock", "disk"):
            raise HostsError(f"process faults: mode {mode!r} is neither clock nor disk")
        h = self.net.host(host)
        for unit in units:
            spec = self.clock_file(host, unit)
            if mode == "clock":
                with open(spec, "w") as f:
                    f.write("+0\n")
            env = preload_environment(mode, spec, self.fifo_prefix)
            self.modes[(host, unit)] = mode
            d = h.path(os.path.join(layout.UNIT_DIR, unit + ".d"))
            os.makedirs(d, exist_ok=True)
            lines = "".join(f"Environment={shlex.quote(f'{k}={v}')}\n" for k, v in env.items())
            with open(os.path.join(d, DROP_IN_NAME), "w") as f:
                f.write(f"# qjournal's fault harness (issue 28): {mode} faults, steered at run time\n"
                        "[Service]\n" + lines)

    def clean_fifos(self) -> None:
        """Remove the control FIFOs of processes that are gone (pids are reused: a new process must not
        find an old one's FIFOs)."""
        d = os.path.dirname(self.fifo_prefix)
        base = os.path.basename(self.fifo_prefix) + "-"
        for f in os.listdir(d):
            pid = f[len(base):].split(".")[0] if f.startswith(base) else ""
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                try:
                    os.unlink(os.path.join(d, f))
                except FileNotFoundError:
                    pass

    # -- clock -----------------------------------------------------------------------------------------
    def _clock(self, host: str, unit: str, spec: str) -> None:
        path = self.clock_file(host, unit)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(spec + "\n")
        os.replace(tmp, path)

    def jump(self, host: str, unit: str, seconds: float) -> None:
        """The daemon's wall clock jumps by ``seconds`` (forwards when positive)."""
        key = (host, unit)
        self.offsets_s[key] = self.offsets_s.get(key, 0.0) + seconds
        self._clock(host, unit, f"{self.offsets_s[key]:+.0f}")
        self._count("clock_jump_forward" if seconds > 0 else "clock_jump_backward",
                    f"{host} {unit} {seconds:+.0f}s")

    def rate(self, host: str, unit: str, rate: float) -> None:
        """The daemon's wall clock runs at ``rate`` times the true one (until :meth:`clock_reset`)."""
        self._clock(host, unit, f"{self.offsets_s.get((host, unit), 0.0):+.0f} x{rate:g}")
        self._count("clock_fast" if rate > 1 else "clock_slow", f"{host} {unit} x{rate:g}")

    def clock_reset(self, host: str, unit: str) -> None:
        """The daemon's wall clock is the true one again (a jump back to it, counted as a jump)."""
        self.offsets_s[(host, unit)] = 0.0
        self._clock(host, unit, "+0")

    # -- disk ------------------------------------------------------------------------------------------
    def _pid(self, host: str, unit: str) -> int:
        d = self.services[host].daemon(unit)
        if d is None or not d.alive():
            raise HostsError(f"{host}: {unit} is not running: no disk fault")
        return d.pid

    def _fiu(self, host: str, unit: str, command: str) -> None:
        pid = self._pid(host, unit)
        try:
            r = subprocess.run(["fiu-ctrl", "-f", self.fifo_prefix, "-c", command, str(pid)], capture_output=True,
                               text=True, timeout=10)
        except subprocess.TimeoutExpired:
            raise HostsError(f"{host}: fiu-ctrl -c {command!r} {pid} ({unit}) got no answer within 10 s") from None
        if r.returncode != 0:
            raise HostsError(f"{host}: fiu-ctrl -c {command!r} {pid} ({unit}) failed: {(r.stderr or r.stdout).strip()}")

    def disk_fault(self, host: str, unit: str, kind: str, probability: float = 1.0) -> None:
        """Make the daemon's calls of ``kind`` (:data:`DISK_POINTS`) fail with its errno."""
        if kind not in DISK_POINTS:
            raise HostsError(f"unknown disk fault {kind!r} (known: {sorted(DISK_POINTS)})")
        for point in DISK_POINTS[kind]:
            how = "enable" if probability >= 1 else "enable_random"
            extra = "" if probability >= 1 else f",probability={probability:g}"
            self._fiu(host, unit, f"{how} name={point},failinfo={ERRNO[kind]}{extra}")
        self.disk_on[(host, unit)] = list(DISK_POINTS[kind])
        self._count(kind, f"{host} {unit}" + (f" p={probability:g}" if probability < 1 else ""))

    def disk_heal(self, host: str, unit: str) -> None:
        """Turn the daemon's fault points off (nothing if it died meanwhile: a new process has none)."""
        points = self.disk_on.pop((host, unit), [])
        d = self.services[host].daemon(unit)
        if d is None or not d.alive():
            return
        for point in points:
            self._fiu(host, unit, f"disable name={point}")

    def _count(self, kind: str, detail: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if self.record is not None:
            self.record(kind, detail)
