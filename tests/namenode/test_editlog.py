"""FSEditLog: group commit (one sync serves many callers), durability before return, fatal failure."""

import asyncio

import pytest

from qjournal.errors import FencedError
from qjournal.namenode.editlog import GATHER_MIN_BATCH_TXNS, EditLogFatalError, FSEditLog
from qjournal.namenode.namespace import CallContext, Namespace
from qjournal.namenode.ops import OP_END_LOG_SEGMENT, OP_START_LOG_SEGMENT, decode_op

from qjournal.util.waiting import async_wait_until

from .fakes import MemoryJournal


def make():
    j = MemoryJournal()
    fatal = []
    el = FSEditLog(j, clock_ms=lambda: 1, user="nn", on_fatal=fatal.append)
    return j, el, Namespace(superuser="nn"), fatal


def test_group_commit_many_callers_share_one_sync():
    async def main():
        j, el, ns, _ = make()
        await el.open_for_write(1)
        j.gate = asyncio.Event()
        returned = {}

        async def client(i):
            ctx = CallContext("nn", (), bytes([i]) * 16, i, ts=i)
            txid, _ = await el.log_edit(lambda: ns.mkdirs(ctx, f"/d{i}"))
            await el.log_sync(txid)
            returned[i] = (txid, el.synced_txid)

        tasks = [asyncio.ensure_future(client(i)) for i in range(64)]
        # every client has written; one sync is in flight covering only the first writer
        await async_wait_until(lambda: el.last_written_txid == 1 + 64, "all 64 writes", poll_s=0)
        await async_wait_until(lambda: len(j.sync_calls) == 2, "the first sync to be in flight", poll_s=0)
        assert returned == {}
        j.gate.set()
        await asyncio.gather(*tasks)
        # the START sync, then at most two syncs for 64 callers (the one in flight + one more)
        assert len(j.sync_calls) <= 3, j.sync_calls
        for txid, synced in returned.values():
            assert synced >= txid
        assert el.max_batch_txns >= 63
        txids = [r.txid for r in j.all_records()]
        assert txids == list(range(1, 66))

    asyncio.run(main())


@pytest.mark.parametrize("first_batch", [1, GATHER_MIN_BATCH_TXNS])
def test_after_a_large_batch_the_next_sync_gathers_the_callers_on_their_way(first_batch):
    """A sync after one of >= GATHER_MIN_BATCH_TXNS txns yields before its mark while edits keep coming;
    after a small one it marks at once (one client never waits for others)."""
    async def main():
        j, el, ns, _ = make()
        await el.open_for_write(1)

        async def client(i, late_by):
            for _ in range(late_by):  # arrives this many loop iterations after the first
                await asyncio.sleep(0)
            ctx = CallContext("nn", (), bytes([i]) * 16, i, ts=i)
            txid, _ = await el.log_edit(lambda: ns.mkdirs(ctx, f"/d{i}"))
            await el.log_sync(txid)

        await asyncio.gather(*(client(i, 0) for i in range(first_batch)))  # one sync of first_batch txns
        assert el.max_batch_txns == first_batch
        j.gate = asyncio.Event()  # hold the next sync where it calls the journal, to see its mark
        first = el.last_written_txid + 1
        tasks = [asyncio.ensure_future(client(100 + k, k)) for k in range(3)]
        await async_wait_until(lambda: len(j.sync_calls) == 3 and el.last_written_txid == first + 2,
                               "a sync and 3 writes", poll_s=0)
        mark = j.sync_calls[-1]
        j.gate.set()
        await asyncio.gather(*tasks)
        if first_batch >= GATHER_MIN_BATCH_TXNS:
            assert mark == first + 2  # the two late callers joined the first caller's sync
        else:
            assert mark < first + 2  # the sync did not wait for the late ones
        assert el.synced_txid == first + 2

    asyncio.run(main())


def test_replaying_the_durable_log_gives_the_same_namespace_and_rolls_are_well_formed():
    async def main():
        j, el, ns, _ = make()
        await el.open_for_write(1)
        ctx = CallContext("nn", ts=5)
        for i in range(10):
            txid, _ = await el.log_edit(lambda: ns.mkdirs(ctx, f"/a/b{i}"))
            await el.log_sync(txid)
            if i == 4:
                assert await el.roll() is not None
        await el.close()
        # START, /a + /a/b0, b1..b4, END | START, b5..b9, END
        assert sorted(j.finalized.items()) == [(1, 8), (9, 15)]
        for start, end in j.finalized.items():
            recs = j.durable[start]
            assert recs[0].opcode == OP_START_LOG_SEGMENT and recs[-1].opcode == OP_END_LOG_SEGMENT
            assert recs[-1].txid == end
        replay = Namespace(superuser="nn")
        for r in j.all_records():
            replay.apply(decode_op(r.opcode, r.body, r.txid))
        assert replay.snapshot() == ns.snapshot()

    asyncio.run(main())


def test_fenced_sync_fails_every_waiter_and_later_calls():
    async def main():
        j, el, ns, fatal = make()
        await el.open_for_write(1)
        j.gate = asyncio.Event()
        j.fail_with = FencedError("IPC's epoch 1 is less than the last promised epoch 2")

        async def client(i):
            txid, _ = await el.log_edit(lambda: ns.mkdirs(CallContext("nn", ts=i), f"/x{i}"))
            await el.log_sync(txid)

        tasks = [asyncio.ensure_future(client(i)) for i in range(8)]
        await async_wait_until(lambda: el.last_written_txid == 9, "8 writes", poll_s=0)
        j.gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, EditLogFatalError) for r in results), results
        assert len(fatal) == 1 and isinstance(fatal[0], FencedError)
        with pytest.raises(EditLogFatalError, match="epoch 1 is less"):
            await el.log_edit(lambda: ns.mkdirs(CallContext("nn"), "/y"))
        assert el.synced_txid == 1  # nothing after the START marker was acknowledged

    asyncio.run(main())


SPIN_SCRIPT = r'''
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from tests.namenode.fakes import MemoryJournal
from qjournal.namenode.editlog import FSEditLog
from qjournal.namenode.namespace import CallContext, Namespace

async def main():
    j = MemoryJournal()
    el = FSEditLog(j, clock_ms=lambda: 1, user="nn")
    ns = Namespace(superuser="nn")
    await el.open_for_write(1)
    j.gate = asyncio.Event()
    txid, _ = await el.log_edit(lambda: ns.mkdirs(CallContext("nn", (), b"c" * 16, 1, ts=1), "/d"))
    me = asyncio.current_task()
    waiter = asyncio.ensure_future(el.log_sync(txid))
    # the caller starts the shared syncer (a task of its own) and waits for it
    while not [t for t in asyncio.all_tasks() if t not in (me, waiter)]:
        await asyncio.sleep(0)
    # what a teardown does: every task cancelled at once, the shared syncer among them (before its first step)
    for t in asyncio.all_tasks():
        if t is not me:
            t.cancel()
    res = await asyncio.gather(waiter, return_exceptions=True)
    assert isinstance(res[0], asyncio.CancelledError), res
    # and a caller that was not cancelled gets a new syncer instead of the cancelled one
    j.gate.set()
    other = asyncio.ensure_future(el.log_sync(txid))
    await asyncio.sleep(0)
    for t in asyncio.all_tasks():   # its syncer cancelled too, before its first step
        if t not in (me, other):
            t.cancel()
    await asyncio.wait_for(other, 5)
    assert el.synced_txid >= txid
    print("ok")

asyncio.run(main())
'''


def test_a_cancelled_syncer_never_makes_log_sync_spin(tmp_path):
    """Found by the whole-cluster soak: a sync task cancelled before its first step never cleared
    itself, and log_sync awaited it again and again without ever yielding (a NameNode's shutdown spun
    at 100 % CPU). Run in a subprocess so the old behaviour fails by its deadline instead of hanging."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "spin.py"
    script.write_text(SPIN_SCRIPT)
    r = subprocess.run([sys.executable, str(script), root], capture_output=True, text=True, timeout=20,
                       cwd=root)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


def test_rolls_by_transaction_count():
    """``roll_txns`` (``dfs.namenode.checkpoint.txns`` x ``dfs.namenode.edit.log.autoroll.multiplier.threshold``,
    HDFS's autoroll): a segment is rolled once it holds that many txns, so no segment grows without bound while
    writes go on; every segment is well formed and the log replays to the same namespace."""
    async def main():
        j = MemoryJournal()
        el = FSEditLog(j, clock_ms=lambda: 1, user="nn", roll_txns=5, on_fatal=[].append)
        ns = Namespace(superuser="nn")
        await el.open_for_write(1)
        ctx = CallContext("nn", ts=5)
        for i in range(23):
            txid, _ = await el.log_edit(lambda: ns.mkdirs(ctx, f"/d{i}"))
            await el.log_sync(txid)
        await el.close()   # waits for a roll still in flight
        segments = sorted(j.finalized.items())
        assert len(segments) >= 4, segments
        for (start, end), (next_start, _) in zip(segments, segments[1:]):
            assert next_start == end + 1
            assert end - start + 1 >= 5 + 1, segments          # rolled only once 5 txns were in, plus END
        for start, end in segments:
            recs = j.durable[start]
            assert recs[0].opcode == OP_START_LOG_SEGMENT and recs[-1].opcode == OP_END_LOG_SEGMENT
        replay = Namespace(superuser="nn")
        for r in j.all_records():
            replay.apply(decode_op(r.opcode, r.body, r.txid))
        assert replay.snapshot() == ns.snapshot()

    asyncio.run(main())


@pytest.mark.parametrize("txns, mult, expect", [(20, "0.5", 10), (1000000, "0.5", 500000), (20, "0", 0)])
def test_roll_txns_comes_from_the_checkpoint_keys(tmp_path, txns, mult, expect):
    from qjournal.config import Configuration
    from qjournal.namenode.daemon import NameNode

    conf = Configuration({"dfs.namenode.name.dir": f"file://{tmp_path}/name",
                          "dfs.namenode.checkpoint.txns": str(txns),
                          "dfs.namenode.edit.log.autoroll.multiplier.threshold": mult})
    assert NameNode(conf).roll_txns == expect
