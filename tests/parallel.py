"""How ``make test`` shares the suite among pytest-xdist workers (``-n N --dist loadgroup``).

Why a scheduler of our own. xdist's ``loadgroup`` hands out every ungrouped test on its own, so a
module-scoped fixture (a NameNode pair over real processes, a secure cluster, a JournalNode trio)
would be built again on each worker that receives one of its tests; ``loadscope`` keeps a file
together but cannot put several files on one worker (one SparkSession for every Spark test) and
starts the files with the most tests first, not the longest. Here:

* a unit of work is a group of files (:data:`GROUP_FILES`) or else one file; a unit runs whole on one
  worker, so its module and session fixtures are built once;
* the group ``spark`` holds the files whose tests ask for the ``spark`` fixture (one session per run:
  a cold SparkSession costs 5-20 s of CPU), ``hosts`` the test hosts (one deployment at a time). The
  groups are declared by file because xdist's own ``xdist_group`` mark does not reach the scheduler
  under pytest 9 (xdist 3.8 appends the group to ``item._nodeid``, which pytest 9 no longer reads);
  the conftest checks at collection that a test's ``xdist_group`` mark, or its use of ``spark``,
  agrees with the table, so the table cannot drift from the tests;
* units start longest first (LPT scheduling), from :data:`UNIT_SECONDS`, the serial durations
  measured with ``--durations=0`` (docs/testing.md, "Running the suite in parallel"); a unit not in
  the table is estimated from its tests, 10 s for each ``slow`` one. A long unit that started last
  would leave one worker running alone at the end.

The table only orders the work: a stale entry costs time, never a wrong result.
"""

from __future__ import annotations

from typing import Iterable

#: the groups of files that run in one unit; a file or a directory (ending in "/") per entry
GROUP_FILES: dict[str, tuple[str, ...]] = {
    "spark": ("tests/pipeline/test_end_to_end.py", "tests/pipeline/test_source.py",
              "tests/pipeline/test_transforms.py"),
    "hosts": ("tests/hosts/",),
}
GROUPS = tuple(GROUP_FILES)

#: serial seconds of the long units (measured on the 2-core machine, rounded); the rest are short
UNIT_SECONDS: dict[str, float] = {
    "tests/pipeline/test_cluster.py": 110,
    "spark": 70,
    "hosts": 280,   # issue 27's deployment (~60 s) and issue 28's fault slice (~220 s: a second deployment)
    "tests/sim/test_cluster_sim.py": 55,
    "tests/sim/test_crash_points.py": 45,
    "tests/cluster/test_webhdfs_hadoop.py": 30,
    "tests/sim/test_simulation.py": 25,
    "tests/chaos/test_cluster_chaos.py": 21,
    "tests/cluster/test_cluster_failover.py": 20,
    "tests/sim/test_broken_rules.py": 15,
    "tests/chaos/test_chaos.py": 14,
    "tests/journalnode/test_syncer_process.py": 12,
    "tests/namenode/test_qjm_failover.py": 10,
    "tests/cluster/test_cluster_observers.py": 8,
    "tests/transport/test_memory.py": 7,
    "tests/ha/test_ha_election.py": 7,
    "tests/namenode/test_dfsadmin_processes.py": 6,
    "tests/cluster/test_metrics_exposition.py": 6,
    "tests/namenode/test_cli_processes.py": 6,
    "tests/sim/test_regressions.py": 6,
    "tests/cluster/test_secure_cluster.py": 6,
    "tests/sim/test_loop.py": 5,
    "tests/sim/test_cli.py": 4,
    "tests/ha/test_ha_zkfc_process.py": 4,
    "tests/journalnode/test_process.py": 4,
    "tests/pipeline/test_vdecode.py": 4,
    "tests/operations/test_web_ui.py": 8,
    "tests/operations/test_monitoring_files.py": 4,
}

#: estimate of a unit missing from the table, per test
SLOW_TEST_S = 10.0
OTHER_TEST_S = 0.02


def group_of_file(path: str) -> str | None:
    """The group a test file belongs to (:data:`GROUP_FILES`), or None."""
    for group, entries in GROUP_FILES.items():
        if any(path == e or (e.endswith("/") and path.startswith(e)) for e in entries):
            return group
    return None


def unit_of(nodeid: str) -> str:
    """The unit of work of a test id: its file's group, else its file."""
    path = nodeid.split("::", 1)[0]
    return group_of_file(path) or path


def unit_estimate_s(unit: str, slow_flags: Iterable[bool]) -> float:
    """Seconds a unit is expected to take: the table's figure, else an estimate from its tests."""
    if unit in UNIT_SECONDS:
        return UNIT_SECONDS[unit]
    return sum(SLOW_TEST_S if slow else OTHER_TEST_S for slow in slow_flags)


def longest_first(items: list, unit: "callable", is_slow: "callable") -> list:
    """``items`` reordered so that units come longest first, each unit's tests in their own order.

    Args:
        items: the collected tests, in collection order.
        unit: test -> its unit name.
        is_slow: test -> whether it is marked ``slow``.
    """
    by_unit: dict[str, list] = {}
    for it in items:
        by_unit.setdefault(unit(it), []).append(it)
    cost = {u: unit_estimate_s(u, (is_slow(it) for it in its)) for u, its in by_unit.items()}
    order = sorted(by_unit, key=lambda u: -cost[u])   # stable: ties keep collection order
    return [it for u in order for it in by_unit[u]]


def make_scheduler(config, log):
    """The xdist scheduler of ``--dist loadgroup`` for this suite (see the module's docstring)."""
    from xdist.scheduler import LoadGroupScheduling

    class SuiteScheduling(LoadGroupScheduling):
        """Units are groups or files, handed out in collection order (already longest first)."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    # the workers' collection is ordered longest unit first (conftest); keep that order
    config.option.loadscopereorder = False
    return SuiteScheduling(config, log)
