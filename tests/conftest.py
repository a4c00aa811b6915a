"""Test-run wide policy: a process-ending failure inside a test fails that test instead.

``qjournal.util.tasks.fatal`` ends the process (a broken invariant, a background task
nobody can restart). In-process daemons share the pytest process, so for the test run the
fatal handler records the failure, and every test checks afterwards that none was recorded.
"""

import pytest

from qjournal.util import tasks

_FATAL: list = []


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
