"""The ``qjournal`` Spark data source: batch reads against the ingest, a stream over live JournalNodes.

* Batch: ``spark.read.format("qjournal")`` over the generated journal returns the
  ingest's edits table row for row (one decoder, source invariant 1), and a txid
  range reads only the segments that overlap it (one partition per copy).
* Streaming: three real ``qjournal journalnode`` processes, a writer
  (``QuorumJournalManager`` in this process, on its own event loop) writing
  NameNode ops from the seeded generator, in segments it finalizes and one it
  leaves in progress. A query (Parquet file sink: exactly once by its metadata
  log) started while the writer writes reaches the writer's last committed txid,
  stops; the writer goes on; the query restarted from its checkpoint reaches the
  new last txid, and the sink holds every txid 1..N exactly once.
"""

from __future__ import annotations

import os

import pytest
from pyspark.testing import assertDataFrameEqual

from qjournal.pipeline import ingest as ing
from qjournal.pipeline.decode import EDITS_COLUMNS
from qjournal.util.waiting import wait_until
from tests.pipeline.live_journal import JournalWriter, journal  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

SINK_SCHEMA = "txid long, op string, node string, valid boolean, segment_start long"
STREAM_SEED = int(os.environ.get("QJ_STREAM_SEED", "20261126"))


def test_batch_read_equals_the_ingested_table(spark, clean_history, clean_ingested):
    layout, _ = clean_ingested
    dirs = ",".join(clean_history.journal_dirs)
    got = spark.read.format("qjournal").option("journalDirs", dirs).load()
    # small copies share a partition (partitionBytes, 64 MiB): here all twelve fit in one
    assert got.rdd.getNumPartitions() == 1
    want = ing.read_edits(spark, layout)
    assertDataFrameEqual(got.select(*EDITS_COLUMNS), want.select(*EDITS_COLUMNS))
    # one partition per copy when asked, the same rows
    each = spark.read.format("qjournal").option("journalDirs", dirs).option("partitionBytes", "0").load()
    assert each.rdd.getNumPartitions() == 3 * len(clean_history.segments)
    assertDataFrameEqual(each.select(*EDITS_COLUMNS), want.select(*EDITS_COLUMNS))


def test_batch_read_prunes_segments_outside_the_txid_range(spark, clean_history):
    s, e = clean_history.segments[1]
    lo, hi = s + 5, s + 14
    df = spark.read.format("qjournal").option("journalDirs", ",".join(clean_history.journal_dirs)) \
        .option("startTxid", str(lo)).option("endTxid", str(hi)).option("partitionBytes", "0").load()
    assert df.rdd.getNumPartitions() == 3  # only the segment holding the range, on each node
    rows = df.select("node", "txid", "segment_start").collect()
    assert sorted(r["txid"] for r in rows) == sorted(list(range(lo, hi + 1)) * 3)
    assert {r["segment_start"] for r in rows} == {s}


# --- streaming over real JournalNodes ---------------------------------------------------------

def _sink_txids(spark, path: str) -> list[int]:
    if not os.path.isdir(os.path.join(path, "_spark_metadata")):
        return []
    return [r[0] for r in spark.read.schema(SINK_SCHEMA).parquet(path).select("txid").collect()]


@pytest.mark.timeout(300)
def test_stream_reaches_the_committed_txid_and_is_exactly_once_across_restarts(spark, journal, tmp_path):
    print(f"stream seed={STREAM_SEED}")
    sink, ckpt = str(tmp_path / "sink"), str(tmp_path / "ckpt")
    writer = JournalWriter(journal, STREAM_SEED)

    def start():
        return spark.readStream.format("qjournal").option("journal", journal).load() \
            .select("txid", "op", "node", "valid", "segment_start").writeStream.format("parquet") \
            .option("path", sink).option("checkpointLocation", ckpt) \
            .trigger(processingTime="200 milliseconds").start()

    def reaches(txid: int):
        def cond():
            assert query.exception() is None, query.exception()
            got = _sink_txids(spark, sink)
            return got and max(got) >= txid
        return cond

    try:
        writer.write(40)
        writer.finalize()                 # segment 1..41 finalized
        query = start()
        last = writer.write(45)           # 42..86 written while the query runs, left in progress
        wait_until(reaches(last), f"the stream to reach the last committed txid {last}", 120, poll_s=0.5)
        query.stop()
        first_run = _sink_txids(spark, sink)

        writer.write(14)
        writer.finalize()                 # 42..101 finalized
        last = writer.write(23)           # 102..124 in progress
        query = start()                   # restarted from its checkpoint (offset log)
        wait_until(reaches(last), f"the restarted stream to reach txid {last}", 120, poll_s=0.5)
        query.stop()
    finally:
        writer.close()
        for q in spark.streams.active:
            q.stop()
    rows = spark.read.schema(SINK_SCHEMA).parquet(sink).collect()
    txids = sorted(r["txid"] for r in rows)
    assert txids == list(range(1, last + 1)), "every committed txid exactly once"
    assert max(first_run) >= 86 and all(r["valid"] for r in rows)
    assert {r["segment_start"] for r in rows} == {1, 42, 102}
    ops = {r["txid"]: r["op"] for r in rows}
    assert ops[1] == ops[42] == ops[102] == "OP_START_LOG_SEGMENT" and ops[41] == "OP_END_LOG_SEGMENT"
