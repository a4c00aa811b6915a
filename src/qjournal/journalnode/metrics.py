"""Per-journal counters of a JournalNode, named as Hadoop's JournalMetrics (reference §7.1).

Why here and plain: the synchronous :class:`~qjournal.journalnode.journal.Journal`
counts what it does (batches, txns, bytes, syncs) without knowing about HTTP
or prometheus; the daemon's ``/jmx`` and ``/metrics`` pages read these objects.
Dashboards built for Hadoop find the same names (``BatchesWritten``,
``CurrentLagTxns``, ``Syncs60s`` percentiles, ...).

Sync durations are recorded only when the Journal was given a clock; the
quantiles are computed over the samples of the last 60/300/3600 seconds that
are still in a bounded ring (a limit on everything: at most
``max_sync_samples`` samples are kept).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from qjournal.protocol.segment import INVALID_TXID

__all__ = ["JournalMetrics", "SYNC_WINDOWS_S", "SYNC_PERCENTILES", "sync_percentile_attr"]

#: windows of the sync-time quantiles, as Hadoop's Syncs60s/Syncs300s/Syncs3600s
SYNC_WINDOWS_S = (60, 300, 3600)
#: percentiles of the sync-time quantiles (Hadoop's MutableQuantiles)
SYNC_PERCENTILES = (50, 75, 90, 95, 99)



def sync_percentile_attr(window_s: int, percentile: int) -> str:
    """The bean attribute of one sync-time percentile, e.g. ``Syncs60s99thPercentileLatencyMicros``."""
    return f"Syncs{window_s}s{percentile}thPercentileLatencyMicros"


@dataclass
class JournalMetrics:
    """Counters and gauges of one journal (one ``Journal-<jid>`` bean)."""

    batches_written: int = 0
    batches_written_while_lagging: int = 0
    txns_written: int = 0
    bytes_written: int = 0
    #: finalized segments installed from peers by the syncer (Hadoop counts them under this name)
    num_edit_logs_synced: int = 0
    last_journal_timestamp: float = 0.0
    max_sync_samples: int = 4096
    _syncs: deque = field(default_factory=deque, repr=False)

    def record_sync(self, now_s: float, duration_s: float) -> None:
        """Remember one fsync of a batch (time in seconds of the injected clock)."""
        self._syncs.append((now_s, duration_s))
        while len(self._syncs) > self.max_sync_samples:
            self._syncs.popleft()

    def sync_quantiles_us(self, now_s: float, window_s: int) -> dict[str, float]:
        """Percentiles of sync durations in µs over the last ``window_s`` seconds.

        Returns:
            The bean attributes ``{"Syncs<w>sNumOps": n, "Syncs<w>s50thPercentileLatencyMicros": ..., ...}``
            (zeros when empty).
        """
        xs = sorted(d for t, d in self._syncs if now_s - t <= window_s)
        out: dict[str, float] = {f"Syncs{window_s}sNumOps": float(len(xs))}
        for p in SYNC_PERCENTILES:
            v = xs[min(len(xs) - 1, (len(xs) * p) // 100)] * 1e6 if xs else 0.0
            out[sync_percentile_attr(window_s, p)] = round(v, 1)
        return out

    def snapshot(self, *, last_writer_epoch: int, last_promised_epoch: int,
                 last_written_txid: int, committed_txid: int, now_s: float | None) -> dict:
        """The ``Journal-<jid>`` bean's attributes (Hadoop names)."""
        lag = 0
        if committed_txid != INVALID_TXID:
            lag = max(0, committed_txid - last_written_txid)
        out: dict = {
            "BatchesWritten": self.batches_written,
            "BatchesWrittenWhileLagging": self.batches_written_while_lagging,
            "TxnsWritten": self.txns_written,
            "BytesWritten": self.bytes_written,
            "NumEditLogsSynced": self.num_edit_logs_synced,
            "LastWriterEpoch": last_writer_epoch,
            "LastPromisedEpoch": last_promised_epoch,
            "LastWrittenTxId": last_written_txid,
            "LastCommittedTxId": committed_txid,
            "CurrentLagTxns": lag,
            "LastJournalTimestamp": int(self.last_journal_timestamp * 1000),
        }
        if now_s is not None:
            for w in SYNC_WINDOWS_S:
                out.update(self.sync_quantiles_us(now_s, w))
        return out
