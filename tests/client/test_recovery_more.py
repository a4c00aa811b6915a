"""More recovery scenarios (reference §6.2, in our own words) and the fallback between equally
good recovery sources (seed 002 §2.3.2.2)."""

import asyncio

import pytest

from qjournal.errors import QuorumError

from .faults import fail_calls
from .memcluster import NS, MemCluster
from .scenario_helpers import Core, body, build, check_recovered, read_bodies, recover, write_after


def run(tmp_path, scenario):
    async def main():
        c = MemCluster(str(tmp_path))
        await c.start()
        q = c.qjm()
        await q.format(NS)
        await q.close()
        try:
            await scenario(c)
        finally:
            await c.close()
    asyncio.run(main())


@pytest.mark.parametrize("excluded,end", [(0, 5), (1, 5), (2, 4)])
def test_change_writers_logs_out_of_sync(tmp_path, excluded, end):
    """JN0 has 1-3, JN1 1-4, JN2 1-5, all in progress; recovery without one of them."""
    async def sc(c):
        await build(c, {c.names[0]: [("ip", 1, 3, 1)], c.names[1]: [("ip", 1, 4, 1)],
                        c.names[2]: [("ip", 1, 5, 1)]})
        await c.stop(c.names[excluded])
        q = await recover(c)
        await check_recovered(c, 1, end, [n for i, n in enumerate(c.names) if i != excluded],
                              {t: 1 for t in range(1, end + 1)})
        await write_after(q, end + 1)
        await q.close()
    run(tmp_path, sc)


def test_recover_after_incomplete_recovery(tmp_path):
    """With JN2 (length 5) down, recovery accepts 4 but every finalize fails. Then JN0 goes down
    and JN2 comes back: recovery must still choose 4 (an accepted value beats a longer log)."""
    async def sc(c):
        j0, j1, j2 = c.names
        await build(c, {j0: [("ip", 1, 3, 1)], j1: [("ip", 1, 4, 1)], j2: [("ip", 1, 5, 1)]})
        await c.stop(j2)
        plan = fail_calls({j0: lambda i, m: m == "finalize_log_segment",
                           j1: lambda i, m: m == "finalize_log_segment"})
        q = c.qjm(connector_factory=plan.connector_factory(c.network))
        with pytest.raises(QuorumError, match="finalize_log_segment"):
            await q.recover_unfinalized_segments()
        await q.close()
        await c.stop(j0)
        await c.start(j2)
        q = await recover(c)
        await check_recovered(c, 1, 4, [j1, j2], {t: 1 for t in range(1, 5)})
        await q.close()
    run(tmp_path, sc)


def test_newer_version_of_segment_wins(tmp_path):
    """1-100 finalized; segment 101 (one txn) only on JN0, accepted there as 101-101 in epoch 2
    by a recovery that then failed. With JN0 down a writer (epoch 3) recovers to 100 and writes
    101-150 unfinalized. JN0 back: recovery returns 150, not the stale accepted 101."""
    async def sc(c):
        j0, j1, j2 = c.names
        await build(c, {j0: [("fin", 1, 100, 1), ("ip", 101, 101, 1)],
                        j1: [("fin", 1, 100, 1), ("ip", 101, 100, 1)],
                        j2: [("fin", 1, 100, 1), ("ip", 101, 100, 1)]})
        # epoch 2 recovery: only JN0 accepts 101-101, then it dies
        plan = fail_calls({j1: lambda i, m: m == "accept_recovery" or m == "prepare_recovery",
                           j2: lambda i, m: m in ("accept_recovery", "prepare_recovery")})
        q = c.qjm(connector_factory=plan.connector_factory(c.network))
        with pytest.raises(QuorumError):
            await q.recover_unfinalized_segments()
        await q.close()
        await c.stop(j0)
        q = await recover(c)  # epoch 3: JN1+JN2 have nothing in 101
        s = await q.start_log_segment(101)
        for t in range(101, 151):
            s.write(t, body(q.epoch, t))
        s.mark(); await s.sync(); await s.abort(); await q.close()
        await c.start(j0)
        q = await recover(c)
        await check_recovered(c, 101, 150, [j1, j2], {t: 3 for t in range(101, 151)})
        await q.close()
    run(tmp_path, sc)


def test_miss_finalize_and_next_start(tmp_path):
    """JN0 misses finalize(1-3) and start(4); JN1 fails txn 4: the write fails with a quorum
    error; with JN2 down recovery yields 3."""
    async def sc(c):
        j0, j1, j2 = c.names
        plan = fail_calls({j0: lambda i, m: m in ("finalize_log_segment", "start_log_segment") and i > 4,
                           j1: lambda i, m: m == "journal" and i > 6})
        q = c.qjm(connector_factory=plan.connector_factory(c.network))
        await q.recover_unfinalized_segments()
        s = await q.start_log_segment(1)
        for t in range(1, 4):
            s.write(t, body(q.epoch, t))
        s.mark(); await s.sync()
        await q.finalize_log_segment(1, 3)
        s = await q.start_log_segment(4)
        s.write(4, body(q.epoch, 4)); s.mark()
        with pytest.raises(QuorumError) as ei:
            await s.sync()
        assert "out of sync" in str(ei.value) or "Writer out of sync" in str(ei.value) \
            or "injected" in str(ei.value)
        await q.close()
        await c.stop(j2)
        q = await recover(c)
        m = await q.get_manifest(1)
        assert [(x.start_txid, x.end_txid) for x in m] == [(1, 3)]
        await write_after(q, 4)
        await q.close()
    run(tmp_path, sc)


def test_accept_falls_back_to_next_equally_good_source(tmp_path):
    """JN1 and JN2 both hold 1-5 (equally good sources), JN0 has 1-3 and must download. JN1's
    HTTP address is broken, and JN2's own accept fails, so the quorum needs JN0: its accept with
    JN1's URL fails and is retried with JN2's URL."""
    async def sc(c):
        j0, j1, j2 = c.names
        await build(c, {j0: [("ip", 1, 3, 1)], j1: [("ip", 1, 5, 1)], j2: [("ip", 1, 5, 1)]})
        c.nodes[j1].http_url = "mem://no-such-node"
        plan = fail_calls({j2: lambda i, m: m == "accept_recovery"})
        q = c.qjm(connector_factory=plan.connector_factory(c.network))
        await q.recover_unfinalized_segments()
        accepts = [t for t in plan.trace if t[0] == j0 and t[2] == "accept_recovery"]
        assert len(accepts) == 2, plan.trace
        await check_recovered(c, 1, 5, [j0, j1], {t: 1 for t in range(1, 6)})
        await write_after(q, 6)
        await q.close()
    run(tmp_path, sc)


def test_committed_txid_survives_and_is_checked(tmp_path):
    """A writer commits 1-4 (the JNs learn committed txid 3 from the piggy-back, then 4 from a
    heartbeat), dies; every recovery keeps 4 whichever quorum answers."""
    async def sc(c):
        q = c.qjm()
        await q.recover_unfinalized_segments()
        s = await q.start_log_segment(1)
        for t in range(1, 5):
            s.write(t, body(q.epoch, t)); s.mark(); await s.sync()
        await asyncio.gather(*(lg.heartbeat() for lg in q.loggers.loggers))
        await q.close()
        for n in c.names:
            j = (await Core(c, n).run("get_edit_log_manifest", 0, True))
            assert j.committed_txid == 4
        await c.stop(c.names[0])
        q = await recover(c)
        await check_recovered(c, 1, 4, c.names[1:])
        got = await read_bodies(q, 1)
        assert sorted(got) == [1, 2, 3, 4]
        await q.close()
    run(tmp_path, sc)


def test_recovery_of_a_writer_fenced_between_its_epoch_and_prepare(tmp_path):
    """Writer A gets epoch 2; before A's prepare_recovery, writer B gets epoch 3 and recovers.
    A's prepare is refused on a quorum (FencedError naming the newer epoch), and B's log is
    untouched."""
    from qjournal.errors import FencedError

    async def sc(c):
        await build(c, {n: [("ip", 1, 3, 1)] for n in c.names})
        a = c.qjm()
        await a._create_new_unique_epoch()
        assert a.epoch == 2
        b = await recover(c)
        assert b.epoch == 3
        with pytest.raises(FencedError, match="promised epoch 3"):
            await a._recover_unclosed_segment(1)
        await check_recovered(c, 1, 3, c.names)
        await write_after(b, 4)
        await a.close()
        await b.close()
    run(tmp_path, sc)
