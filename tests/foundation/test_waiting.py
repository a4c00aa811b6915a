"""qjournal.util.waiting: the condition's value comes back; a timeout names what was waited for."""

from __future__ import annotations

import asyncio

import pytest

from qjournal.util.waiting import WaitTimeout, async_wait_until, wait_until


def test_returns_the_first_truthy_value():
    answers = iter([0, None, "", "ready"])
    assert wait_until(lambda: next(answers), "the third poll", timeout_s=5, poll_s=0) == "ready"


def test_a_timeout_names_what_was_awaited_and_the_last_value():
    with pytest.raises(WaitTimeout, match=r"timed out after 0s waiting for the moon \(last value: \[\]\)"):
        wait_until(lambda: [], "the moon", timeout_s=0, poll_s=0)


def test_async_conditions_may_be_awaitable_and_polls_may_only_yield():
    async def main():
        ev = asyncio.Event()
        asyncio.get_running_loop().call_soon(ev.set)

        async def is_set():
            return ev.is_set() and 7
        assert await async_wait_until(is_set, "the event", timeout_s=5, poll_s=0) == 7
        with pytest.raises(WaitTimeout, match="never"):
            await async_wait_until(lambda: False, "never", timeout_s=0, poll_s=0)
    asyncio.run(main())


def test_the_old_argument_order_is_refused_by_name():
    with pytest.raises(TypeError, match=r"wait_until\(cond, what, timeout_s\)"):
        wait_until(lambda: True, 30, "what")
