"""The JournalNode's edit cache (HDFS-13150), as a table of stores and retrievals."""

import threading

import pytest

from qjournal.errors import CacheMissError, InvariantViolation
from qjournal.journalnode.edit_cache import JournaledEditsCache
from qjournal.protocol.segment import INVALID_TXID, encode_records, iter_records


def batch(first: int, last: int, size: int = 10) -> bytes:
    return encode_records([(t, 1, b"x" * size) for t in range(first, last + 1)])


def txids(records: bytes) -> list[int]:
    return [r.txid for r in iter_records(records, 0)]


def filled(capacity: int = 1 << 20, epoch: int = 3) -> JournaledEditsCache:
    c = JournaledEditsCache("j", capacity)
    for first in range(1, 100, 10):  # txids 1-100 in batches of 10
        c.store(epoch, first, first + 9, batch(first, first + 9), 1)
    return c


@pytest.mark.parametrize("since, max_txns, committed, want", [
    (1, 5000, 100, list(range(1, 101))),       # everything
    (15, 5000, 100, list(range(15, 101))),     # from the middle of a batch
    (15, 7, 100, list(range(15, 22))),         # max_txns cuts inside a batch
    (1, 5000, 57, list(range(1, 58))),         # never past the committed txid
    (58, 5000, 57, []),                        # nothing committed at or after 58
    (101, 5000, 120, []),                      # committed further than the cache holds: nothing yet
    (100, 1, 100, [100]),
])
def test_retrieve_table(since, max_txns, committed, want):
    c = filled()
    got = c.retrieve(since, max_txns, 1 << 20, committed, 3)
    assert got.first_txid == since and got.num_txns == len(want)
    assert txids(got.records) == want


def test_max_bytes_keeps_whole_batch_parts_after_the_first():
    c = filled()
    one = len(batch(1, 10))
    got = c.retrieve(5, 5000, 2 * one, 100, 3)  # part of batch 1, then batch 2 fits, batch 3 does not
    assert txids(got.records) == list(range(5, 21))


@pytest.mark.parametrize("since, committed_epoch, why", [
    (0 + 1, 3, None),           # hit
    (1, 4, "epoch"),            # the committed txid came from another writer
])
def test_miss_when_the_committed_txid_is_another_writers(since, committed_epoch, why):
    c = filled()
    if why is None:
        assert c.retrieve(since, 10, 1 << 20, 100, committed_epoch).num_txns == 10
    else:
        with pytest.raises(CacheMissError, match=why):
            c.retrieve(since, 10, 1 << 20, 100, committed_epoch)


def test_eviction_keeps_the_newest_within_capacity_and_misses_below():
    one = len(batch(1, 10))
    c = filled(capacity=3 * one)
    assert c.size_bytes <= c.capacity_bytes
    assert (c.lowest_txid, c.highest_txid) == (71, 100)
    with pytest.raises(CacheMissError, match="holds txids 71-100") as e:
        c.retrieve(50, 10, 1 << 20, 100, 3)
    assert e.value.fields["lowest_txid"] == 71
    assert txids(c.retrieve(71, 5000, 1 << 20, 100, 3).records) == list(range(71, 101))
    with pytest.raises(CacheMissError):
        c.retrieve(61, 10, 1 << 20, 100, 3)
    with pytest.raises(CacheMissError, match="epoch"):   # another writer's: a miss of distance 0
        c.retrieve(80, 10, 1 << 20, 100, 4)
    m = c.metrics()  # Hadoop's JournalMetrics names: 3 misses 21, 10 and 0 txids below the cache
    assert m["RpcRequestCacheMissAmountNumMisses"] == 3 and m["RpcRequestCacheMissAmountAvgTxns"] == 31 / 3
    assert m["TxnsServedViaRpc"] == 30 and m["BytesServedViaRpc"] == 3 * one and m["RpcEmptyResponses"] == 0


@pytest.mark.parametrize("epoch, first, layout, kept", [
    (3, 101, 1, True),     # continues: kept
    (4, 101, 1, False),    # a new writer: starts afresh
    (3, 105, 1, False),    # a gap: starts afresh
    (3, 101, 2, False),    # another layout version: starts afresh
])
def test_discontinuity_starts_afresh(epoch, first, layout, kept):
    c = filled()
    c.store(epoch, first, first + 4, batch(first, first + 4), layout)
    assert c.lowest_txid == (1 if kept else first)
    assert c.highest_txid == first + 4
    assert c.writer_epoch == epoch


def test_a_batch_larger_than_the_cache_empties_it():
    c = filled(capacity=len(batch(1, 10)) * 5)
    c.store(3, 101, 200, batch(101, 200), 1)
    assert c.lowest_txid == INVALID_TXID and c.size_bytes == 0
    with pytest.raises(CacheMissError, match="empty"):
        c.retrieve(150, 10, 1 << 20, 200, 3)


def test_nothing_committed_is_an_empty_answer_not_a_miss():
    c = JournaledEditsCache("j", 1 << 20)
    assert c.retrieve(1, 10, 1 << 20, INVALID_TXID, 0).num_txns == 0


def test_bad_store_is_an_invariant_violation():
    c = JournaledEditsCache("j", 1 << 20)
    with pytest.raises(InvariantViolation):
        c.store(1, 5, 4, b"x", 1)
    with pytest.raises(ValueError):
        JournaledEditsCache("j", 0)


def test_retrieve_on_another_thread_while_batches_arrive_and_evict():
    """The daemon retrieves on its event loop while the journal's thread stores: every answer
    holds consecutive, intact records from the asked txid."""
    one = len(batch(1, 10))
    c = JournaledEditsCache("j", 8 * one)
    done = threading.Event()

    def writer():
        for first in range(1, 20_000, 10):
            c.store(3, first, first + 9, batch(first, first + 9), 1)
        done.set()

    t = threading.Thread(target=writer)
    t.start()
    answers = 0
    while True:
        finished = done.is_set()  # read before the round: a round after the writer ended always answers
        high = c.highest_txid
        if high == INVALID_TXID:
            continue
        since = max(1, high - 40)
        try:
            got = c.retrieve(since, 5000, 1 << 20, high, 3)
        except CacheMissError:
            continue  # evicted meanwhile
        if got.num_txns:
            assert txids(got.records) == list(range(since, since + got.num_txns))
            answers += 1
        if finished:
            break
    t.join()
    assert answers > 0
