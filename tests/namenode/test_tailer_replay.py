"""The tailer's replay (catch_up) over a file journal: the namespace and retry cache it rebuilds, and what it
does on a corrupt record or a hole, with batches smaller than the log so batch edges are crossed."""

from __future__ import annotations

import asyncio
import gc
import os

import pytest

from qjournal.errors import CorruptRecordError, GapInTransactionsError
from qjournal.journalmanager.file import FileJournal
from qjournal.namenode.namespace import CallContext, Namespace
from qjournal.namenode.ops import encode_op
from qjournal.namenode.retry_cache import RetryCache, answer_from_ops
from qjournal.namenode.tailer import EditLogTailer
from qjournal.protocol import segment as seg
from qjournal.protocol.messages import NamespaceInfo

NS = NamespaceInfo(5, "CID-tailer")
CLIENT = b"\x09" * 16


def live_history(n_calls: int) -> tuple[Namespace, list, dict]:
    """A live namespace after ``n_calls`` mkdir/create/rename calls, its ops in order, and each call's answer."""
    ns = Namespace(superuser="nn")
    ops, answers = [], {}
    for i in range(n_calls):
        ctx = CallContext("nn", (), CLIENT, i, ts=1000 + i)
        if i % 3 == 0:
            method, got = "mkdirs", ns.mkdirs(ctx, f"/d{i // 30}/s{i}")
        elif i % 3 == 1:
            method, got = "create", ns.create(ctx, f"/d{i // 30}/f{i}")
        else:
            method, got = "rename", ns.rename(ctx, f"/d{i // 30}/f{i - 1}", f"/d{i // 30}/g{i}")
        ops += got
        answers[i] = (method, answer_from_ops(method, got))
    return ns, ops, answers


async def write_log(path, ops, segments: list[tuple[int, int]]) -> FileJournal:
    """Write ``ops`` (txid k+1 for ops[k]) into finalized segments ``(first, last)``."""
    j = FileJournal(str(path))
    await j.format(NS)
    await j.recover_unfinalized_segments()
    for first, last in segments:
        out = await j.start_log_segment(first)
        out.write_raw(seg.encode_records([(t, *encode_op(ops[t - 1])) for t in range(first, last + 1)]),
                      first, last - first + 1)
        out.mark()
        await out.close()  # syncs what is marked
        await j.finalize_log_segment(first, last)
    return j


def tailer(batch_txns: int) -> EditLogTailer:
    t = EditLogTailer(Namespace(superuser="nn"), RetryCache(), asyncio.Lock(), 0, lambda: 0, 1000)
    t.batch_txns = batch_txns
    return t


def test_replay_rebuilds_the_namespace_and_the_retry_cache(tmp_path):
    live, ops, answers = live_history(120)
    n = len(ops)

    async def main():
        j = await write_log(tmp_path / "j", ops, [(1, 50), (51, n)])
        t = tailer(batch_txns=13)
        assert await t.catch_up(j, to_txid=37) == 37
        assert await t.catch_up(j) == n - 37  # from the middle of the first segment
        await j.close()
        return t
    t = asyncio.run(main())
    assert t.namespace.snapshot() == live.snapshot()
    assert t.last_applied_txid == n
    for call_id, (method, answer) in answers.items():  # a call retried after a failover gets its answer
        assert t.retry_cache.lookup(CLIENT, call_id, method, 1) == (True, answer)
    assert gc.isenabled()


def test_a_corrupt_record_stops_replay_at_the_batch_before_it_naming_file_and_offset(tmp_path):
    _live, ops, _answers = live_history(60)

    async def main():
        j = await write_log(tmp_path / "j", ops, [(1, len(ops))])
        return j
    j = asyncio.run(main())
    path = os.path.join(j.current_dir, seg.segment_file_name(1, len(ops)))
    data = bytearray(open(path, "rb").read())
    recs = list(seg.iter_records(bytes(data)))
    offset = seg.HEADER_SIZE + sum(len(r.encode()) for r in recs[:24])  # txid 25
    data[offset + seg.REC_HEAD_SIZE + 2] ^= 0x40
    with open(path, "wb") as f:
        f.write(data)
    t = tailer(batch_txns=10)

    async def replay():
        return await t.catch_up(FileJournal(j.directory))
    with pytest.raises(CorruptRecordError) as ei:
        asyncio.run(replay())
    assert path in str(ei.value) and f"at byte {offset}" in str(ei.value) and "txid 25" in str(ei.value)
    assert t.last_applied_txid == 20  # batches 1-10 and 11-20; 21-24 were read, not applied
    assert gc.isenabled()


def test_a_hole_in_the_log_is_a_gap(tmp_path):
    _live, ops, _answers = live_history(60)

    async def main():
        j = await write_log(tmp_path / "j", ops, [(1, 20), (31, 40)])
        t = tailer(batch_txns=8)
        with pytest.raises(GapInTransactionsError, match="expected txid 21"):
            await t.catch_up(j)
        return t
    t = asyncio.run(main())
    assert t.last_applied_txid == 0
