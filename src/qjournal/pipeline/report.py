"""Report: what the namespace did, who did it, how it grew, and what the audit found.

Why: operators read a journal to answer questions the NameNode does not keep
(which directories churn, which users drive load, how fast the namespace
grows) and to see replica damage at a glance. The report turns the edits
table, the audit findings and the namespace history into Parquet tables and
one self-contained HTML page (PNG plots embedded), openable without a server.
Every file goes through :class:`qjournal.pipeline.store.OutputStore`, so the
report may live on any Hadoop file system.

Tables (``<out>/report/<name>.parquet``), each a pure DataFrame transform:

* ``ops_over_time``  bucket (hour or day, by the history's span), op, count
* ``top_directories`` directory path, ops (the directories most changed)
* ``user_activity``  user, op, count
* ``namespace_by_directory`` top-level directory, files, directories, bytes (at the end)
* ``namespace_growth`` bucket, created, removed, inodes (alive at the bucket's end)
* ``findings``       the audit's findings

Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import base64
import html
import io
import time
from dataclasses import dataclass

from qjournal.namenode import ops as nn_ops
from qjournal.pipeline import checkpoint as cp
from qjournal.pipeline.store import OutputStore, join

#: rows kept in "top" tables
TOP_N = 20
#: a history shorter than this many days is bucketed by hour, else by day
HOURLY_SPAN_DAYS = 3
#: a history shorter than this many hours is bucketed by minute
MINUTELY_SPAN_HOURS = 6


def bucket_unit(min_ts_ms: int | None, max_ts_ms: int | None) -> str:
    """``minute`` for histories under 6 hours, ``hour`` under 3 days, else ``day``."""
    if min_ts_ms is None or max_ts_ms is None:
        return "hour"
    span = max_ts_ms - min_ts_ms
    if span < MINUTELY_SPAN_HOURS * 3600_000:
        return "minute"
    return "hour" if span < HOURLY_SPAN_DAYS * 86400_000 else "day"


def _bucket(unit: str):
    from pyspark.sql import functions as F

    return F.date_trunc(unit, F.timestamp_millis(F.col("ts"))).alias("bucket")


def namespace_ops(edits):
    """Edits without the segment markers."""
    from pyspark.sql import functions as F

    return edits.where(~F.col("op").isin("OP_START_LOG_SEGMENT", "OP_END_LOG_SEGMENT"))


def ops_over_time(edits, unit: str):
    """Operations by type per time bucket."""
    return namespace_ops(edits).groupBy(_bucket(unit), "op").count().orderBy("bucket", "op")


def _parent_dir(col):
    from pyspark.sql import functions as F

    d = F.regexp_extract(col, r"^(.*)/[^/]*$", 1)
    return F.when(d == "", F.lit("/")).otherwise(d)


def top_directories(edits, n: int = TOP_N):
    """The directories whose entries changed most (by the parent directory of each op's path).

    A rename counts for both its source and destination directories.
    """
    from pyspark.sql import functions as F

    ops = namespace_ops(edits)
    plain = ops.where(F.col("op") != "OP_RENAME").select(_parent_dir(F.col("path")).alias("directory"))
    rn = ops.where(F.col("op") == "OP_RENAME")
    moved = rn.select(_parent_dir(F.col("src_path")).alias("directory")).unionByName(
        rn.select(_parent_dir(F.col("dst_path")).alias("directory")))
    return plain.unionByName(moved).where(F.col("directory").isNotNull()).groupBy("directory") \
        .agg(F.count("*").alias("ops")).orderBy(F.col("ops").desc(), F.col("directory")).limit(n)


def user_activity(edits):
    """Operations per user and type."""
    return namespace_ops(edits).groupBy("user", "op").count().orderBy("user", "op")


def top_level_directories(image, *, max_rounds: int = 64):
    """For each inode, its ancestor directly under the root (pointer jumping over parent links).

    Args:
        image: rows with ``inode_id, parent_id``.

    Returns:
        ``inode_id, top_id`` (the root itself is absent).
    """
    from pyspark.sql import functions as F

    root = nn_ops.ROOT_INODE_ID
    nodes = image.where(F.col("inode_id") != root).select(
        "inode_id", F.col("parent_id").alias("anc"),
        F.when(F.col("parent_id") == root, F.col("inode_id")).alias("top_id"))
    for _ in range(max_rounds):
        nodes = nodes.localCheckpoint(eager=True)
        if nodes.where(F.col("top_id").isNull() & F.col("anc").isNotNull()).limit(1).count() == 0:
            break
        p = nodes.select(F.col("inode_id").alias("p_id"), F.col("anc").alias("p_anc"),
                         F.col("top_id").alias("p_top"))
        j = nodes.join(p, nodes["anc"] == p["p_id"], how="left")
        todo = F.col("top_id").isNull()
        nodes = j.select("inode_id",
                         F.when(todo, F.col("p_anc")).otherwise(F.col("anc")).alias("anc"),
                         F.when(todo, F.col("p_top")).otherwise(F.col("top_id")).alias("top_id"))
    return nodes.select("inode_id", "top_id")


def namespace_by_directory(image, n: int = TOP_N):
    """Files, directories and bytes under each top-level directory (of an image).

    Files directly under the root are counted under ``/``.
    """
    from pyspark.sql import functions as F

    tops = top_level_directories(image)
    names = image.select(F.col("inode_id").alias("top_id"), F.concat(F.lit("/"), F.col("name"))
                         .alias("directory"))
    rows = image.join(tops, on="inode_id", how="inner").join(names, on="top_id", how="left")
    rows = rows.withColumn("directory", F.when(F.col("top_id") == F.col("inode_id"), F.when(
        F.col("type") == "d", F.col("directory")).otherwise(F.lit("/"))).otherwise(F.col("directory")))
    return rows.groupBy("directory").agg(
        F.sum(F.when(F.col("type") == "f", 1).otherwise(0)).cast("long").alias("files"),
        F.sum(F.when(F.col("type") == "d", 1).otherwise(0)).cast("long").alias("directories"),
        F.sum(F.when(F.col("type") == "f", F.col("length")).otherwise(0)).cast("long").alias("bytes"),
    ).orderBy(F.col("files").desc(), F.col("directory")).limit(n)


def namespace_growth(history, edits, unit: str, base_inodes: int = 0):
    """Inodes created and removed per bucket, and the namespace size at each bucket's end.

    Args:
        history: from :func:`qjournal.pipeline.checkpoint.namespace_history`.
        edits: the canonical edits (for txid -> time).
        unit: ``hour`` or ``day``.
        base_inodes: inodes already in the base image (alive before the first edit).
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    times = edits.select("txid", _bucket(unit))
    born = history.join(times.withColumnRenamed("txid", "created_txid"), on="created_txid", how="inner") \
        .groupBy("bucket").agg(F.count("*").alias("created"))
    died = history.where(F.col("dead_txid").isNotNull()).join(
        times.withColumnRenamed("txid", "dead_txid"), on="dead_txid", how="inner") \
        .groupBy("bucket").agg(F.count("*").alias("removed"))
    both = born.join(died, on="bucket", how="full").fillna(0, ["created", "removed"])
    w = Window.orderBy("bucket").rowsBetween(Window.unboundedPreceding, 0)
    return both.withColumn("inodes", F.lit(base_inodes) + F.sum(F.col("created") - F.col("removed")).over(w)) \
        .orderBy("bucket")


# --- plots and page ------------------------------------------------------------------

def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def plot_ops_over_time(pdf, unit: str) -> str | None:
    import matplotlib.pyplot as plt

    if pdf.empty:
        return None
    wide = pdf.pivot_table(index="bucket", columns="op", values="count", fill_value=0).sort_index()
    fig, ax = plt.subplots(figsize=(10, 4.5))
    ax.stackplot(wide.index, *[wide[c] for c in wide.columns], labels=list(wide.columns), alpha=0.85)
    ax.set_title(f"Operations by type per {unit}")
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel(f"ops per {unit}")
    ax.legend(loc="upper left", fontsize=7, ncol=2)
    fig.autofmt_xdate()
    return _png(fig)


def plot_barh(pdf, label: str, value: str, title: str, xlabel: str) -> str | None:
    import matplotlib.pyplot as plt

    if pdf.empty:
        return None
    pdf = pdf.iloc[::-1]
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.3 * len(pdf) + 1)))
    ax.barh(pdf[label].astype(str), pdf[value], color="#4c72b0")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", labelsize=7)
    return _png(fig)


def plot_users(pdf) -> str | None:
    import matplotlib.pyplot as plt

    if pdf.empty:
        return None
    wide = pdf.pivot_table(index="user", columns="op", values="count", fill_value=0)
    wide = wide.loc[wide.sum(axis=1).sort_values(ascending=True).index[-TOP_N:]]
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.3 * len(wide) + 1)))
    left = None
    for c in wide.columns:
        ax.barh(wide.index, wide[c], left=left, label=c)
        left = wide[c] if left is None else left + wide[c]
    ax.set_title(f"Activity per user (top {min(TOP_N, len(wide))}), by operation")
    ax.set_xlabel("operations")
    ax.legend(fontsize=7, loc="lower right")
    return _png(fig)


def plot_growth(pdf, unit: str) -> str | None:
    import matplotlib.pyplot as plt

    if pdf.empty:
        return None
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(pdf["bucket"], pdf["inodes"], marker=".", color="#2a9d8f", label="inodes alive")
    ax2 = ax.twinx()
    ax2.bar(pdf["bucket"], pdf["created"], width={"minute": 0.0005, "hour": 0.03}.get(unit, 0.6), alpha=0.3,
            color="#e76f51", label=f"created per {unit}")
    ax.set_title("Namespace size over time")
    ax.set_xlabel("time (UTC)")
    ax.set_ylabel("inodes")
    ax2.set_ylabel(f"created per {unit}")
    fig.autofmt_xdate()
    return _png(fig)


def _table_html(pdf, max_rows: int = 200) -> str:
    if pdf is None or pdf.empty:
        return "<p><em>none</em></p>"
    return pdf.head(max_rows).to_html(index=False, escape=True, border=0, classes="t")


@dataclass(frozen=True, slots=True)
class ReportResult:
    """Where the report went."""

    html_path: str
    tables: tuple[str, ...]
    pngs: tuple[str, ...]
    seconds: float


def write_report(spark, edits, manifest, findings, out_dir: str, *, base: str | None = None,
                 jid: str | None = None, title: str = "qjournal edit-log report",
                 progress=None) -> ReportResult:
    """Build the tables, the plots and ``index.html`` under ``out_dir``.

    Args:
        spark: the session.
        edits / manifest: from the ingest.
        findings: from :func:`qjournal.pipeline.audit.audit` (or None).
        out_dir: report directory (created).
        base: base image for the namespace tables (see ``checkpoint.load_base_image``).
        jid: journal id (default: the only one).
        title: page title.
        progress: optional one-line progress sink.

    Returns:
        A :class:`ReportResult`.

    Raises:
        CheckpointError: several journals and no ``jid``.
    """
    from pyspark.sql import functions as F


    t0 = time.monotonic()
    say = progress or (lambda _m: None)
    info, base_table = cp.load_base_image(base)
    base_txid = info.txid if info else 0
    p = cp.plan(manifest, jid, base_txid)
    jid, end = p.jid, p.end
    ed = cp.canonical_edits(edits.where(F.col("jid") == jid), cp.copies_frame(spark, p.copies)).cache()
    span = ed.agg(F.min("ts"), F.max("ts")).collect()[0]
    unit = bucket_unit(span[0], span[1])
    say(f"report: journal {jid}, {unit}ly buckets, namespace replayed from txid {base_txid} to {end}")

    tables = {
        "ops_over_time": ops_over_time(ed, unit),
        "top_directories": top_directories(ed),
        "user_activity": user_activity(ed),
    }
    hist_edits = ed.where((F.col("txid") > base_txid) & (F.col("txid") <= end))
    history = cp.namespace_history(spark, base_table, edits, jid=jid, copies=p.copies,
                                   txid_range=(base_txid, end)).cache()
    final = history.where(F.col("dead_txid").isNull())
    tables["namespace_by_directory"] = namespace_by_directory(final)
    tables["namespace_growth"] = namespace_growth(history, hist_edits, unit,
                                                  base_inodes=base_table.num_rows)
    if findings is not None:
        tables["findings"] = findings
    pdfs = {}
    with OutputStore(spark, out_dir) as store:
        for name in sorted(tables):
            pdf = tables[name].toPandas()
            pdfs[name] = pdf
            sink = io.BytesIO()
            pdf.to_parquet(sink, index=False)
            store.write_bytes(join(out_dir, f"{name}.parquet"), sink.getvalue())
    history.unpersist()
    ed.unpersist()
    say(f"report: tables written in {time.monotonic() - t0:.1f} s")

    import matplotlib

    matplotlib.use("Agg")
    plots = [
        ("ops_over_time", plot_ops_over_time(pdfs["ops_over_time"], unit)),
        ("namespace_growth", plot_growth(pdfs["namespace_growth"], unit)),
        ("top_directories", plot_barh(pdfs["top_directories"], "directory", "ops",
                                      f"Most changed directories (top {TOP_N})", "operations")),
        ("user_activity", plot_users(pdfs["user_activity"])),
        ("namespace_by_directory", plot_barh(pdfs["namespace_by_directory"], "directory", "files",
                                             "Files per top-level directory (end of history)",
                                             "files")),
    ]
    with OutputStore(spark, out_dir) as store:
        pngs = [store.write_bytes(join(out_dir, f"{name}.png"), base64.b64decode(b64))
                for name, b64 in plots if b64]
        html_path = store.write_bytes(join(out_dir, "index.html"),
                                      _page(title, jid, unit, base_txid, end, plots, pdfs).encode("utf-8"))
    took = time.monotonic() - t0
    say(f"report: wrote {html_path} in {took:.1f} s")
    return ReportResult(html_path, tuple(sorted(tables)), tuple(pngs), took)


def _page(title: str, jid: str, unit: str, base_txid: int, end: int, plots, pdfs) -> str:
    findings = pdfs.get("findings")
    n_err = 0 if findings is None or findings.empty else int((findings["severity"] == "error").sum())
    n_warn = 0 if findings is None or findings.empty else int((findings["severity"] == "warning").sum())
    status = ("<p class='bad'>%d error(s), %d warning(s)</p>" % (n_err, n_warn)) if (n_err or n_warn) \
        else "<p class='good'>no findings: every checked invariant holds</p>"
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1100px}"
        "table.t{border-collapse:collapse;font-size:12px}table.t td,table.t th{padding:2px 6px;"
        "border-bottom:1px solid #ddd;text-align:left}.bad{color:#b00;font-weight:bold}"
        ".good{color:#070;font-weight:bold}img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f"<p>journal <b>{html.escape(jid)}</b>; namespace replayed over txids {base_txid + 1}..{end}; "
        f"time buckets: {unit}.</p>",
        "<h2>Audit</h2>", status, _table_html(findings),
    ]
    captions = {"ops_over_time": "Operations over time", "namespace_growth": "Namespace growth",
                "top_directories": "Most changed directories", "user_activity": "Activity per user",
                "namespace_by_directory": "Namespace size by directory"}
    for name, b64 in plots:
        parts.append(f"<h2>{captions[name]}</h2>")
        if b64:
            parts.append(f"<img alt='{name}' src='data:image/png;base64,{b64}'>")
        else:
            parts.append("<p><em>no data</em></p>")
        if name in ("top_directories", "namespace_by_directory"):
            parts.append(_table_html(pdfs[name]))
    parts.append("</body></html>")
    return "\n".join(parts)


__all__ = ["TOP_N", "bucket_unit", "namespace_ops", "ops_over_time", "top_directories",
           "user_activity", "top_level_directories", "namespace_by_directory", "namespace_growth",
           "ReportResult", "write_report"]
