"""AsyncLogger against a fake RPC client: FIFO order and serials, committed txid piggy-back,
byte-bounded queue, out-of-sync marking and rejoin, heartbeats, coalescing, reconnection."""

import asyncio

import pytest

from qjournal.client.logger import AsyncLogger
from qjournal.client.settings import QJMSettings
from qjournal.errors import (InvariantViolation, JournalOutOfSyncError, LoggerTooFarBehindError,
                             ProtocolError, TransportError)
from qjournal.protocol.messages import (JournalState, Manifest, NamespaceInfo, NewEpochResponse,
                                        PrepareRecoveryResponse, SegmentState)

from qjournal.util.waiting import async_wait_until

from .fakes import FakeRpc, connector_for


PREPARED = PrepareRecoveryResponse(SegmentState(1, 5, True), None, 1, 4)


def make(behaviour=None, clock=None, **settings):
    rpc = FakeRpc(behaviour)
    lg = AsyncLogger("jn1:8485", "j", connector_for(rpc), QJMSettings().with_overrides(**settings), clock=clock)
    return lg, rpc


def test_fifo_order_and_increasing_serials_with_committed_piggyback():
    async def main():
        lg, rpc = make()
        lg.set_epoch(3)
        f1 = lg.start_log_segment(1, 1)
        f2 = lg.send_edits(1, 1, 2, b"ab")
        await asyncio.gather(f1, f2)
        f3 = lg.send_edits(1, 3, 1, b"c")
        lg.set_committed_txid(2)  # set after the batch was queued, before it was sent
        f4 = lg.finalize_log_segment(1, 3)
        await asyncio.gather(f3, f4)
        return rpc.calls, lg
    calls, lg = asyncio.run(main())
    assert [m for m, _ in calls] == ["start_log_segment", "journal", "journal", "finalize_log_segment"]
    serials = [kw["req"]["ipc_serial"] for _, kw in calls]
    assert serials == sorted(serials) and len(set(serials)) == 4
    assert all(kw["req"]["epoch"] == 3 for _, kw in calls)
    assert calls[1][1]["req"]["committed_txid"] == -12345
    assert calls[2][1]["req"]["committed_txid"] == 2
    assert lg.highest_acked_txid == 3 and lg.queued_bytes == 0


def test_one_call_in_flight_at_a_time():
    async def main():
        gates = []

        def beh(m, kw):
            f = asyncio.get_running_loop().create_future()
            gates.append(f)
            return f
        lg, rpc = make(beh)
        lg.set_epoch(1)
        futs = [lg.heartbeat() for _ in range(3)]
        await async_wait_until(lambda: len(gates) == 1, "the first heartbeat sent", poll_s=0)
        assert rpc.in_flight == 1
        for i in range(3):
            await async_wait_until(lambda: len(gates) == i + 1, f"heartbeat {i + 1} sent", poll_s=0)
            gates[i].set_result(None)
        await asyncio.gather(*futs)
        return rpc.max_in_flight
    assert asyncio.run(main()) == 1


def test_epoch_set_once_and_required():
    async def main():
        lg, _ = make()
        with pytest.raises(InvariantViolation):
            await lg.heartbeat()
        lg.set_epoch(1)
        with pytest.raises(InvariantViolation):
            lg.set_epoch(2)
    asyncio.run(main())


def test_committed_txid_never_goes_back():
    lg, _ = make()
    lg.set_committed_txid(5)
    with pytest.raises(InvariantViolation):
        lg.set_committed_txid(4)


def test_queue_is_bounded_in_bytes_but_takes_one_oversized_batch_when_empty():
    async def main():
        gate = None

        def beh(m, kw):
            nonlocal gate
            gate = asyncio.get_running_loop().create_future()
            return gate
        lg, rpc = make(beh, queued_edits_limit_mb=1)
        lg.set_epoch(1)
        big = b"x" * (2 * 1024 * 1024)  # over the limit: accepted because the queue is empty
        f1 = lg.send_edits(1, 1, 1, big)
        assert lg.queued_bytes == len(big)
        f2 = lg.send_edits(1, 2, 1, b"y")  # queue not empty and over the limit: refused at once
        assert f2.done()
        with pytest.raises(LoggerTooFarBehindError, match="queued-edits.limit.mb"):
            await f2
        assert not lg.out_of_sync  # an overflow alone does not mark out of sync (reference §4.3)
        await async_wait_until(lambda: gate is not None, "the oversized batch sent", poll_s=0)
        gate.set_result(None)
        await f1
        assert lg.queued_bytes == 0
        f3 = lg.send_edits(1, 2, 1, b"y")
        await async_wait_until(lambda: gate.done() is False, "the next batch sent", poll_s=0)
        gate.set_result(None)
        await f3
    asyncio.run(main())


def test_failed_journal_marks_out_of_sync_until_next_segment():
    now = [100.0]

    async def main():
        fail = {"on": True}

        def beh(m, kw):
            if m == "journal" and fail["on"]:
                raise TransportError("injected")
            return None
        # catch_up_buffer_bytes=0: Hadoop's behaviour, the node waits for the next segment
        lg, rpc = make(beh, clock=lambda: now[0], out_of_sync_heartbeat_interval_ms=1000,
                       catch_up_buffer_bytes=0)
        lg.set_epoch(1)
        await lg.start_log_segment(1, 1)
        with pytest.raises(TransportError):
            await lg.send_edits(1, 1, 1, b"a")
        assert lg.out_of_sync
        fail["on"] = False
        # later batches fail fast without being sent
        with pytest.raises(JournalOutOfSyncError, match="disabled until the next segment roll"):
            await lg.send_edits(1, 2, 1, b"b")
        with pytest.raises(JournalOutOfSyncError):
            await lg.finalize_log_segment(1, 2)
        assert [m for m, _ in rpc.calls] == ["start_log_segment", "journal"]
        # after the heartbeat interval, one heartbeat is sent (and the batch still fails)
        now[0] += 1.5
        with pytest.raises(JournalOutOfSyncError):
            await lg.send_edits(1, 3, 1, b"c")
        with pytest.raises(JournalOutOfSyncError):
            await lg.send_edits(1, 4, 1, b"d")
        assert [m for m, _ in rpc.calls][-1] == "heartbeat"
        assert sum(1 for m, _ in rpc.calls if m == "heartbeat") == 1
        # the next segment start brings it back
        await lg.start_log_segment(5, 1)
        assert not lg.out_of_sync
        await lg.send_edits(5, 5, 1, b"e")
        assert lg.highest_acked_txid == 5
    asyncio.run(main())


class _Node:
    """A fake JournalNode that tracks the end of its open segment, as a real one does."""

    def __init__(self):
        self.next_txid = 1
        self.down = False
        self.journaled = []

    def __call__(self, m, kw):
        if self.down and m in ("journal", "heartbeat", "get_edit_log_manifest"):
            raise TransportError("node paused")
        if m == "start_log_segment":
            self.next_txid = kw["txid"]
        if m == "journal":
            if kw["first_txid"] != self.next_txid:
                raise JournalOutOfSyncError(f"expecting nextTxId={self.next_txid}")
            self.journaled.append((kw["first_txid"], kw["num_txns"], kw["records"]))
            self.next_txid = kw["first_txid"] + kw["num_txns"]
        if m == "get_edit_log_manifest":
            segs = [[1, self.next_txid - 1, True]] if self.next_txid > 1 else []
            return {"segments": segs, "committed_txid": self.next_txid - 1}
        return None


async def _writing_to_node(now, **settings):
    """A logger of epoch 1 with segment 1 open on a fake node that tracks its segment's end."""
    node = _Node()
    lg, _ = make(node, clock=lambda: now[0], **settings)
    lg.set_epoch(1)
    await lg.start_log_segment(1, 1)
    return node, lg


def test_an_out_of_sync_node_is_caught_up_inside_the_segment():
    """Issue 12: after a pause the writer resends the batches the node missed (one call, from the
    end of its open segment) at the next successful heartbeat, and the node is in the quorum again
    without waiting for the roll."""
    now = [100.0]

    async def main():
        node, lg = await _writing_to_node(now, out_of_sync_heartbeat_interval_ms=1000)
        await lg.send_edits(1, 1, 2, b"ab")
        node.down = True
        for first in (3, 5):
            with pytest.raises((TransportError, JournalOutOfSyncError)):
                await lg.send_edits(1, first, 2, b"cd" if first == 3 else b"ef")
        assert lg.out_of_sync
        node.down = False
        with pytest.raises(JournalOutOfSyncError):     # within the heartbeat interval: no attempt
            await lg.send_edits(1, 7, 1, b"g")
        now[0] += 1.5
        await lg.send_edits(1, 8, 2, b"hi")             # heartbeat, manifest, resend 3-7, then 8-9
        assert not lg.out_of_sync and lg.catch_ups == 1 and lg.highest_acked_txid == 9
        assert node.journaled == [(1, 2, b"ab"), (3, 5, b"cdefg"), (8, 2, b"hi")]
        assert node.next_txid == 10
    asyncio.run(main())


def test_no_catch_up_when_the_buffer_no_longer_holds_the_gap():
    now = [100.0]

    async def main():
        node, lg = await _writing_to_node(now, catch_up_buffer_bytes=4)
        await lg.send_edits(1, 1, 1, b"a")
        node.down = True
        for t in range(2, 8):
            with pytest.raises((TransportError, JournalOutOfSyncError)):
                await lg.send_edits(1, t, 1, b"x")
        node.down = False
        now[0] += 1.5
        with pytest.raises(JournalOutOfSyncError):      # txids 2-3 were dropped from the 4-byte buffer
            await lg.send_edits(1, 8, 1, b"y")
        assert lg.out_of_sync and lg.catch_ups == 0 and node.next_txid == 2
        await lg.start_log_segment(9, 1)                # the roll still brings it back
        await lg.send_edits(9, 9, 1, b"z")
        assert not lg.out_of_sync and node.next_txid == 10
    asyncio.run(main())


def test_a_node_rejoins_with_the_calls_queued_behind_its_segment_start():
    """Found by the syncer's process test: a restarted node got start_log_segment, then its first
    batch was refused as still out of sync (the rejoin ran as a done-callback, after the worker had
    moved on), and the finalize was refused when it was *queued*, before the start had run: the
    node kept the segment in progress for ever. Both are now judged by the worker, in order."""
    async def main():
        fail = {"on": True}

        def beh(m, kw):
            if m == "journal" and fail["on"]:
                raise TransportError("injected")
            return None
        lg, rpc = make(beh)
        lg.set_epoch(1)
        await lg.start_log_segment(1, 1)
        with pytest.raises(TransportError):
            await lg.send_edits(1, 1, 1, b"a")
        assert lg.out_of_sync
        fail["on"] = False
        # the next segment: every call queued at once, while the logger is still out of sync
        start = lg.start_log_segment(2, 1)
        batch = lg.send_edits(2, 2, 2, b"bc")
        fin = lg.finalize_log_segment(2, 3)
        await asyncio.gather(start, batch, fin)
        assert [m for m, _ in rpc.calls][-3:] == ["start_log_segment", "journal", "finalize_log_segment"]
        assert not lg.out_of_sync and lg.highest_acked_txid == 3
    asyncio.run(main())


def test_lagging_batches_are_coalesced():
    async def main():
        gate = None

        def beh(m, kw):
            nonlocal gate
            if m == "journal" and kw["first_txid"] == 1:
                gate = asyncio.get_running_loop().create_future()
                return gate
            return None
        lg, rpc = make(beh)
        lg.set_epoch(1)
        futs = [lg.send_edits(1, 1, 1, bytes([1]))]
        # batch 1 in flight, the node is slow
        await async_wait_until(lambda: gate is not None, "batch 1 sent", poll_s=0)
        futs += [lg.send_edits(1, t, 1, bytes([t])) for t in range(2, 6)]
        gate.set_result(None)
        await asyncio.gather(*futs)
        return rpc.calls, lg
    calls, lg = asyncio.run(main())
    journals = [kw for m, kw in calls if m == "journal"]
    assert [(k["first_txid"], k["num_txns"]) for k in journals] == [(1, 1), (2, 4)]
    assert journals[1]["records"] == bytes([2, 3, 4, 5])
    assert lg.highest_acked_txid == 5 and lg.lag_txns == 0


def test_reconnects_after_transport_failure():
    async def main():
        conns = []

        async def connect():
            rpc = FakeRpc(lambda m, kw: (_ for _ in ()).throw(TransportError("reset")) if len(conns) == 1 else True)
            conns.append(rpc)
            return rpc
        from qjournal.client.settings import QJMSettings as S
        lg = AsyncLogger("jn1:1", "j", connect, S())
        with pytest.raises(TransportError):
            await lg.is_formatted()
        assert await lg.is_formatted() is True
        return len(conns)
    assert asyncio.run(main()) == 2


def test_close_fails_queued_calls():
    async def main():
        gate = asyncio.get_running_loop().create_future()
        lg, _ = make(lambda m, kw: gate)
        lg.set_epoch(1)
        f1 = lg.heartbeat()
        f2 = lg.send_edits(1, 1, 1, b"x")
        await asyncio.sleep(0)
        await lg.close()
        with pytest.raises((TransportError, asyncio.CancelledError)):
            await f2
        assert lg.queued_bytes == 0
        f1.cancel()
    asyncio.run(main())


def test_a_batch_answered_after_the_logger_closed_completes_quietly():
    """Regression (issue 26, found while profiling the simulator): the worker awaits the batch it sent;
    closing the logger cancels the worker and with it that wait, and the batch's answer, arriving later,
    must not fail in its completion (it raised InvalidStateError inside a listener)."""
    async def main():
        loop = asyncio.get_running_loop()
        reported = []
        loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
        gate = loop.create_future()

        def behaviour(method, kw):
            return gate if method == "journal" else None
        lg, rpc = make(behaviour)
        lg.set_epoch(1)
        await lg.heartbeat()                    # connected: the next batch would go out directly...
        f0 = lg.send_edits(1, 1, 1, b"x")       # ...but this fake has no send(): the worker sends it
        await async_wait_until(lambda: rpc.in_flight == 1, "the batch in flight", poll_s=0)
        await lg.close()
        gate.set_exception(TransportError("connection reset"))   # the answer comes after the close
        await async_wait_until(lambda: f0.done(), "the batch completed", poll_s=0)
        for _ in range(3):
            await asyncio.sleep(0)
        return f0, reported
    f0, reported = asyncio.run(main())
    assert f0.cancelled() and reported == []


def test_segment_url_uses_configured_host_for_wildcard():
    async def main():
        lg, _ = make(lambda m, kw: {"last_promised_epoch": 0, "http_port": 9, "http_url": "http://0.0.0.0:9"})
        await lg.get_journal_state()
        return lg.segment_url(101, "1:c")
    assert asyncio.run(main()) == "http://jn1:9/getJournal?jid=j&segmentTxId=101&storageInfo=1%3Ac&inProgressOk=true"


def test_recovery_calls_carry_no_committed_txid():
    """Invariant 5: a recovery call queued behind a slow call must not carry a txid committed
    later in a newer segment (the simulator's KB2)."""
    async def main():
        lg, rpc = make(lambda m, kw: PREPARED.to_wire() if m == "prepare_recovery" else None)
        lg.set_epoch(2)
        lg.set_committed_txid(40)
        await asyncio.gather(lg.prepare_recovery(1), lg.accept_recovery(SegmentState(1, 5, True), "mem://x"),
                             lg.finalize_log_segment(1, 5), lg.heartbeat())
        return {m: kw["req"]["committed_txid"] for m, kw in rpc.calls}
    assert asyncio.run(main()) == {"prepare_recovery": -12345, "accept_recovery": -12345,
                                   "finalize_log_segment": 40, "heartbeat": 40}


def test_concurrent_callers_share_one_connection_attempt():
    async def main():
        gate = asyncio.Event()
        connecting = asyncio.Event()
        made = []

        async def connect():
            connecting.set()
            await gate.wait()
            rpc = FakeRpc(lambda m, kw: {"segments": [], "committed_txid": -12345})
            made.append(rpc)
            return rpc
        lg = AsyncLogger("jn1:1", "j", connect, QJMSettings())
        lg.set_epoch(1)
        hb = lg.heartbeat()
        rd = asyncio.ensure_future(lg.get_edit_log_manifest(0, False))
        await asyncio.wait_for(connecting.wait(), 10)  # the first caller is inside the connector
        gate.set()
        await asyncio.gather(hb, rd)
        return len(made)
    assert asyncio.run(main()) == 1


def test_calls_take_and_return_message_types():
    """The AsyncLogger is the codec boundary: messages in, messages out; the wire is unchanged."""
    ns = NamespaceInfo(7, "c")
    answers = {
        "is_formatted": True,
        "get_journal_state": {"last_promised_epoch": 3, "http_port": 0, "http_url": "mem://jn1",
                              "ns_info": ns.to_wire()},
        "new_epoch": {"last_segment_txid": 11},
        "prepare_recovery": PREPARED.to_wire(),
        "get_edit_log_manifest": {"segments": [[1, 5, False]], "committed_txid": 5,
                                  "last_writer_epoch": 3},
    }

    async def main():
        lg, rpc = make(lambda m, kw: answers.get(m))
        out = [await lg.is_formatted(), await lg.format(ns, True), await lg.get_journal_state(),
               await lg.new_epoch(ns, 4)]
        lg.set_epoch(4)
        out += [await lg.prepare_recovery(1), await lg.accept_recovery(SegmentState(1, 5, True), "u"),
                await lg.get_edit_log_manifest(0, True)]
        return out, rpc.calls
    out, calls = asyncio.run(main())
    assert out == [True, None, JournalState(3, 0, "mem://jn1", ns), NewEpochResponse(11), PREPARED,
                   None, Manifest((SegmentState(1, 5, False),), 5, 3)]
    sent = dict(calls)
    assert sent["format"]["ns_info"] == sent["new_epoch"]["ns_info"] == ns.to_wire()
    assert sent["accept_recovery"]["segment_state"] == [1, 5, True]


@pytest.mark.parametrize("method,answer", [
    ("get_journal_state", {"http_url": "x"}),
    ("new_epoch", [11]),
    ("prepare_recovery", {"segment_state": "x", "last_writer_epoch": 1}),
    ("is_formatted", "yes"),
    ("get_edit_log_manifest", {"segments": [[1, 5]], "committed_txid": 5}),
])
def test_a_malformed_answer_fails_only_that_call_with_a_typed_error(method, answer):
    async def main():
        lg, rpc = make(lambda m, kw: answer if len(rpc.calls) == 1 else {"last_segment_txid": None})
        call = {"get_journal_state": lambda: lg.get_journal_state(),
                "new_epoch": lambda: lg.new_epoch(NamespaceInfo(7, "c"), 1),
                "prepare_recovery": lambda: lg.set_epoch(1) or lg.prepare_recovery(1),
                "is_formatted": lambda: lg.is_formatted(),
                "get_edit_log_manifest": lambda: lg.get_edit_log_manifest(0, True)}[method]
        with pytest.raises(ProtocolError) as ei:
            await call()
        # the channel is still usable: the next call is sent and answered
        assert await lg.new_epoch(NamespaceInfo(7, "c"), 2) == NewEpochResponse(None)
        return ei.value
    err = asyncio.run(main())
    assert f"jn1:8485 answered {method} with a malformed result" in str(err)
    assert err.fields["node"] == "jn1:8485" and err.fields["jid"] == "j"
