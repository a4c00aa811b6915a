"""The observer read rule (``observer_rules.py``) as a table, and the applied-txid waiters (``state_id.py``)."""

import asyncio

import pytest

from qjournal.namenode.observer_rules import ReadDecision, observer_read_decision
from qjournal.namenode.state_id import AppliedTxidWaiters

SERVE, WAIT, RETRY = ReadDecision.SERVE, ReadDecision.WAIT, ReadDecision.RETRY_ELSEWHERE

# (client state id, applied txid, waited ms, wait limit ms) -> decision; every rule and its edges
TABLE = [
    (None, 0, 0, 1000, SERVE),        # rule 1: a client that does not align
    (None, 5, 5000, 0, SERVE),
    (5, 5, 0, 1000, SERVE),           # rule 2: caught up exactly
    (4, 5, 0, 0, SERVE),              # rule 2: ahead; no wait allowed does not matter
    (6, 5, 0, 1000, WAIT),            # rule 3: behind, time left
    (6, 5, 999, 1000, WAIT),
    (6, 5, 1000, 1000, RETRY),        # rule 4: the wait ran out
    (6, 5, 0, 0, RETRY),              # rule 4: a zero limit refuses at once (invariant 2)
    (10 ** 9, 0, 0, 1000, WAIT),
]


@pytest.mark.parametrize("client,applied,waited,limit,want", TABLE)
def test_observer_read_decision(client, applied, waited, limit, want):
    assert observer_read_decision(client, applied, waited, limit) == want


def test_waiters_wake_on_notify_in_txid_order_and_time_out():
    async def main():
        w = AppliedTxidWaiters(applied_txid=3)
        assert await w.wait_for(3, 0)            # already applied: no wait even with no time
        assert not await w.wait_for(4, 0)        # not applied and no time to wait
        woke = []

        async def reader(txid):
            ok = await w.wait_for(txid, 5000)
            woke.append((txid, ok))

        tasks = [asyncio.create_task(reader(t)) for t in (7, 5, 6)]
        await asyncio.sleep(0)
        assert len(w) == 3
        w.notify(6)
        await asyncio.wait_for(asyncio.gather(tasks[1], tasks[2]), 5)
        assert sorted(woke) == [(5, True), (6, True)] and len(w) == 1 and not tasks[0].done()
        w.notify(7)
        await asyncio.gather(*tasks)
        assert sorted(woke) == [(5, True), (6, True), (7, True)] and len(w) == 0
        assert not await w.wait_for(9, 10)       # times out, and leaves nothing behind
        assert len(w) == 0

    asyncio.run(main())


def test_waiters_are_bounded():
    async def main():
        w = AppliedTxidWaiters(applied_txid=0, max_waiters=1)
        t = asyncio.create_task(w.wait_for(1, 5000))
        await asyncio.sleep(0)
        assert not await w.wait_for(1, 5000)     # no room: refused at once, not queued
        w.notify(1)
        assert await t

    asyncio.run(main())
