"""Seed 000 §2.10.1 … §2.10.7, one test each, with the recovered length the seed says is correct.

The JournalNode states are built directly through the real per-journal core of in-process
JournalNodes; recovery is the real QuorumJournalManager over the in-memory network.
"""

import asyncio

import pytest

from qjournal.util.waiting import async_wait_until

from .faults import fail_calls
from .memcluster import MemCluster
from .scenario_helpers import build, check_recovered, read_bodies, recover, write_after


def run(tmp_path, scenario):
    async def main():
        c = MemCluster(str(tmp_path))
        await c.start()
        q = c.qjm()
        from .memcluster import NS
        await q.format(NS)
        await q.close()
        try:
            await scenario(c)
        finally:
            await c.close()
    asyncio.run(main())


def test_2_10_1_inprogress_inconsistent_majority_succeeded(tmp_path):
    """JN2 and JN3 got txids 151-153, JN1 lags at 150: recover to 153 (rule 3c)."""
    async def sc(c):
        j1, j2, j3 = c.names
        await build(c, {j1: [("ip", 101, 150, 1)], j2: [("ip", 101, 153, 1)], j3: [("ip", 101, 153, 1)]})
        q = await recover(c)
        await check_recovered(c, 101, 153, [j1, j2, j3], {t: 1 for t in range(101, 154)})
        await write_after(q, 154)
        assert len(await read_bodies(q, 101)) == 56
        await q.close()
    run(tmp_path, sc)


@pytest.mark.parametrize("seen,end", [((0, 1), 153), ((0, 2), 150), ((1, 2), 153)],
                         ids=["JN1+JN2->153", "JN1+JN3->150", "JN2+JN3->153"])
def test_2_10_2_inprogress_inconsistent_no_majority(tmp_path, seen, end):
    """JN1 150, JN2 153, JN3 125: the answer depends on which two nodes recovery sees."""
    async def sc(c):
        names = c.names
        await build(c, {names[0]: [("ip", 101, 150, 1)], names[1]: [("ip", 101, 153, 1)],
                        names[2]: [("ip", 101, 125, 1)]})
        down = [n for i, n in enumerate(names) if i not in seen]
        await c.stop(*down)
        q = await recover(c)
        participants = [names[i] for i in seen]
        await check_recovered(c, 101, end, participants, {t: 1 for t in range(101, end + 1)})
        await write_after(q, end + 1)
        await q.close()
        # the node that was down comes back: a later writer keeps the decision
        await c.start(*down)
        q2 = await recover(c)
        await check_recovered(c, 101, end, participants)
        assert sorted(await read_bodies(q2, 101)) == list(range(101, end + 4))
        await q2.close()
    run(tmp_path, sc)


def test_2_10_3_finalized_inconsistent_majority_succeeded(tmp_path):
    """JN1 and JN2 finalized 101-150, JN3 still in progress at 145: JN3 syncs to 150 (rule 2)."""
    async def sc(c):
        j1, j2, j3 = c.names
        await build(c, {j1: [("fin", 101, 150, 1)], j2: [("fin", 101, 150, 1)], j3: [("ip", 101, 145, 1)]})
        await c.stop(j2)  # any quorum sees a finalized copy; take JN1 + JN3
        q = await recover(c)
        await check_recovered(c, 101, 150, [j1, j3], {t: 1 for t in range(101, 151)})
        await write_after(q, 151)
        await q.close()
    run(tmp_path, sc)


@pytest.mark.parametrize("seen", [(0, 2), (1, 2)], ids=["JN1-seen", "JN1-unseen"])
def test_2_10_4_finalized_inconsistent_no_majority(tmp_path, seen):
    """Only JN1 finalized 101-150; JN2 in progress at 150, JN3 at 125: recover to 150 either way."""
    async def sc(c):
        names = c.names
        await build(c, {names[0]: [("fin", 101, 150, 1)], names[1]: [("ip", 101, 150, 1)],
                        names[2]: [("ip", 101, 125, 1)]})
        await c.stop(*[n for i, n in enumerate(names) if i not in seen])
        q = await recover(c)
        await check_recovered(c, 101, 150, [names[i] for i in seen], {t: 1 for t in range(101, 151)})
        await write_after(q, 151)
        await q.close()
    run(tmp_path, sc)


def test_2_10_5_start_inconsistent_majority_not_started(tmp_path):
    """101-150 finalized everywhere; JN1 also has an empty edits_inprogress_151, which counts as
    absent: nothing to recover, and the next writer starts 151."""
    async def sc(c):
        j1, j2, j3 = c.names
        await build(c, {j1: [("fin", 101, 150, 1), ("ip", 151, 150, 1)],
                        j2: [("fin", 101, 150, 1)], j3: [("fin", 101, 150, 1)]})
        q = await recover(c)
        await check_recovered(c, 101, 150, [j1, j2, j3])
        await write_after(q, 151)
        assert sorted(await read_bodies(q, 101)) == list(range(101, 154))
        await q.close()
    run(tmp_path, sc)


def test_2_10_6_first_batch_inconsistent_newer_writer_wins(tmp_path):
    """Epoch 1 wrote 151-153 only to JN1. A writer of epoch 2 recovered with JN2+JN3 (151 was
    empty there), committed txid 151 and crashed. Recovery must keep epoch 2's 151, not JN1's
    longer 153 (rule 3b: last writer epoch)."""
    async def sc(c):
        j1, j2, j3 = c.names
        await build(c, {j1: [("fin", 101, 150, 1), ("ip", 151, 153, 1)],
                        j2: [("fin", 101, 150, 1), ("ip", 151, 150, 1)],
                        j3: [("fin", 101, 150, 1), ("ip", 151, 150, 1)]})
        await c.stop(j1)
        q2 = await recover(c)  # epoch 2
        assert q2.epoch == 2
        s = await q2.start_log_segment(151)
        from .scenario_helpers import body
        s.write(151, body(2, 151)); s.mark(); await s.sync()
        await s.abort()
        await q2.close()  # the epoch-2 writer crashes without finalizing
        await c.start(j1)
        q3 = await recover(c)
        await check_recovered(c, 151, 151, [j2, j3], {151: 2})
        await write_after(q3, 152)
        got = await read_bodies(q3, 151)
        assert got[151] == body(2, 151) and got[152] == body(3, 152)
        await q3.close()
    run(tmp_path, sc)


def test_2_10_7_multiple_recoveries_first_failed(tmp_path):
    """JN1 150, JN2 153, JN3 125. A first recovery sees JN1+JN3, accepts 150 on both, and its
    finalize reaches only JN3. A second recovery that sees only JN1+JN2 must still decide 150
    (JN1's accepted-in-epoch beats JN2's longer log), consistent with JN3's finalized copy."""
    from qjournal.errors import QuorumError

    from .scenario_helpers import Core

    async def sc(c):
        j1, j2, j3 = c.names
        await build(c, {j1: [("ip", 101, 150, 1)], j2: [("ip", 101, 153, 1)], j3: [("ip", 101, 125, 1)]})
        await c.stop(j2)
        plan = fail_calls({j1: lambda i, m: m == "finalize_log_segment"})
        q = c.qjm(connector_factory=plan.connector_factory(c.network))
        with pytest.raises(QuorumError, match="finalize_log_segment"):
            await q.recover_unfinalized_segments()

        async def j3_finalized():
            return (101, 150, False) in await Core(c, j3).segments()
        # the finalize sent to JN3 is still in flight when the quorum is known lost
        await async_wait_until(j3_finalized, "JN3 to finalize 101-150", 5, poll_s=0)
        await q.close()
        assert (101, 150, True) in await Core(c, j1).segments()  # accepted, not finalized
        await c.stop(j3)
        await c.start(j2)
        q = await recover(c)
        await check_recovered(c, 101, 150, [j1, j2], {t: 1 for t in range(101, 151)})
        await c.start(j3)
        await check_recovered(c, 101, 150, [j1, j2, j3])
        await write_after(q, 151)
        await q.close()
    run(tmp_path, sc)
