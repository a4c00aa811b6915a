"""The preloads of the hosts' process faults (``qjournal.hosts.preload``): the clock shim
(scripts/faketime-shim.c) under libfaketime moves the wall clock and nothing that waits on the monotonic
clock; a NameNode under libfiu starts every time.

Each check runs a small Python program in a process started with the preload of ``qjournal.hosts.preload``
(the shim, then libfaketime, ``FAKETIME_DONT_FAKE_MONOTONIC=1``); a wait may not end early (a lower bound
on a wait is no timing threshold: an early return is the bug). Skipped where libfaketime or the shim is
missing (scripts/setup.sh installs and builds them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from qjournal.hosts.preload import libfaketime_path, preload_environment, shim_path, unavailable_reason

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hosts")]   # real processes under the preload

PROGRAM = r"""
import ctypes, json, select, time, asyncio
out = {"wall_minus_true_s": time.time() - TRUE_NOW}
t = time.monotonic(); time.sleep(0.2); out["sleep_s"] = time.monotonic() - t
t = time.monotonic(); select.select([], [], [], 0.2); out["select_s"] = time.monotonic() - t
async def nap():
    await asyncio.sleep(0.2)
t = time.monotonic(); asyncio.run(nap()); out["asyncio_s"] = time.monotonic() - t
# a condition variable on CLOCK_MONOTONIC (the JVM's timed waits), through the global namespace: the shim
libc = ctypes.CDLL(None)
attr, cond, mutex = (ctypes.create_string_buffer(64) for _ in range(3))
libc.pthread_condattr_init(attr); libc.pthread_condattr_setclock(attr, 1)
libc.pthread_cond_init(cond, attr); libc.pthread_mutex_init(mutex, None)
class TS(ctypes.Structure):
    _fields_ = [("s", ctypes.c_long), ("ns", ctypes.c_long)]
ts = TS(); libc.clock_gettime(1, ctypes.byref(ts))
ts.ns += 200_000_000
ts.s, ts.ns = ts.s + ts.ns // 1_000_000_000, ts.ns % 1_000_000_000
libc.pthread_mutex_lock(mutex)
t = time.monotonic(); rc = libc.pthread_cond_timedwait(cond, mutex, ctypes.byref(ts))
out["cond_s"], out["cond_rc"] = time.monotonic() - t, rc
print(json.dumps(out))
"""


def run_under(spec: str, tmp_path) -> dict:
    missing = [p for p in (libfaketime_path(), shim_path()) if p is None or not os.path.exists(p)]
    if missing:
        pytest.skip(f"libfaketime or the clock shim is missing ({missing}); scripts/setup.sh provides them")
    spec_file = tmp_path / "faketime"
    spec_file.write_text(spec + "\n")
    env = dict(os.environ, LD_PRELOAD=f"{shim_path()}:{libfaketime_path()}", FAKETIME_DONT_FAKE_MONOTONIC="1",
               FAKETIME_TIMESTAMP_FILE=str(spec_file), FAKETIME_CACHE_DURATION="1")
    program = PROGRAM.replace("TRUE_NOW", repr(time.time()))
    r = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("spec,offset_s", [("+600", 600), ("-600", -600), ("+0 x10", 0), ("+0 x0.1", 0)])
def test_the_wall_clock_moves_and_no_monotonic_wait_does(spec, offset_s, tmp_path):
    out = run_under(spec, tmp_path)
    assert abs(out["wall_minus_true_s"] - offset_s) < 60, out      # the wall clock is where the spec puts it
    # libfaketime alone: time.sleep raised EINVAL; select/asyncio waits were scaled by the rate;
    # a CLOCK_MONOTONIC condition variable's wait returned at once (ZooKeeper's JVM spun at 140 % CPU)
    assert out["sleep_s"] >= 0.19 and out["select_s"] >= 0.19 and out["asyncio_s"] >= 0.19, out
    assert out["cond_s"] >= 0.19 and out["cond_rc"] == 110, out     # ETIMEDOUT after the full wait


def test_libfiu_never_deadlocks_a_namenode_loading_pyarrow(tmp_path):
    """libfiu wraps malloc and mmap under a lock of its own and calls dlsym inside it; pyarrow's jemalloc
    background thread calling malloc while the NameNode's import loads libarrow deadlocked 5 starts in 20
    (a NameNode that never sent READY). Six starts with the disk preload's environment all finish (the old
    environment hangs at least one of six in 82 % of runs)."""
    why = unavailable_reason()
    if why is not None:
        pytest.skip(why)
    env = dict(os.environ, **preload_environment("disk", "", str(tmp_path / "ctrl")))
    program = "import qjournal.namenode.daemon, asyncio; asyncio.run(asyncio.sleep(0.01)); print('ok')"
    for i in range(6):
        try:
            r = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"start {i + 1} of 6 hung under libfiu (the loader-lock deadlock)")
        assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]

