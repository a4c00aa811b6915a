"""The parallel run's plan (tests/parallel.py): units of work, their order, a table that names real units."""

from __future__ import annotations

import pathlib

from tests import parallel

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_a_unit_is_the_files_group_else_the_file():
    assert parallel.unit_of("tests/pipeline/test_transforms.py::test_x") == "spark"
    assert parallel.unit_of("tests/hosts/test_netns.py::test_y[a]") == "hosts"
    assert parallel.unit_of("tests/sim/test_loop.py::test_y") == "tests/sim/test_loop.py"
    assert parallel.unit_of("tests/a/test_b.py::TestC::test_d") == "tests/a/test_b.py"


def test_units_start_longest_first_and_keep_their_tests_in_order():
    items = [("tests/z/test_short.py", "a", False), ("tests/sim/test_crash_points.py", "b", False),
             ("tests/z/test_short.py", "c", False), ("tests/z/test_two_slow.py", "d", True),
             ("spark", "e", True), ("tests/z/test_two_slow.py", "f", True),
             ("tests/sim/test_crash_points.py", "g", False)]
    got = parallel.longest_first(items, unit=lambda it: it[0], is_slow=lambda it: it[2])
    assert [it[1] for it in got] == ["e", "b", "g", "d", "f", "a", "c"]


def test_the_tables_name_units_and_files_that_exist():
    for unit in parallel.UNIT_SECONDS:
        assert unit in parallel.GROUPS or (ROOT / unit).is_file(), f"{unit}: no such group or test file"
    for group, entries in parallel.GROUP_FILES.items():
        for e in entries:
            assert (ROOT / e).is_dir() if e.endswith("/") else (ROOT / e).is_file(), f"{group}: {e} does not exist"
