"""Checkpoint: previous image + later edits -> the image at a later txid, as DataFrame transforms.

Why: a standby NameNode checkpoints by replaying edits one at a time in one
process (HDFS-1580 use case 5: a checkpointer reads a journal while the active
keeps writing). The pipeline builds the same image in bulk, in parallel, from
the edits table, and writes it in the NameNode's own image format
(:mod:`qjournal.namenode.image`) so a NameNode loads it directly.

Theory of operation (each step a pure DataFrame transform):

1. *Canonical copy* (:func:`canonical_copies`): for each segment, among the
   clean copies the fingerprint held by most nodes wins (ties: the smallest
   node name); its valid records are the journal's edits.
2. *Range* (:func:`contiguous_end`, on the small manifest): edits must run
   without a hole from the image's txid + 1 to the target txid.
3. *Attribute updates* (:func:`attribute_updates`): every op becomes rows
   ``(inode_id, txid, attribute columns)`` with null for "not set by this op":
   create/mkdir set everything of the new inode and the parent's mtime; rename
   sets ``parent_id``/``name`` and both parents' mtime; delete sets the
   parent's mtime; the ``set_*`` ops set their attribute (``owner``/``group``
   null and times -1 mean unchanged, as in the Namespace). The base image
   enters as updates at txid -1.
4. *Last state* (:func:`last_state`): per inode and attribute, the value of the
   update with the highest txid (``max_by``).
5. *Deletes* (:func:`resolve_deletes`): an inode survives iff no inode on its
   path to the root, following the *final* parent links, was deleted
   directly (``OP_DELETE``, or overwritten by create/rename). Final links are
   enough: once a directory is deleted, nothing in its subtree changes again
   and ids are never reused. Pointer jumping resolves the paths in
   ``log2(depth)`` joins.
6. *Image*: the survivors, sorted by ``inode_id``; ``last_inode_id`` is the
   highest id ever created. :func:`write_image` saves them with the
   NameNode's own image format (:func:`qjournal.namenode.image.image_to_bytes`),
   through :class:`qjournal.pipeline.store.OutputStore` (any Hadoop URI).

Invariants:

1. The result equals, row for row, the image a NameNode that replayed the same
   edits one by one would save at the target txid (the decisive test).
2. A checkpoint never crosses a txid hole: the target is at most the end of
   the contiguous run after the base image's txid.
3. An edit that names a parent missing from the result's tree is a
   :class:`CheckpointError` (the edits do not fit the image), never a silently
   dropped inode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Window
from pyspark.sql import functions as F

from qjournal.errors import QJournalError, register_error
from qjournal.namenode import image as nn_image
from qjournal.namenode import ops as nn_ops
from qjournal.namenode.image_schema import IMAGE_COLUMNS, spark_type
from qjournal.pipeline.audit import clean_copies
from qjournal.pipeline.ingest import spark_schema
from qjournal.pipeline.store import OutputStore, join

#: bound on pointer-jumping rounds (2**64 levels: any real tree); reaching it means a cycle
MAX_POINTER_JUMPING_ROUNDS = 64


@register_error
class CheckpointError(QJournalError):
    """The edits cannot produce the requested image (hole, mismatch with the base image)."""


_IMAGE_TYPES = {c: spark_type(c) for c in IMAGE_COLUMNS}
_ATTRS = [c for c in IMAGE_COLUMNS if c != "inode_id"]


def empty_image_table(superuser: str = "root", supergroup: str = "supergroup",
                      root_mtime: int = 0) -> pa.Table:
    """The image of a freshly formatted namespace: the root directory only.

    Matches ``Namespace(superuser, supergroup, root_mtime=...)``.
    """
    return pa.table({"inode_id": [nn_ops.ROOT_INODE_ID], "parent_id": [0], "name": [""],
                     "type": ["d"], "permission": [0o755], "owner": [superuser],
                     "group": [supergroup], "mtime": [root_mtime], "atime": [0],
                     "replication": [0], "block_size": [0], "length": [0]},
                    schema=nn_image.IMAGE_SCHEMA)


def image_frame(spark, table: pa.Table):
    """An Arrow image table as a Spark DataFrame with the image schema."""

    table = table.select(list(IMAGE_COLUMNS)).cast(nn_image.IMAGE_SCHEMA)
    return spark.createDataFrame(table.to_pandas(), spark_schema(nn_image.IMAGE_SCHEMA))


# --- step 1-2 -------------------------------------------------------------------------

def canonical_copies(manifest):
    """One copy per segment: the clean fingerprint most nodes hold (ties: smallest node).

    Args:
        manifest: the ingest manifest.

    Returns:
        ``jid, segment_start, segment_end, node, first_txid, last_txid`` per segment.
    """


    clean = clean_copies(manifest)
    votes = clean.groupBy("jid", "segment_start", "segment_end", "fingerprint").agg(
        F.count("*").alias("votes"), F.min("node").alias("node"))
    w = Window.partitionBy("jid", "segment_start").orderBy(
        F.col("votes").desc(), F.col("segment_end").desc(), F.col("node").asc())
    best = votes.withColumn("rank", F.row_number().over(w)).where(F.col("rank") == 1)
    return best.join(clean.select("jid", "segment_start", "segment_end", "node", "fingerprint",
                                  "first_txid", "last_txid"),
                      on=["jid", "segment_start", "segment_end", "node", "fingerprint"], how="inner") \
        .select("jid", "segment_start", "segment_end", "node", "first_txid", "last_txid")


def canonical_edits(edits, copies):
    """The valid records of the chosen copies.

    Args:
        edits: the edits table.
        copies: from :func:`canonical_copies`.
    """

    return edits.where(F.col("valid")).join(
        F.broadcast(copies.select("jid", "segment_start", "node")),
        on=["jid", "segment_start", "node"], how="left_semi")


def contiguous_end(ranges: list[tuple[int, int]], after_txid: int) -> int:
    """The last txid of the hole-free run starting at ``after_txid + 1``.

    Args:
        ranges: ``(first_txid, last_txid)`` of the canonical copies.
        after_txid: the base image's txid.

    Returns:
        The end of the run (``after_txid`` when txid ``after_txid + 1`` is missing).
    """
    end = after_txid
    for first, last in sorted(ranges):
        if last <= end:
            continue
        if first > end + 1:
            break
        end = last
    return end


# --- step 3-5 -------------------------------------------------------------------------

def attribute_updates(image, edits, image_txid: int = -1):
    """Every attribute change as a row ``(inode_id, txid, <attributes, null = not set>)``.

    Args:
        image: the base image DataFrame (image schema).
        edits: the edits to apply (edits schema), already limited to the txid range.
        image_txid: txid given to the base rows (lower than any edit's).

    Returns:
        A DataFrame with ``inode_id, txid`` and every image attribute.
    """

    op = F.col("op")
    T = _IMAGE_TYPES

    def rows(df, **cols):
        out = [cols.pop("inode_id").cast("long").alias("inode_id"), F.col("txid").cast("long")]
        for a in _ATTRS:
            c = cols.get(a)
            out.append((c if c is not None else F.lit(None)).cast(T[a]).alias(a))
        return df.select(*out)

    lit0 = F.lit(0)
    mk = edits.where(op == "OP_MKDIR")
    cr = edits.where(op == "OP_CREATE")
    de = edits.where(op == "OP_DELETE")
    rn = edits.where(op == "OP_RENAME")
    parts = [
        image.select(F.col("inode_id").cast("long"), F.lit(image_txid).cast("long").alias("txid"),
                     *[F.col(a).cast(T[a]).alias(a) for a in _ATTRS]),
        rows(mk, inode_id=F.col("inode"), parent_id=F.col("parent"), name=F.col("name"),
             type=F.lit("d"), permission=F.col("perm"), owner=F.col("owner"), group=F.col("group"),
             mtime=F.col("mtime"), atime=lit0, replication=lit0, block_size=lit0, length=lit0),
        rows(cr, inode_id=F.col("inode"), parent_id=F.col("parent"), name=F.col("name"),
             type=F.lit("f"), permission=F.col("perm"), owner=F.col("owner"), group=F.col("group"),
             mtime=F.col("mtime"), atime=F.col("atime"), replication=F.col("replication"),
             block_size=F.col("block_size"), length=F.col("length")),
        rows(mk.unionByName(cr), inode_id=F.col("parent"), mtime=F.col("mtime")),
        rows(de, inode_id=F.col("parent"), mtime=F.col("mtime")),
        rows(rn, inode_id=F.col("inode"), parent_id=F.col("dst_parent"), name=F.col("dst_name")),
        rows(rn, inode_id=F.col("src_parent"), mtime=F.col("mtime")),
        rows(rn, inode_id=F.col("dst_parent"), mtime=F.col("mtime")),
        rows(edits.where(op == "OP_SET_PERMISSION"), inode_id=F.col("inode"), permission=F.col("perm")),
        rows(edits.where(op == "OP_SET_OWNER"), inode_id=F.col("inode"), owner=F.col("owner"),
             group=F.col("group")),
        rows(edits.where(op == "OP_SET_TIMES"), inode_id=F.col("inode"),
             mtime=F.when(F.col("mtime") != -1, F.col("mtime")),
             atime=F.when(F.col("atime") != -1, F.col("atime"))),
        rows(edits.where(op == "OP_SET_REPLICATION"), inode_id=F.col("inode"),
             replication=F.col("replication")),
    ]
    out = parts[0]
    for p in parts[1:]:
        out = out.unionByName(p)
    return out


def direct_deletes(edits):
    """Inodes removed directly: deleted, or overwritten by a create or a rename.

    Returns:
        ``inode_id, txid`` (the txid of the removal; one row per inode).
    """

    op = F.col("op")
    deleted = edits.where(op == "OP_DELETE").select(F.col("inode").alias("inode_id"), "txid")
    over = edits.where(op.isin("OP_CREATE", "OP_RENAME") & (F.col("overwrite_inode") != 0)) \
        .select(F.col("overwrite_inode").alias("inode_id"), "txid")
    return deleted.unionByName(over).groupBy("inode_id").agg(F.min("txid").alias("txid"))


def last_state(updates):
    """Per inode, each attribute from its latest update that sets it (step 4).

    Args:
        updates: from :func:`attribute_updates`.

    Returns:
        One row per inode that exists at some point (``type`` not null): image
        columns plus ``created_txid`` (the base image's txid for its own rows).
    """

    aggs = [F.max_by(F.col(a), F.when(F.col(a).isNotNull(), F.col("txid"))).alias(a) for a in _ATTRS]
    created = F.min(F.when(F.col("type").isNotNull(), F.col("txid"))).alias("created_txid")
    return updates.groupBy("inode_id").agg(*aggs, created).where(F.col("type").isNotNull())


def pointer_jump_round(nodes):
    """One round of pointer jumping over ``inode_id, anc, dead_txid, dangling``.

    ``anc`` moves to the ancestor's ``anc`` (doubling the distance covered);
    ``dead_txid`` takes the ancestor's when the node has none. Nodes that
    reached the root (``anc = 0``) or are dead keep still: along final parent
    links the lowest deleted ancestor is the first one deleted (nothing moves
    under a deleted directory), so the first removal found is the node's
    death. A link to a missing inode sets ``dangling``.
    """

    p = nodes.select(F.col("inode_id").alias("p_id"), F.col("anc").alias("p_anc"),
                     F.col("dead_txid").alias("p_dead_txid"), F.col("dangling").alias("p_dangling"))
    j = nodes.join(p, nodes["anc"] == p["p_id"], how="left")
    moving = (F.col("anc") != 0) & F.col("dead_txid").isNull()
    missing = moving & F.col("p_id").isNull()
    dead_txid = F.when(moving, F.col("p_dead_txid")).otherwise(F.col("dead_txid"))
    dangling = F.col("dangling") | missing | (moving & F.coalesce(F.col("p_dangling"), F.lit(False)))
    anc = F.when(~moving | missing, F.lit(0)).otherwise(F.col("p_anc"))
    return j.select("inode_id", F.when(dead_txid.isNotNull(), F.lit(0)).otherwise(anc).cast("long")
                    .alias("anc"), dead_txid.cast("long").alias("dead_txid"), dangling.alias("dangling"))


def resolve_deletes(state, deleted, *, checkpoint_each_round: bool = True):
    """Find every inode under a directly removed one (step 5), by pointer jumping.

    Args:
        state: from :func:`last_state`.
        deleted: from :func:`direct_deletes`.
        checkpoint_each_round: cut the lineage after each round (``localCheckpoint``).

    Returns:
        ``inode_id, dead_txid (null = alive), dead, dangling`` for every inode of ``state``.

    Raises:
        CheckpointError: the links do not reach the root within the round bound (a cycle).
    """

    dels = deleted.select("inode_id", F.col("txid").alias("dead_txid"))
    nodes = state.select("inode_id", F.col("parent_id").alias("anc")).join(
        dels, on="inode_id", how="left").select(
        "inode_id", F.when(F.col("dead_txid").isNull(), F.col("anc")).otherwise(F.lit(0))
        .cast("long").alias("anc"), F.col("dead_txid").cast("long"), F.lit(False).alias("dangling"))
    previous = None
    for _round in range(MAX_POINTER_JUMPING_ROUNDS):
        if checkpoint_each_round:
            # one job per round: materialise this round (cutting the plan) and test for the end
            nodes = nodes.localCheckpoint(eager=False).cache()
        moving = nodes.where(F.col("anc") != 0).count()
        if previous is not None:
            previous.unpersist()
        previous = nodes if checkpoint_each_round else None
        if moving == 0:
            return nodes.withColumn("dead", F.col("dead_txid").isNotNull())
        nodes = pointer_jump_round(nodes)
    raise CheckpointError(f"parent links do not reach the root after {MAX_POINTER_JUMPING_ROUNDS} "
                          "pointer-jumping rounds: the edits form a cycle")


def annotated_state(image, edits, *, checkpoint_each_round: bool = True):
    """Every inode that existed at some point: last state plus ``dead`` and ``dangling``.

    Args:
        image / edits: as :func:`apply_edits`.

    Returns:
        Image columns, ``created_txid``, ``dead_txid``, ``dead``, ``dangling``.
    """
    state = last_state(attribute_updates(image, edits))
    if checkpoint_each_round:
        state = state.localCheckpoint(eager=True)
    marks = resolve_deletes(state, direct_deletes(edits), checkpoint_each_round=checkpoint_each_round)
    return state.join(marks.select("inode_id", "dead_txid", "dead", "dangling"), on="inode_id",
                      how="inner")


def apply_edits(image, edits, *, checkpoint_each_round: bool = True):
    """The image after ``edits`` (steps 3-5): pure DataFrame -> DataFrame.

    Args:
        image: base image rows (image schema).
        edits: the edits to apply, already limited to (image txid, target txid].
        checkpoint_each_round: see :func:`resolve_deletes`.

    Returns:
        ``(new_image, dangling)``: the surviving rows with the image schema, and the
        inodes whose parent links end at a missing inode (empty for a valid history).
    """

    alive = annotated_state(image, edits, checkpoint_each_round=checkpoint_each_round)
    dangling = alive.where(F.col("dangling")).select("inode_id", "parent_id", "name")
    out = alive.where(~F.col("dead")).select(
        *[F.col(c).cast(_IMAGE_TYPES[c]).alias(c) for c in IMAGE_COLUMNS])
    return out, dangling


def namespace_history(image, edits, *, checkpoint_each_round: bool = True):
    """Every inode that ever existed with its last state, birth and death txids.

    Args:
        image / edits: as :func:`apply_edits`.

    Returns:
        Image columns plus ``created_txid`` and ``dead_txid`` (null = alive at the end).
    """
    return annotated_state(image, edits, checkpoint_each_round=checkpoint_each_round).drop("dead", "dangling")


def max_created_inode(edits):
    """Highest inode id created by ``edits`` (None when none)."""

    row = edits.where(F.col("op").isin("OP_MKDIR", "OP_CREATE")).agg(F.max("inode")).collect()[0]
    return row[0]


# --- the stage ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CheckpointResult:
    """What a checkpoint produced."""

    path: str
    base_txid: int
    txid: int
    num_inodes: int
    last_inode_id: int
    seconds: float


def load_base_image(base: str | None) -> tuple[nn_image.ImageInfo | None, pa.Table]:
    """The verified base image: an ``fsimage_<txid>`` path, a name dir (newest valid image), or none.

    Raises:
        CorruptSegmentError: the image fails its checksum.
        CheckpointError: a name dir without any valid image.
    """
    if base is None:
        return None, empty_image_table()
    if base.endswith(".crc"):
        base = base[:-4]
    if nn_image.parse_image_file_name(base.rsplit("/", 1)[-1]) is not None:
        info, table = nn_image.load_image(base)
        return info, table
    found = nn_image.newest_valid_image(base)
    if found is None:
        raise CheckpointError(f"no valid image in name directory {base!r}", path=base)
    info, table, _path = found
    return info, table


def checkpoint(spark, edits, manifest, *, out_name_dir: str, base: str | None = None,
               jid: str | None = None, txid: int | None = None, namespace_id: int = 0,
               cluster_id: str = "", layout_version: int = 1, progress=None) -> CheckpointResult:
    """Build and save the image at ``txid`` from a base image and the edits table.

    Args:
        spark: the session.
        edits / manifest: from the ingest.
        out_name_dir: name directory to write ``current/fsimage_<txid>`` into.
        base: base image file or name directory (None: an empty namespace at txid 0).
        jid: journal id (required when the table holds several).
        txid: target txid (default: the end of the contiguous run).
        namespace_id / cluster_id / layout_version: header when there is no base image.
        progress: optional one-line progress sink.

    Returns:
        A :class:`CheckpointResult`.

    Raises:
        CheckpointError: several journals and no ``jid``, a hole before ``txid``, or
            edits that do not fit the base image.
    """


    t0 = time.monotonic()
    say = progress or (lambda _m: None)
    info, base_table = load_base_image(base)
    base_txid = info.txid if info else 0
    jids = sorted(r[0] for r in manifest.select("jid").distinct().collect())
    if jid is None:
        if len(jids) != 1:
            raise CheckpointError(f"the edits table holds journals {jids}: choose one with --jid")
        jid = jids[0]
    elif jid not in jids:
        raise CheckpointError(f"journal id {jid!r} is not in the edits table (has {jids})", jid=jid)
    copies = canonical_copies(manifest.where(F.col("jid") == jid)).cache()
    ranges = [(r["first_txid"], r["last_txid"]) for r in copies.collect()]
    end = contiguous_end(ranges, base_txid)
    target = end if txid is None else txid
    if target > end:
        raise CheckpointError(f"journal {jid}: txids after {end} are missing (no clean copy); "
                              f"cannot checkpoint to txid {target}", jid=jid, txid=target, end=end)
    if target < base_txid:
        raise CheckpointError(f"journal {jid}: target txid {target} is older than the base image "
                              f"txid {base_txid}", jid=jid, txid=target)
    say(f"checkpoint: journal {jid}, base image txid {base_txid}, target txid {target}")
    todo = canonical_edits(edits.where(F.col("jid") == jid), copies).where(
        (F.col("txid") > base_txid) & (F.col("txid") <= target))
    todo = todo.select("txid", "op", "inode", "parent", "name", "perm", "owner", "group", "mtime",
                       "atime", "replication", "block_size", "length", "overwrite_inode",
                       "src_parent", "dst_parent", "dst_name").cache()
    image_df = image_frame(spark, base_table)
    # One job collects every inode that ever existed with its verdict; the
    # survivors, the dangling check and the highest id come from that table.
    annotated = annotated_state(image_df, todo).toArrow()

    dangling_ids = annotated.filter(annotated.column("dangling")).column("inode_id").to_pylist()
    if dangling_ids:
        raise CheckpointError(f"journal {jid}: edits up to txid {target} do not fit the base image "
                              f"(txid {base_txid}): inodes {sorted(dangling_ids)[:5]} hang under "
                              f"missing parents", jid=jid, txid=target)
    table = annotated.filter(pc.invert(annotated.column("dead"))).select(list(IMAGE_COLUMNS))
    base_last = info.last_inode_id if info else nn_ops.ROOT_INODE_ID
    top = pc.max(annotated.column("inode_id")).as_py() if annotated.num_rows else None
    last_inode_id = max(base_last, top or 0)
    new_info = nn_image.ImageInfo(
        txid=target, layout_version=info.layout_version if info else layout_version,
        namespace_id=info.namespace_id if info else namespace_id,
        cluster_id=info.cluster_id if info else cluster_id, last_inode_id=last_inode_id)
    path = write_image(spark, out_name_dir, table, new_info)
    todo.unpersist()
    copies.unpersist()
    took = time.monotonic() - t0
    say(f"checkpoint: wrote {path} ({table.num_rows} inodes) in {took:.1f} s")
    return CheckpointResult(path, base_txid, target, table.num_rows, last_inode_id, took)


def write_image(spark, name_dir: str, table: pa.Table, info: nn_image.ImageInfo) -> str:
    """Save rows in the NameNode's image format (header, sort, ``.crc``) under any Hadoop URI.

    The bytes and the ``.crc`` line come from :mod:`qjournal.namenode.image`; as in
    ``save_image``, the ``.crc`` file is in place before the image's own atomic
    rename, the commit point.

    Returns:
        ``<name_dir>/current/fsimage_<txid>``.
    """
    data = nn_image.image_to_bytes(table, info)
    path = join(name_dir, "current", nn_image.image_file_name(info.txid))
    with OutputStore(spark, name_dir) as store:
        store.write_bytes(path + ".crc", nn_image.crc_line(data))
        store.write_bytes(path, data)
    return path


__all__ = ["CheckpointError", "CheckpointResult", "MAX_POINTER_JUMPING_ROUNDS", "empty_image_table",
           "image_frame", "canonical_copies", "canonical_edits", "contiguous_end",
           "attribute_updates", "direct_deletes", "last_state", "pointer_jump_round",
           "resolve_deletes", "annotated_state", "apply_edits", "namespace_history", "max_created_inode", "load_base_image", "checkpoint",
           "write_image"]
