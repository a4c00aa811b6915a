"""Tailing the in-progress segment over RPC from real in-process JournalNodes' edit caches
(HDFS-13150): answers, misses, fall-back to streaming, restarts, a lagging minority."""

import asyncio

from qjournal.config import Configuration

from qjournal.util.waiting import async_wait_until

from .memcluster import FAST, NS, MemCluster
from .test_qjm_memory import body, run, write_segment


async def tail(r, from_txid):
    stream = await r.open_input(from_txid, None, True)
    return [(x.txid, x.body) async for x in stream]


async def wait_tail(r, from_txid, last):
    """Tail until ``last`` is readable (the committed txid reaches the nodes by a notice)."""
    async def tailed():
        got = await tail(r, from_txid)
        return got if got and got[-1][0] >= last else None
    return await async_wait_until(tailed, f"a tail from {from_txid} to reach txid {last}", 10, poll_s=0.005)


async def writer(c):
    q = c.qjm()
    await q.format(NS)
    await q.recover_unfinalized_segments()
    return q


def test_tailing_answers_from_the_caches_including_the_last_batch(tmp_path):
    async def sc(c):
        q = await writer(c)
        await write_segment(q, 1, 30, finalize=False, per_sync=4)
        r = c.qjm()
        got = await wait_tail(r, 1, 30)
        assert got == [(t, body(t)) for t in range(1, 31)]
        assert r.rpc_reads >= 1 and r.rpc_fallbacks == 0
        assert await tail(r, 31) == []  # nothing new: an empty answer, not a fall-back
        assert r.rpc_fallbacks == 0
        # the caches served it, and no node served past its committed txid
        for name in c.names:
            j = c.journal(name)
            assert j.edit_cache.hits >= 1
            assert j.edit_cache.txns_served <= 30 * 2
        await q.close(); await r.close()
    run(tmp_path, sc)


def test_full_answers_are_followed_by_more_rounds(tmp_path):
    async def sc(c):
        q = await writer(c)
        await write_segment(q, 1, 35, finalize=False, per_sync=5)
        r = c.qjm(settings=FAST.with_overrides(tail_rpc_max_txns=10))
        got = await wait_tail(r, 3, 35)
        assert [t for t, _ in got] == list(range(3, 36))
        await q.close(); await r.close()
    run(tmp_path, sc)


def test_a_txid_older_than_the_caches_falls_back_to_streaming(tmp_path):
    async def sc(c):
        q = await writer(c)
        await write_segment(q, 1, 10)
        await write_segment(q, 11, 20, finalize=False)
        r = c.qjm()
        await wait_tail(r, 11, 20)
        for name in c.names:  # forget the first segment's edits, as eviction would
            cache = c.journal(name).edit_cache
            cache.clear()
        got = await tail(r, 1)
        assert [t for t, _ in got] == list(range(1, 21))
        assert r.rpc_fallbacks >= 1 and "not in the edit cache" in r.last_rpc_miss
        await q.close(); await r.close()
    run(tmp_path, sc)


def test_restarted_journalnodes_serve_from_disk(tmp_path):
    async def sc(c):
        q = await writer(c)
        await write_segment(q, 1, 20, finalize=False)
        r = c.qjm()
        await wait_tail(r, 1, 20)
        # one node restarted mid-segment: the other two caches still answer
        await c.stop(c.names[0]); await c.start(c.names[0])
        assert [t for t, _ in await tail(r, 5)] == list(range(5, 21))
        fallbacks = r.rpc_fallbacks
        # two of three restarted: no majority of caches; the segments are streamed from disk
        await c.stop(c.names[1]); await c.start(c.names[1])
        assert [t for t, _ in await tail(r, 5)] == list(range(5, 21))
        assert r.rpc_fallbacks == fallbacks + 1
        await q.close(); await r.close()
    run(tmp_path, sc)


def test_a_lagging_minority_does_not_stop_the_tail(tmp_path):
    async def sc(c):
        q = await writer(c)
        await write_segment(q, 1, 5, finalize=False)
        await c.stop(c.names[2])
        s = q._stream
        for t in range(6, 16):
            s.write(t, body(t))
        s.mark()
        await s.sync()
        r = c.qjm()
        got = await wait_tail(r, 1, 15)
        assert [t for t, _ in got] == list(range(1, 16))
        await q.close(); await r.close()
    run(tmp_path, sc)


def test_cache_disabled_streams(tmp_path):
    async def sc(c):
        q = await writer(c)
        await write_segment(q, 1, 8, finalize=False)
        r = c.qjm()
        got = await tail(r, 1)
        assert [t for t, _ in got][-1] <= 8
        assert r.rpc_fallbacks == 1 and "disabled" in r.last_rpc_miss
        await q.close(); await r.close()

    async def main():
        c = MemCluster(str(tmp_path), 3)
        c.conf = Configuration({"qjournal.journalnode.fsync": "false",
                                "dfs.journalnode.edit-cache-size.bytes": "0"})
        await c.start()
        try:
            await sc(c)
        finally:
            await c.close()
    asyncio.run(main())
