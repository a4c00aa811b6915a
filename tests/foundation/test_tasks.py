"""Background tasks never die silently (qjournal.util.tasks, rules 1-4)."""

import asyncio

import pytest

from qjournal.errors import InvariantViolation
from qjournal.util import tasks


@pytest.fixture
def fatal_calls():
    calls = []
    previous = tasks.set_fatal_handler(lambda message, exc: calls.append((message, exc)))
    yield calls
    tasks.set_fatal_handler(previous)


async def _boom(exc):
    await asyncio.sleep(0)
    raise exc


def _run_until_done(coro_fn):
    async def main():
        t = coro_fn()
        await asyncio.wait({t})
    asyncio.run(main())


def test_a_crash_goes_to_the_owner_and_is_logged(fatal_calls, caplog):
    crashes = []
    _run_until_done(lambda: tasks.spawn(_boom(ValueError("x")), name="loop-a", on_crash=crashes.append))
    assert [type(e) for e in crashes] == [ValueError]
    assert fatal_calls == []
    assert any(r.levelname == "ERROR" and "loop-a died" in r.getMessage() for r in caplog.records)


def test_a_crash_nobody_owns_ends_the_process(fatal_calls):
    _run_until_done(lambda: tasks.spawn(_boom(ValueError("y")), name="loop-b"))
    assert [(m, type(e)) for m, e in fatal_calls] == [("background task loop-b died", ValueError)]


def test_a_broken_invariant_ends_the_process_even_with_an_owner(fatal_calls):
    crashes = []
    _run_until_done(lambda: tasks.spawn(_boom(InvariantViolation("z")), name="loop-c",
                                        on_crash=crashes.append))
    assert crashes == []
    assert [type(e) for _, e in fatal_calls] == [InvariantViolation]


def test_cancellation_and_a_clean_end_are_not_crashes(fatal_calls):
    crashes = []

    async def main():
        forever = tasks.spawn(asyncio.Event().wait(), name="forever", on_crash=crashes.append)
        done = tasks.spawn(asyncio.sleep(0), name="done", on_crash=crashes.append)
        await asyncio.wait({done})
        await tasks.cancel_and_wait(forever)
    asyncio.run(main())
    assert crashes == [] and fatal_calls == []
