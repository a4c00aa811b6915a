"""The QuorumJournalManager against real in-process JournalNodes over the in-memory network:
the reference §6.2 scenarios that apply, in our own words."""

import asyncio

import pytest

from qjournal.errors import (FencedError, GapInTransactionsError, JournalAlreadyFormattedError,
                             JournalError, QuorumError, EpochError)
from qjournal.transport import RpcClient
from qjournal.journalmanager.streams import SegmentInfo

from qjournal.util.waiting import async_wait_until

from .memcluster import NS, MemCluster


def body(txid: int) -> bytes:
    return b"edit-%d" % txid


async def write_segment(q, first: int, last: int, finalize: bool = True, per_sync: int = 1):
    s = await q.start_log_segment(first)
    t = first
    while t <= last:
        for u in range(t, min(t + per_sync, last + 1)):
            s.write(u, body(u))
        s.mark()
        await s.sync()
        t += per_sync
    if finalize:
        await q.finalize_log_segment(first, last)
    return s


async def read_all(q, from_txid=1, to_txid=None, in_progress_ok=False):
    stream = await q.open_input(from_txid, to_txid, in_progress_ok)
    return [(r.txid, r.body) async for r in stream]


def run(tmp_path, scenario, n=3):
    async def main():
        c = MemCluster(str(tmp_path), n)
        await c.start()
        try:
            return await scenario(c)
        finally:
            await c.close()
    return asyncio.run(main())


def test_single_writer_write_finalize_read(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        assert q.epoch == 1
        await write_segment(q, 1, 3)
        await write_segment(q, 4, 4)
        assert await q.get_manifest(1) == [SegmentInfo(1, 3, False), SegmentInfo(4, 4, False)]
        r = c.qjm()
        got = await read_all(r)
        await q.close(); await r.close()
        return got
    assert run(tmp_path, sc) == [(t, body(t)) for t in range(1, 5)]


def test_format_and_has_some_data(tmp_path):
    async def sc(c):
        q = c.qjm()
        assert await q.has_some_data() is False
        assert await q.is_formatted() is False
        await q.format(NS)
        assert await q.has_some_data() is True
        assert await q.is_formatted() is True
        with pytest.raises(QuorumError) as ei:
            await q.format(NS)
        assert "JournalAlreadyFormattedError" in str(ei.value)
        await q.format(NS, force=True)
        await q.close()
    run(tmp_path, sc)


def test_reader_sees_only_finalized_segments(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        r = c.qjm()
        assert await read_all(r) == []
        await write_segment(q, 1, 3)
        await write_segment(q, 4, 6, finalize=False)
        assert [t for t, _ in await read_all(r)] == [1, 2, 3]
        await q.finalize_log_segment(4, 6)
        assert [t for t, _ in await read_all(r)] == [1, 2, 3, 4, 5, 6]
        # in-progress reading is bounded by the committed txid
        await write_segment(q, 7, 8, finalize=False)
        assert [t for t, _ in await read_all(r, in_progress_ok=True)][-1] <= 8
        await q.close(); await r.close()
    run(tmp_path, sc)


def test_one_jn_missing_segments_still_readable(tmp_path):
    # reference §6.2 testOneJNMissingSegments (HDFS-3725)
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        await write_segment(q, 1, 3)
        await c.stop(c.names[0])
        await write_segment(q, 4, 6)
        await c.start(c.names[0])
        await write_segment(q, 7, 9)
        await c.stop(c.names[1])
        r = c.qjm()
        got = [t for t, _ in await read_all(r)]
        await q.close(); await r.close()
        return got
    assert run(tmp_path, sc) == list(range(1, 10))


def test_manifest_with_majority_down_fails(tmp_path):
    # reference §6.2 testSelectInputStreamsMajorityDown (HDFS-3891)
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await c.stop(c.names[0], c.names[1])
        with pytest.raises(QuorumError, match="too many errors"):
            await q.get_manifest(1)
        await q.close()
    run(tmp_path, sc)


def test_crash_at_beginning_of_segment(tmp_path):
    # reference §6.2 testCrashAtBeginningOfSegment: segment 4 started everywhere, no txns
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        await write_segment(q, 1, 3)
        s = await q.start_log_segment(4)
        await s.abort()
        await q.close()
        q2 = c.qjm()
        await q2.recover_unfinalized_segments()
        await write_segment(q2, 4, 6)
        got = [t for t, _ in await read_all(q2)]
        await q2.close()
        return got
    assert run(tmp_path, sc) == list(range(1, 7))


def test_change_writers_logs_in_sync(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        await write_segment(q, 1, 3, finalize=False)
        await q.close()
        q2 = c.qjm()
        await q2.recover_unfinalized_segments()
        assert q2.epoch == 2
        m = await q2.get_manifest(1)
        await q2.close()
        return m
    assert run(tmp_path, sc) == [SegmentInfo(1, 3, False)]


def test_fenced_writer_fails_with_typed_error_and_refuses_more(tmp_path):
    async def sc(c):
        q1 = c.qjm()
        await q1.format(NS)
        await q1.recover_unfinalized_segments()
        s = await write_segment(q1, 1, 2, finalize=False)
        q2 = c.qjm()
        await q2.recover_unfinalized_segments()  # fences q1, finalizes 1-2
        s.write(3, body(3))
        s.mark()
        with pytest.raises(FencedError) as ei:
            await s.sync()
        assert "epoch" in str(ei.value) and "2" in str(ei.value)
        with pytest.raises(EpochError):
            s.write(4, body(4))
        with pytest.raises(EpochError):
            await q1.start_log_segment(3)
        await write_segment(q2, 3, 5)
        got = [t for t, _ in await read_all(q2)]
        await q1.close(); await q2.close()
        return got
    assert run(tmp_path, sc) == [1, 2, 3, 4, 5]


def test_gap_in_transactions_is_reported(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        await write_segment(q, 1, 3)
        await write_segment(q, 4, 6)
        await q.purge_logs_older_than(4)
        await asyncio.gather(*list(q._bg))
        with pytest.raises(GapInTransactionsError, match="txid 1"):
            await read_all(q, 1)
        assert [t for t, _ in await read_all(q, 4)] == [4, 5, 6]
        await q.close()
    run(tmp_path, sc)


def test_write_survives_one_dead_node_and_it_rejoins_at_next_segment(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        s = await q.start_log_segment(1)
        s.write(1, body(1)); s.mark(); await s.sync()
        await c.stop(c.names[2])
        for t in range(2, 5):
            s.write(t, body(t)); s.mark(); await s.sync()
        await c.start(c.names[2])
        s.write(5, body(5)); s.mark(); await s.sync()
        lg = q.loggers.by_name(c.names[2])
        assert lg.out_of_sync
        await q.finalize_log_segment(1, 5)
        await write_segment(q, 6, 7)
        assert not lg.out_of_sync and lg.highest_acked_txid == 7
        await q.close()
    run(tmp_path, sc)


def test_recover_twice_is_refused_and_uri_errors(tmp_path):
    from qjournal.client.qjm import parse_qjournal_uri
    from qjournal.errors import ConfigError
    assert parse_qjournal_uri("qjournal://a:1;b;c:3/j") == ([("a", 1), ("b", 8485), ("c", 3)], "j")
    for bad in ["file:///x", "qjournal://a:1/", "qjournal://a:1/.x", "qjournal://a:x/j", "qjournal://a:1;a:1/j", "qjournal:///j"]:
        with pytest.raises(ConfigError):
            parse_qjournal_uri(bad)

    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        with pytest.raises(JournalError, match="called twice"):
            await q.recover_unfinalized_segments()
        await q.close()
    run(tmp_path, sc)


def test_ns_info_learnt_from_journal_nodes(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.close()
        q2 = c.qjm(ns_info=None)
        await q2.recover_unfinalized_segments()
        assert q2.ns_info == NS
        await write_segment(q2, 1, 2)
        await q2.close()
    run(tmp_path, sc)


def test_overlapping_syncs_group_commit(tmp_path):
    """Several syncs in flight at once: each returns after its own batch is on a quorum, the
    committed txid only grows, and the log holds every txid once, in order."""
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        s = await q.start_log_segment(1)
        syncs = []
        for t in range(1, 21):
            s.write(t, body(t))
            s.mark()
            syncs.append(asyncio.ensure_future(s.sync()))
        await asyncio.gather(*syncs)
        assert s.last_synced_txid == 20 and q.committed_txid == 20
        await q.finalize_log_segment(1, 20)
        r = c.qjm()
        got = await read_all(r)
        await q.close(); await r.close()
        return got
    assert run(tmp_path, sc) == [(t, body(t)) for t in range(1, 21)]


def test_a_node_that_never_answers_adds_no_wait_and_its_queue_stays_bounded(tmp_path):
    """Node 2 accepts connections but never answers a journal call (a stopped process). Every
    sync still returns on the other two; its queue fills to the byte limit, after which its
    batches are refused at once (LoggerTooFarBehindError), without ever blocking a sync."""
    from qjournal.transport import RpcClient

    from .memcluster import FAST

    async def sc(c):
        q0 = c.qjm()
        await q0.format(NS)
        await q0.close()
        stuck = c.names[2]
        never = asyncio.get_running_loop().create_future()

        class Hanging:
            def __init__(self, client):
                self._c = client

            @property
            def is_closed(self):
                return self._c.is_closed

            async def call(self, method, timeout_ms=None, **kw):
                if method == "journal":
                    await never  # no answer, no timeout (the write-txns timeout is an hour)
                return await self._c.call(method, timeout_ms=timeout_ms, **kw)

            async def close(self):
                await self._c.close()

        def factory(name):
            async def connect():
                cl = await RpcClient.connect_memory(c.network, name, src="qjm")
                return Hanging(cl) if name == stuck else cl
            return connect
        settings = FAST.with_overrides(write_txns_timeout_ms=3_600_000, queued_edits_limit_mb=1)
        q = c.qjm(settings=settings, connector_factory=factory)
        await q.recover_unfinalized_segments()
        s = await q.start_log_segment(1)
        lg = q.loggers.by_name(stuck)
        big = b"x" * 100_000
        for t in range(1, 31):
            s.write(t, big)
            s.mark()
            await s.sync()  # returns although node 2 never answers
            if lg.queued_bytes > settings.queue_size_limit_bytes:
                raise AssertionError("queue passed its byte limit")
        assert s.last_synced_txid == 30
        # full: the later batches were refused (LoggerTooFarBehindError), none waited
        assert settings.queue_size_limit_bytes - 2 * 100_100 < lg.queued_bytes <= settings.queue_size_limit_bytes
        assert lg.highest_acked_txid == -12345  # it never acknowledged anything
        never.cancel()
        await q.close(drain_timeout_ms=0)
    run(tmp_path, sc)


def test_sync_with_nothing_new_waits_for_an_overlapping_sync(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        s = await q.start_log_segment(1)
        s.write(1, body(1))
        s.mark()
        first = asyncio.ensure_future(s.sync())
        await async_wait_until(lambda: s.pending_bytes == 0, "the first sync to dispatch txid 1", poll_s=0)
        assert s.last_synced_txid == 0
        await s.sync()  # nothing new: returns only once txid 1 is durable
        assert s.last_synced_txid == 1
        await first
        await q.close()
    run(tmp_path, sc)


def test_five_nodes_tolerate_two_failures(tmp_path):
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        assert q.loggers.quorum_string == "3/5"
        await write_segment(q, 1, 3)
        await c.stop(c.names[0], c.names[3])
        await write_segment(q, 4, 6, finalize=False)
        await q.close()
        q2 = c.qjm()
        await q2.recover_unfinalized_segments()
        got = [t for t, _ in await read_all(q2)]
        await c.stop(c.names[1])
        with pytest.raises(QuorumError):
            await q2.get_manifest(1)
        await q2.close()
        return got
    assert run(tmp_path, sc, n=5) == [1, 2, 3, 4, 5, 6]


def test_even_number_of_nodes_warns(tmp_path, caplog):
    import logging

    from qjournal.client.qjm import QuorumJournalManager
    with caplog.at_level(logging.WARNING, logger="qjournal.client.qjm"):
        QuorumJournalManager("qjournal://a:1;b:2;c:3;d:4/j")
    assert any("even number (4)" in r.getMessage() for r in caplog.records)


def test_a_node_with_malformed_answers_counts_as_failed_and_never_crashes_the_client(tmp_path):
    """Node 2 answers every result-carrying call with a malformed value. The AsyncLogger decodes
    answers, so each is a ProtocolError for that node only: epoch, recovery, writes, the manifest
    and reads go on with the other two, and the status names the node's error."""
    async def sc(c):
        q0 = c.qjm()
        await q0.format(NS)
        await q0.recover_unfinalized_segments()
        await write_segment(q0, 1, 3, finalize=False)
        await q0.close()
        liar = c.names[2]

        class Garbling:
            def __init__(self, client):
                self._c = client

            @property
            def is_closed(self):
                return self._c.is_closed

            async def call(self, method, timeout_ms=None, **kw):
                res = await self._c.call(method, timeout_ms=timeout_ms, **kw)
                return {"garbled": True} if isinstance(res, dict) else res

            async def close(self):
                await self._c.close()

        def factory(name):
            async def connect():
                cl = await RpcClient.connect_memory(c.network, name, src="qjm")
                return Garbling(cl) if name == liar else cl
            return connect
        q = c.qjm(connector_factory=factory)
        await q.recover_unfinalized_segments()  # new epoch and recovery of 1-3 without node 2
        assert q.epoch == 2
        await write_segment(q, 4, 6)
        assert await q.get_manifest(1) == [SegmentInfo(1, 3, False), SegmentInfo(4, 6, False)]
        assert [t for t, _ in await read_all(q)] == [1, 2, 3, 4, 5, 6]
        st = await q.node_status()
        assert [st[n].answered for n in c.names] == [True, True, False]
        assert st[liar].error.startswith("ProtocolError: ") and "malformed" in st[liar].error
        assert st[c.names[0]].manifest.last_writer_epoch == 2
        await q.close()
    run(tmp_path, sc)


def test_batches_sent_ahead_are_waited_for_by_the_next_sync(tmp_path):
    """``send_marked`` puts the marked batches on the wire at once; the next ``sync`` waits for their
    quorum (and sends what was marked after them); a stream aborted with batches sent ahead leaves
    nothing for a later sync to wait on."""
    async def sc(c):
        q = c.qjm()
        await q.format(NS)
        await q.recover_unfinalized_segments()
        s = await q.start_log_segment(1)
        for t in (1, 2):
            s.write(t, body(t))
        s.mark()
        s.send_marked()
        s.send_marked()  # nothing more is marked: nothing to do
        assert s.last_synced_txid == 0
        s.write(3, body(3))
        s.mark()
        await s.sync()
        assert s.last_synced_txid == 3
        await s.sync()  # nothing sent ahead or marked: returns at once
        await q.finalize_log_segment(1, 3)
        s2 = await q.start_log_segment(4)
        s2.write(4, body(4))
        s2.mark()
        s2.send_marked()
        await s2.abort()
        with pytest.raises(JournalError):  # an aborted stream refuses syncs
            await s2.sync()
        got = await read_all(c.qjm(), 1, 3)
        await q.close()
        return got
    assert run(tmp_path, sc) == [(t, body(t)) for t in range(1, 4)]
