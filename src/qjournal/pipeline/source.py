"""The journal as a Spark data source: ``spark.read.format("qjournal")`` and ``spark.readStream.format("qjournal")``.

Why: a Spark user reads tables, not segment files; with this source the
decoded edits of a running journal are a DataFrame (batch) or an unbounded
one (streaming) whose partitions are read by the executors straight from the
JournalNodes. The pipeline's own ingest reads through it too, so there is one
fetch and one decoder (:mod:`qjournal.pipeline.fetch`,
:mod:`qjournal.pipeline.decode`).

Options (all strings, as Spark passes them):

============== =====================================================================
``journal``    ``qjournal://h1:p1;h2:p2;h3:p3/<jid>`` (running JournalNodes), or
``journalDirs`` comma-separated ``dfs.journalnode.edits.dir`` paths every executor sees
``jid``        with ``journalDirs``: the journal id (default: every journal found)
``copies``     ``all`` (default for batch): every node's copy of every finalized
               segment, each read by one task, as the ingest keeps them;
               ``committed``: the journal's committed edits once each, one partition
               per segment, finalized segments and the in-progress one up to the
               committed txid, replicas failed over (streaming always reads this way,
               one partition per segment)
``startTxid``  first txid (default 1); segments wholly before it are not read
``endTxid``    last txid (default: no limit); segments wholly after it are not read
``fileStats``  ``true``: append ``file_length`` and ``file_crc32c`` of the copy read
``confDir``    a qjournal configuration directory (default ``$QJOURNAL_CONF_DIR``)
``conf``       JSON object of configuration keys (TLS files, timeouts) over ``confDir``
``batchRows``  rows per Arrow batch an executor produces (bounds its memory)
``partitionBytes`` a batch read puts consecutive copies (segments) into one Spark partition
               up to about this many bytes (default 64 MiB; ``0``: one partition each): a task
               costs Spark and its Python worker a fixed ~0.1-0.3 s, which a journal of many
               small segments would pay per copy
``minPartitions`` at least this many partitions when there are that many copies (default 1;
               the ingest passes the session's default parallelism)
``tasks``      JSON list of planned tasks (the ingest's own planning; overrides the above)
============== =====================================================================

The schema is the edits table's (:data:`qjournal.pipeline.decode.EDITS_ARROW_SCHEMA`).
A copy that cannot be fetched (``copies = all``) is one row with
``valid = false`` and a ``problem`` starting ``fetch failed``; a committed read
that no replica can serve fails its task (Spark retries it).

Streaming (``readStream``): offsets are ``{"txid": N}``, the last txid
delivered; each micro-batch plans the committed run after the previous offset
(never past the committed txid a quorum reported, fetch invariant 4) and reads
exactly the txids ``(start, end]``. With Spark's offset log and an idempotent
or transactional sink (the file sink, or ``foreachBatch`` writing by batch id),
every committed txid reaches the sink exactly once across restarts.

Invariants:

1. A batch read with ``copies = all`` returns, for the same copies, exactly the
   rows the ingest writes into the edits table (one decoder).
2. A streaming micro-batch ``(start, end]`` holds each txid of that range once
   and nothing else.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema

from qjournal.config import Configuration
from qjournal.errors import ConfigError, JournalError
from qjournal.protocol.journal_layout import current_dir
from qjournal.pipeline import decode as dec
from qjournal.pipeline import fetch as fe
from qjournal.protocol.segment import parse_segment_file_name

#: the name given to ``spark.read.format``
FORMAT = "qjournal"
COPIES_ALL, COPIES_COMMITTED = "all", "committed"
#: the default ``partitionBytes``: consecutive copies share a Spark partition up to about this many bytes
DEFAULT_PARTITION_BYTES = 64 << 20
#: a copy's size when the plan does not know it (a remote copy): bytes per txid of a typical NameNode edit
_BYTES_PER_TXID_GUESS = 200


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options (module docstring)."""

    journal: str | None
    journal_dirs: tuple[str, ...]
    jid: str | None
    copies: str
    start_txid: int
    end_txid: int | None
    file_stats: bool
    tasks: tuple[fe.CopyTask, ...] | None
    settings: fe.ReadSettings
    partition_bytes: int = DEFAULT_PARTITION_BYTES
    min_partitions: int = 1

    @classmethod
    def parse(cls, options, *, streaming: bool = False) -> "SourceOptions":
        """Raises: ConfigError naming the bad option."""
        opts = {str(k).lower(): v for k, v in dict(options).items()}

        def get_int(name: str, default: int | None) -> int | None:
            raw = opts.get(name.lower())
            if raw in (None, ""):
                return default
            try:
                return int(raw)
            except ValueError:
                raise ConfigError(f"option {name}={raw!r} of format {FORMAT!r} is not an integer",
                                  key=name) from None

        copies = (opts.get("copies") or (COPIES_COMMITTED if streaming else COPIES_ALL)).lower()
        if copies not in (COPIES_ALL, COPIES_COMMITTED):
            raise ConfigError(f"option copies={copies!r} of format {FORMAT!r}: use {COPIES_ALL} or "
                              f"{COPIES_COMMITTED}", key="copies")
        if streaming and copies != COPIES_COMMITTED:
            raise ConfigError(f"a streaming read of format {FORMAT!r} reads committed edits only "
                              f"(copies={copies!r} given)", key="copies")
        conf = Configuration.load(opts.get("confdir") or None)
        try:
            overrides = json.loads(opts.get("conf") or "{}")
        except ValueError as e:
            raise ConfigError(f"option conf of format {FORMAT!r} is not a JSON object: {e}", key="conf") from None
        if not isinstance(overrides, dict):
            raise ConfigError(f"option conf of format {FORMAT!r} is not a JSON object", key="conf")
        conf.apply_overrides({str(k): str(v) for k, v in overrides.items()})
        tasks = None
        if opts.get("tasks"):
            try:
                raw_tasks = json.loads(opts["tasks"])
            except ValueError as e:
                raise ConfigError(f"option tasks of format {FORMAT!r} is not JSON: {e}", key="tasks") from None
            tasks = tuple(fe.CopyTask.from_json(t) for t in raw_tasks)
        journal = opts.get("journal") or None
        dirs = tuple(d for d in (opts.get("journaldirs") or "").split(",") if d)
        if tasks is None and bool(journal) == bool(dirs):
            raise ConfigError(f"format {FORMAT!r} needs exactly one of the options journal "
                              f"(qjournal://...) and journalDirs", key="journal")
        if dirs and copies == COPIES_COMMITTED:
            raise ConfigError(f"format {FORMAT!r}: copies=committed needs a running journal "
                              f"(option journal=qjournal://...)", key="copies")
        batch_rows = get_int("batchRows", dec.DEFAULT_BATCH_ROWS)
        if batch_rows is None or batch_rows <= 0:
            raise ConfigError(f"option batchRows of format {FORMAT!r} must be positive", key="batchRows")
        partition_bytes = get_int("partitionBytes", DEFAULT_PARTITION_BYTES)
        min_partitions = get_int("minPartitions", 1)
        if partition_bytes is None or partition_bytes < 0 or min_partitions is None or min_partitions < 1:
            raise ConfigError(f"format {FORMAT!r}: partitionBytes must be 0 or more and minPartitions at least 1 "
                              f"(got {partition_bytes} and {min_partitions})", key="partitionBytes")
        start = get_int("startTxid", 1)
        end = get_int("endTxid", None)
        if end is not None and end < start:
            raise ConfigError(f"format {FORMAT!r}: endTxid {end} is before startTxid {start}", key="endTxid")
        return cls(journal, dirs, opts.get("jid") or None, copies, start, end,
                   (opts.get("filestats") or "false").lower() == "true", tasks,
                   fe.ReadSettings.from_conf(conf, batch_rows=batch_rows), partition_bytes, min_partitions)

    @property
    def txid_range(self) -> tuple[int, int] | None:
        if self.start_txid <= 1 and self.end_txid is None:
            return None
        return self.start_txid, self.end_txid if self.end_txid is not None else 2 ** 63 - 1


def local_copies(journal_dirs: list[str] | tuple[str, ...], names: list[str], jid: str | None = None,
                 ) -> list[fe.CopyTask]:
    """Copy tasks for the finalized segments under JournalNode directories (no file is read).

    Args:
        journal_dirs: one ``dfs.journalnode.edits.dir`` per node.
        names: one node name per directory.
        jid: only this journal id (default: every journal found).

    Raises:
        JournalError: a directory does not exist, or ``jid`` is found nowhere.
    """
    out: list[fe.CopyTask] = []
    seen_jid = False
    for d, node in zip(journal_dirs, names):
        if not os.path.isdir(d):
            raise JournalError(f"journal directory {d!r} (node {node}) does not exist", path=d)
        for j in sorted(os.listdir(d)):
            cur = current_dir(d, j)
            if (jid is not None and j != jid) or not os.path.isdir(cur):
                continue
            seen_jid = True
            for name in sorted(os.listdir(cur)):
                parsed = parse_segment_file_name(name)
                if parsed is None or parsed.end_txid is None:
                    continue  # finalized segments only
                path = os.path.abspath(os.path.join(cur, name))
                out.append(fe.CopyTask(j, parsed.start_txid, parsed.end_txid, (fe.Source(node, path),)))
    if jid is not None and not seen_jid:
        raise JournalError(f"journal id {jid!r} not found in any of {list(journal_dirs)}", jid=jid)
    out.sort(key=lambda t: (t.jid, t.segment_start, t.node))
    return out


def dir_node_names(journal_dirs: list[str] | tuple[str, ...]) -> list[str]:
    """Node names for JournalNode directories: base names, or ``node<i>`` if they collide."""
    bases = [os.path.basename(os.path.normpath(d)) or f"node{i}" for i, d in enumerate(journal_dirs)]
    if len(set(bases)) == len(bases):
        return bases
    return [f"node{i}" for i in range(len(journal_dirs))]


def _overlaps(task: fe.CopyTask, start: int, end: int | None) -> bool:
    return task.segment_end >= start and (end is None or task.segment_start <= end)


class _TaskPartition(InputPartition):
    """One Spark partition: consecutive :class:`~qjournal.pipeline.fetch.CopyTask` s and the txids wanted."""

    def __init__(self, tasks: list[fe.CopyTask], txid_range: tuple[int, int] | None) -> None:
        super().__init__([t.to_json() for t in tasks])
        self.tasks = tasks
        self.txid_range = txid_range


def _task_bytes(task: fe.CopyTask) -> int:
    if task.file_length is not None:
        return task.file_length
    return (task.segment_end - task.segment_start + 1) * _BYTES_PER_TXID_GUESS


def group_tasks(tasks: list[fe.CopyTask], partition_bytes: int, min_partitions: int) -> list[list[fe.CopyTask]]:
    """Consecutive tasks into groups of about ``partition_bytes`` (``0``: one task each), at least
    ``min_partitions`` groups when there are that many tasks, each group as near the same size as
    contiguous cuts allow. Order is kept (a group's rows come in the plan's order)."""
    if not tasks:
        return []
    if partition_bytes <= 0:
        return [[t] for t in tasks]
    sizes = [max(1, _task_bytes(t)) for t in tasks]
    total = sum(sizes)
    n = min(len(tasks), max(min_partitions, -(-total // partition_bytes)))
    groups: list[list[fe.CopyTask]] = []
    cur: list[fe.CopyTask] = []
    done = 0
    for i, (t, size) in enumerate(zip(tasks, sizes)):
        cur.append(t)
        done += size
        left_tasks = len(tasks) - i - 1
        left_groups = n - len(groups) - 1
        # cut when this group reached its share of the bytes, or when every later task needs its own group
        if left_groups > 0 and (done >= total * (len(groups) + 1) / n or left_tasks == left_groups):
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)
    return groups


class QJournalBatchReader(DataSourceReader):
    """Plans on the driver (metadata only), reads on the executors (module docstring)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def _tasks(self) -> list[fe.CopyTask]:
        o = self.opts
        if o.tasks is not None:
            return list(o.tasks)
        if o.journal_dirs:
            return local_copies(o.journal_dirs, dir_node_names(o.journal_dirs), o.jid)
        if o.copies == COPIES_COMMITTED:
            return fe.plan_committed(o.journal, o.settings.conf(), since_txid=o.start_txid,
                                     until_txid=o.end_txid).tasks
        return fe.plan_copies(o.journal, o.settings.conf(), since_txid=o.start_txid).tasks

    def partitions(self):
        o = self.opts
        tasks = [t for t in self._tasks() if _overlaps(t, o.start_txid, o.end_txid)]
        return [_TaskPartition(g, o.txid_range) for g in group_tasks(tasks, o.partition_bytes, o.min_partitions)]

    def read(self, partition):
        for task in partition.tasks:
            yield from fe.read_task(task, self.opts.settings, txid_range=partition.txid_range,
                                    file_stats=self.opts.file_stats)


class QJournalStreamReader(DataSourceStreamReader):
    """Tails the committed journal; offsets are ``{"txid": last delivered}`` (module docstring)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        #: end txid -> the plan made for it by latestOffset (reused by partitions in this run)
        self._plans: dict[int, list[fe.CopyTask]] = {}

    def initialOffset(self) -> dict:
        return {"txid": self.opts.start_txid - 1}

    def _plan(self, since_txid: int) -> fe.Plan:
        return fe.plan_committed(self.opts.journal, self.opts.settings.conf(), since_txid=since_txid,
                                 until_txid=self.opts.end_txid)

    def latestOffset(self, start: dict, limit=None) -> dict:
        done = int(start["txid"])
        plan = self._plan(done + 1)
        end = max(done, plan.committed_txid if plan.committed_txid is not None else done)
        if end > done:
            self._plans[end] = plan.tasks
        return {"txid": end}

    def partitions(self, start: dict, end: dict):
        first, last = int(start["txid"]) + 1, int(end["txid"])
        if last < first:
            return []
        tasks = self._plans.get(last)
        if tasks is None or not tasks or tasks[0].segment_start > first:
            # a restarted query replans the range the offset log holds
            plan = self._plan(first)
            if plan.committed_txid is None or plan.committed_txid < last:
                raise JournalError(f"journal {plan.jid!r}: txids {first}..{last} of the offset log are "
                                   f"not readable now (readable to {plan.committed_txid})", jid=plan.jid)
            tasks = plan.tasks
        return [_TaskPartition([t], (first, last)) for t in tasks if _overlaps(t, first, last)]

    def read(self, partition):
        for task in partition.tasks:
            yield from fe.read_task(task, self.opts.settings, txid_range=partition.txid_range,
                                    file_stats=self.opts.file_stats)

    def commit(self, end: dict) -> None:
        done = int(end["txid"])
        for k in [k for k in self._plans if k <= done]:
            del self._plans[k]


class QJournalDataSource(DataSource):
    """``spark.dataSource.register(QJournalDataSource)``; then ``format("qjournal")``."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self):
        opts = {str(k).lower(): v for k, v in dict(self.options).items()}
        with_stats = (opts.get("filestats") or "false").lower() == "true"
        return from_arrow_schema(fe.stats_schema() if with_stats else dec.EDITS_ARROW_SCHEMA)

    def reader(self, schema) -> QJournalBatchReader:
        return QJournalBatchReader(SourceOptions.parse(self.options))

    def streamReader(self, schema) -> QJournalStreamReader:
        return QJournalStreamReader(SourceOptions.parse(self.options, streaming=True))


def register(spark) -> None:
    """Make ``format("qjournal")`` known to ``spark`` (idempotent)."""
    spark.dataSource.register(QJournalDataSource)


def read_tasks(spark, tasks: list[fe.CopyTask], *, file_stats: bool = False,
               conf: Configuration | None = None, batch_rows: int | None = None):
    """The decoded rows of planned tasks, read by the executors (the ingest's entry).

    Returns:
        A DataFrame with the edits schema (plus the file statistics when asked).
    """
    reader = (spark.read.format(FORMAT).option("tasks", json.dumps([t.to_json() for t in tasks]))
              .option("minPartitions", str(max(1, spark.sparkContext.defaultParallelism))))
    if conf is not None:
        reader = reader.option("conf", json.dumps(dict(conf.items())))
    if batch_rows is not None:
        reader = reader.option("batchRows", str(batch_rows))
    return reader.option("fileStats", "true" if file_stats else "false").load()


__all__ = ["FORMAT", "COPIES_ALL", "COPIES_COMMITTED", "DEFAULT_PARTITION_BYTES", "group_tasks", "SourceOptions", "QJournalDataSource",
           "QJournalBatchReader", "QJournalStreamReader", "register", "read_tasks", "local_copies",
           "dir_node_names"]
