"""``python -m qjournal.sim``: a replay line runs and reports; bad input is named."""

from __future__ import annotations

import os
import subprocess
import sys


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qjournal.sim", *args], capture_output=True,
                          text=True, timeout=120, env=None if env is None else {**os.environ, **env})


def test_replay_one_seed_prints_a_summary_and_exits_zero():
    p = _run("--seed", "2", "--steps", "20")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("seed=2 steps=20 nodes=3 ")
    assert "violations=0" in p.stdout


def test_replay_is_identical_across_processes_and_string_hash_seeds():
    # no re-exec: each process keeps its own PYTHONHASHSEED, so set iteration order differs
    a = _run("--seed", "4", "--steps", "40", "--history",
             env={"QJOURNAL_SIM_NO_REEXEC": "1", "PYTHONHASHSEED": "1"})
    b = _run("--seed", "4", "--steps", "40", "--history",
             env={"QJOURNAL_SIM_NO_REEXEC": "1", "PYTHONHASHSEED": "2"})
    strip = lambda out: [line for line in out.splitlines() if "wall=" not in line]  # noqa: E731
    assert a.returncode == b.returncode == 0
    assert strip(a.stdout) == strip(b.stdout)


def test_bad_fault_spec_is_a_usage_error_naming_the_kind():
    p = _run("--seed", "1", "--faults", "explode=0.5")
    assert p.returncode == 2
    assert "unknown fault kind 'explode'" in p.stderr


def test_a_seed_that_spins_becomes_a_failing_seed_with_its_stack():
    """The soak's watchdog: a seed that never yields is reported (with where it was), not waited on for ever."""
    from qjournal.sim.__main__ import _wall_limited

    def spin():
        while True:
            pass
    seed, viols, counts = _wall_limited(7, 1, spin)
    assert seed == 7 and counts == {"seed_wall_limit": 1}
    assert viols[0].startswith("[wall_limit] seed 7 ran longer than 1 s") and "spin" in viols[0]
    assert _wall_limited(8, 5, lambda: (8, [], {"ok": 1})) == (8, [], {"ok": 1})
