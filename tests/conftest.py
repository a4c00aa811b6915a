"""Test-run wide policy.

* A process-ending failure inside a test fails that test instead: ``qjournal.util.tasks.fatal``
  ends the process (a broken invariant, a background task nobody can restart). In-process daemons
  share the pytest process, so for the test run the fatal handler records the failure, and every
  test checks afterwards that none was recorded.
* Parallel runs (``make test``: pytest-xdist, ``-n N --dist loadgroup``): the unit of work is an
  group of files or a file, Spark tests share one group, long units start first
  (``tests/parallel.py``; the isolation rules a test follows are in docs/testing.md).
* Every JVM a test starts (Spark's driver, executors and standalone daemons, Hadoop's FsShell,
  ZooKeeper) compiles with C1 only (``JAVA_TOOL_OPTIONS``, unless the caller set it): the tests' JVMs
  live for seconds, and C2's compiler threads cost more CPU than they save in that time. Measured on
  the 2-core machine: ``tests/pipeline/test_transforms.py`` 58.4 -> 37.7 CPU seconds of the whole
  process tree, ``tests/pipeline/test_cluster.py`` with ``tests/cluster/test_webhdfs_hadoop.py`` 250 -> 174
  (docs/testing.md). The shipped daemons keep the JVM's defaults, but for ZooKeeper, which
  the project starts with the same flag.
"""

import os

import pytest

from qjournal.util import tasks

from tests import parallel

_FATAL: list = []

os.environ.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1")


def pytest_configure(config):
    # registered here too, so that the marks below are known with or without the xdist plugin
    config.addinivalue_line("markers", "xdist_group(name): run in one unit of work with the group's other tests")


def _declared_group(item) -> str | None:
    """The group a test asks for: its ``xdist_group`` mark, or ``spark`` when it uses that fixture."""
    mark = item.get_closest_marker("xdist_group")
    if mark is not None:
        return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
    if "spark" in getattr(item, "fixturenames", ()):
        return "spark"   # one SparkSession per run
    return None


def _unit(item) -> str:
    return parallel.unit_of(item.nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        declared = _declared_group(item)
        if declared is not None and declared != parallel.group_of_file(item.nodeid.split("::", 1)[0]):
            raise pytest.UsageError(f"{item.nodeid} belongs to the group {declared!r}: list its file under "
                                    f"{declared!r} in tests/parallel.py GROUP_FILES (groups: {parallel.GROUPS})")
    if hasattr(config, "workerinput"):   # an xdist worker: the scheduler hands units out in this order
        items[:] = parallel.longest_first(items, _unit, lambda it: it.get_closest_marker("slow") is not None)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") == "loadgroup":
        return parallel.make_scheduler(config, log)
    return None


def pytest_addoption(parser):
    parser.addoption("--rewrite", action="store_true", default=False,
                     help="regenerate the expected traces of the scenario files (tests/testdata)")


@pytest.fixture
def rewrite(request) -> bool:
    """True when the run regenerates expected traces (``--rewrite``)."""
    return bool(request.config.getoption("--rewrite"))


def _record_fatal(message, exc):
    _FATAL.append((message, exc))


tasks.set_fatal_handler(_record_fatal)


@pytest.fixture(autouse=True)
def no_fatal_error():
    """Fail the test if anything in it called ``qjournal.util.tasks.fatal``."""
    start = len(_FATAL)
    yield
    new = _FATAL[start:]
    del _FATAL[start:]
    if new:
        pytest.fail("fatal error(s) inside the test: " + "; ".join(f"{m}: {e!r}" for m, e in new))
