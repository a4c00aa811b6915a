"""The read side: manifest merge table (pure), replica failover of a segment stream, and reading a
segment far larger than the chunk size in bounded memory."""

import asyncio
import tracemalloc

import pytest

from qjournal.client.reader import QuorumSegmentInputStream, merge_manifests
from qjournal.errors import JournalError, TransportError
from qjournal.journalmanager.streams import SegmentInfo
from qjournal.protocol.messages import Manifest, SegmentState
from qjournal.protocol.segment import INVALID_TXID, OP_DATA, crc32c, encode_header, encode_records
from qjournal.transport.download import SegmentDownload, memory_download


def M(*segs, committed=INVALID_TXID):
    return Manifest(tuple(SegmentState(*s) for s in segs), committed)


MERGE_TABLE = [
    ("finalized everywhere",
     {"a": M((1, 3, False)), "b": M((1, 3, False)), "c": M((1, 3, False))}, False,
     [SegmentInfo(1, 3, False)], {1: ("a", "b", "c")}),
    ("a node missing a segment is not a replica of it (HDFS-3725)",
     {"a": M((1, 3, False), (4, 6, False)), "b": M((1, 3, False)), "c": M((4, 6, False))}, False,
     [SegmentInfo(1, 3, False), SegmentInfo(4, 6, False)], {1: ("a", "b"), 4: ("a", "c")}),
    ("finalized beats in-progress of the same start (HDFS-6777)",
     {"a": M((1, 3, False)), "b": M((1, 5, True), committed=5)}, True,
     [SegmentInfo(1, 3, False)], {1: ("a",)}),
    ("in-progress hidden unless asked",
     {"a": M((1, 3, False), (4, 9, True), committed=8)}, False,
     [SegmentInfo(1, 3, False)], {1: ("a",)}),
    ("in-progress cut at the committed txid; shorter copies are not replicas",
     {"a": M((4, 9, True), committed=7), "b": M((4, 6, True), committed=6), "c": M((4, 8, True))}, True,
     [SegmentInfo(4, 7, True)], {4: ("a", "c")}),
    ("in-progress without a known committed txid is not readable",
     {"a": M((4, 9, True))}, True, [], {}),
    # whole-cluster simulator seed 529: c kept the fenced writer's in-progress 269..303 (303 never
    # committed); asked from 303, b lists only the new writer's segment 303, whose committed
    # txid (311) must not stretch c's stale copy over txid 303
    ("a stale in-progress copy ends before a later segment's start",
     {"b": M((303, 312, True), committed=311), "c": M((269, 303, True), committed=302)}, True,
     [SegmentInfo(269, 302, True), SegmentInfo(303, 311, True)], {269: ("c",), 303: ("b",)}),
    ("every later start bounds the copies before it",
     {"b": M((9, 12, True), committed=12), "d": M((9, 10, True)), "e": M((10, 11, True))},
     True, [SegmentInfo(9, 9, True), SegmentInfo(10, 11, True)], {9: ("b", "d"), 10: ("e",)}),
    ("a later in-progress start bounds an earlier copy even when in-progress is not asked",
     {"a": M((1, 3, False), (4, 9, True), committed=8), "b": M((1, 3, False))}, False,
     [SegmentInfo(1, 3, False)], {1: ("a", "b")}),
]


@pytest.mark.parametrize("name,manifests,ipok,segs,replicas", MERGE_TABLE, ids=[r[0] for r in MERGE_TABLE])
def test_merge_manifests_table(name, manifests, ipok, segs, replicas):
    m = merge_manifests(manifests, ipok)
    assert list(m.segments) == segs
    assert m.replicas == replicas


def test_merge_ignores_in_progress_copy_of_an_older_writer():
    # node c kept writer 1's in-progress copy of segment 4 (it refused writer 2's start there);
    # a and b hold writer 2's copy: only they are replicas, and c's longer copy sets no bound
    manifests = {"a": M((4, 6, True), committed=6), "b": M((4, 7, True), committed=6),
                 "c": M((4, 9, True), committed=3)}
    m = merge_manifests(manifests, True, {"a": 2, "b": 2, "c": 1})
    assert list(m.segments) == [SegmentInfo(4, 6, True)]
    assert m.replicas == {4: ("a", "b")}
    # finalized copies are not filtered by writer epoch
    m = merge_manifests({"a": M((1, 3, False)), "c": M((1, 3, False))}, True, {"a": 2, "c": 1})
    assert m.replicas == {1: ("a", "c")}


def test_merge_cuts_an_in_progress_copy_only_at_a_committed_txid_its_own_writer_reported():
    """Journal simulator seed 1256 (invariant 6): node "a" holds the epoch-2 writer's in-progress 8-9,
    never committed; epoch 3's heartbeats told it "committed 12". "b" answered before epoch 3 started a
    segment there. Epoch 3's committed txid says nothing of epoch 2's tail: nothing is readable past 7."""
    a = Manifest((SegmentState(1, 7, False), SegmentState(8, 9, True)), 12, 2, committed_epoch=3)
    b = Manifest((SegmentState(1, 7, False),), 5, 2, committed_epoch=1)
    m = merge_manifests({"a": a, "b": b}, True, {"a": 2, "b": 2})
    assert list(m.segments) == [SegmentInfo(1, 7, False)]
    # the same copy with a committed txid reported by its own writer (epoch 2) is read up to it
    a2 = Manifest(a.segments, 8, 2, committed_epoch=2)
    m = merge_manifests({"a": a2, "b": b}, True, {"a": 2, "b": 2})
    assert list(m.segments) == [SegmentInfo(1, 7, False), SegmentInfo(8, 8, True)]


def test_merge_of_overlapping_finalized_copies_is_a_broken_invariant():
    from qjournal.errors import InvariantViolation
    with pytest.raises(InvariantViolation, match="overlaps"):
        merge_manifests({"a": M((1, 5, False)), "b": M((4, 6, False))}, False)


def segment_bytes(first, last, tag=b""):
    return encode_header() + encode_records([(t, OP_DATA, tag + b"%d" % t) for t in range(first, last + 1)])


def test_failover_skips_corrupt_and_short_copies_and_never_repeats_txids():
    good = segment_bytes(1, 5)
    corrupt = bytearray(good)
    corrupt[-3] ^= 0xFF
    short = segment_bytes(1, 3)
    fetched = []

    async def fetch(name, seg, ipok):
        fetched.append(name)
        if name == "down":
            raise TransportError("connection refused")
        body = {"corrupt": bytes(corrupt), "short": short, "good": good, "badcrc": good}[name]
        return memory_download(body, (0 if name == "badcrc" else crc32c(body)), 7)

    async def main():
        s = QuorumSegmentInputStream("j", SegmentInfo(1, 5, False),
                                     ("down", "badcrc", "corrupt", "short", "good"), fetch, from_txid=2)
        return [(r.txid, r.body) async for r in s]
    got = asyncio.run(main())
    assert got == [(t, b"%d" % t) for t in range(2, 6)]
    assert fetched == ["down", "badcrc", "corrupt", "short", "good"]


def test_no_replica_left_names_every_error():
    async def fetch(name, seg, ipok):
        raise TransportError(f"{name} is down")

    async def main():
        s = QuorumSegmentInputStream("j", SegmentInfo(1, 5, False), ("a", "b"), fetch)
        await s.read_next()
    with pytest.raises(JournalError) as ei:
        asyncio.run(main())
    assert "a is down" in str(ei.value) and "b is down" in str(ei.value) and "txid 1" in str(ei.value)


def test_copy_damaged_in_its_tail_yields_its_good_records_and_the_rest_from_the_next_replica():
    good = segment_bytes(1, 6)
    # the first replica's copy is damaged in its last record and has no whole-body checksum:
    # its records before the damage verify and are returned, txid 6 fails its record checksum
    # and comes from the next replica
    damaged = bytearray(good)
    damaged[-10] ^= 0x01
    calls = []

    async def fetch(name, seg, ipok):
        calls.append(name)
        body = bytes(damaged) if name == "a" else good
        return memory_download(body, None, 5)  # no whole-body checksum: found record by record

    async def main():
        s = QuorumSegmentInputStream("j", SegmentInfo(1, 6, False), ("a", "b"), fetch)
        return [r.txid async for r in s]
    assert asyncio.run(main()) == [1, 2, 3, 4, 5, 6]
    assert calls == ["a", "b"]


# --- streaming: bounded memory, failover mid-stream, a damaged tail -------------------------------

def _record_stream(first: int, n: int, body_bytes: int):
    """The bytes of a segment ``first .. first+n-1``, produced one record at a time (never whole)."""
    yield encode_header()
    for t in range(first, first + n):
        yield encode_records([(t, OP_DATA, (b"%d:" % t).ljust(body_bytes, b"x"))])


def _streamed(first: int, n: int, body_bytes: int, chunk: int, *, fail_after_chunks: int | None = None,
              sizes: list | None = None) -> SegmentDownload:
    """A download of that segment in chunks of ``chunk`` bytes, its CRC32C computed by a first pass;
    it raises TransportError after ``fail_after_chunks`` chunks (a replica dying mid-stream)."""
    crc = 0
    for part in _record_stream(first, n, body_bytes):
        crc = crc32c(part, crc)

    async def chunks():
        pending = bytearray()
        sent = 0
        for part in _record_stream(first, n, body_bytes):
            pending += part
            while len(pending) >= chunk:
                if fail_after_chunks is not None and sent == fail_after_chunks:
                    raise TransportError("connection reset by peer")
                out = bytes(pending[:chunk])
                del pending[:chunk]
                sent += 1
                if sizes is not None:
                    sizes.append(len(out))
                yield out
        if pending:
            yield bytes(pending)
    return SegmentDownload(chunks(), crc)


def test_a_segment_far_larger_than_the_chunk_streams_in_bounded_memory():
    n, body, chunk = 6000, 1000, 32 * 1024   # a 6 MB segment in 32 KiB chunks
    seg_size = 16 + n * (body + 17)
    sizes: list[int] = []

    async def fetch(name, seg, ipok):
        return _streamed(1, n, body, chunk, sizes=sizes)

    async def main():
        s = QuorumSegmentInputStream("j", SegmentInfo(1, n, False), ("a",), fetch)
        count, last = 0, 0
        async for r in s:
            assert r.txid == last + 1 and r.body.startswith(b"%d:" % r.txid)
            last = r.txid
            count += 1
        return count
    tracemalloc.start()
    try:
        assert asyncio.run(main()) == n
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert max(sizes) == chunk and len(sizes) > 100
    assert peak < seg_size / 10, f"peak {peak} bytes for a {seg_size}-byte segment"


def test_a_replica_dying_mid_stream_fails_over_without_repeating_or_skipping_a_txid():
    n, body, chunk = 400, 100, 1024
    fetched = []

    async def fetch(name, seg, ipok):
        fetched.append(name)
        if name == "a":
            return _streamed(1, n, body, chunk, fail_after_chunks=10)
        if name == "b":
            return _streamed(1, n, body, chunk, fail_after_chunks=30)
        return _streamed(1, n, body, chunk)

    async def main():
        s = QuorumSegmentInputStream("j", SegmentInfo(1, n, False), ("a", "b", "c"), fetch, from_txid=5)
        got = []
        async for r in s:
            got.append(r.txid)
            if len(got) == 1:
                assert fetched == ["a"]  # records come while the first replica still streams
        return got
    assert asyncio.run(main()) == list(range(5, n + 1))
    assert fetched == ["a", "b", "c"]


def test_a_damaged_tail_chunk_is_detected_and_the_rest_read_from_the_next_replica():
    good = segment_bytes(1, 8) + b"\x00" * 64        # padded after the last record
    # a: a flipped bit in the padding of the last chunk; every record verifies, only the
    #    whole-body CRC32C catches it, before txid 8 (the last) is returned
    # b: a flipped bit in the last record's body (no whole-body checksum): its record checksum fails
    padded = bytearray(good)
    padded[-3] = 0xFF
    torn = bytearray(segment_bytes(1, 8))
    torn[-6] ^= 0x10
    torn = bytes(torn) + b"\x00" * 64
    served = []

    async def fetch(name, seg, ipok):
        body = {"a": (bytes(padded), crc32c(good)), "b": (torn, None), "c": (good, crc32c(good))}[name]
        chunks = []
        d = memory_download(*body, 16)

        async def tracking():
            async for c in d:
                chunks.append(len(c))
                yield c
        served.append((name, chunks))
        return SegmentDownload(tracking(), d.crc)

    async def main():
        s = QuorumSegmentInputStream("j", SegmentInfo(1, 8, False), ("a", "b", "c"), fetch)
        return [r.txid async for r in s]
    assert asyncio.run(main()) == list(range(1, 9))
    assert [name for name, _ in served] == ["a", "b", "c"]
    assert sum(served[0][1]) == len(good)  # a's body was read to its end to check its CRC32C


@pytest.mark.parametrize("batch", [1, 7, 1000])
def test_batches_across_replica_failovers_return_every_txid_once_in_order(batch):
    """read_batch (the tailer's read) gives the records read_next gives: replicas dying mid-stream, a
    corrupt copy and a short copy are failed over in batches too, no txid repeated or skipped."""
    n, body, chunk = 400, 100, 1024
    good = segment_bytes(1, n)
    corrupt = bytearray(good)
    corrupt[len(good) // 2] ^= 0x04

    async def fetch(name, seg, ipok):
        if name == "dies":
            return _streamed(1, n, body, chunk, fail_after_chunks=10)
        if name == "corrupt":
            return memory_download(bytes(corrupt), None, 333)
        if name == "short":
            return memory_download(segment_bytes(1, n - 50), None, 333)
        return memory_download(good, crc32c(good), 333)

    async def main():
        s = QuorumSegmentInputStream("j", SegmentInfo(1, n, False), ("dies", "corrupt", "short", "good"),
                                     fetch, from_txid=3)
        got = []
        while recs := await s.read_batch(batch):
            assert 1 <= len(recs) <= batch
            got += [r.txid for r in recs]
        return got
    assert asyncio.run(main()) == list(range(3, n + 1))
