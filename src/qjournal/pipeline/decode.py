"""Decode segment files into rows of the edits table, one Arrow batch per segment file.

Why here: Spark's executors run this module (through ``mapInArrow``) on the
bytes ``binaryFile`` read, so it must be importable from the installed
``qjournal`` package and must not touch Spark itself. It adds no codec of its
own: framing and checksums come from :mod:`qjournal.protocol.segment`, the op
fields from :func:`qjournal.namenode.ops.decode_columns`.

Theory of operation: for one segment copy (``jid``, ``node``, ``segment_start``,
``segment_end``, bytes) :func:`decode_segment` scans the image
(``scan_segment``), decodes the valid prefix's bodies in one call and builds
one ``pyarrow.RecordBatch`` with :data:`EDITS_ARROW_SCHEMA`. Everything the scan
or the op decoder refused becomes a row with ``valid = false`` and a
``problem`` naming segment, byte offset and reason, so a damaged copy never
fails the job and never disappears silently.

Invariants:

1. A row with ``valid = true`` is a record whose checksum verified, whose txid
   follows the previous valid row of the same copy, which lies inside
   ``[segment_start, segment_end]`` and whose body decoded as its op.
2. Every problem of a copy yields at least one ``valid = false`` row; a copy
   with no valid record at all yields one (``problem`` says why).
3. Rows of a batch are in file order (txid ascending for the valid ones).
"""

from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa

from qjournal.errors import CorruptRecordError
from qjournal.namenode import ops as nn_ops
from qjournal.protocol import segment as seg

#: identity of a segment copy, first in every row (partition columns included)
KEY_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("jid", pa.string()), ("node", pa.string()),
    ("segment_start", pa.int64()), ("segment_end", pa.int64()),
)

_ARROW_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "string": pa.string(),
                "binary": pa.binary()}

#: op columns from the shared codec, without its ``error`` column (merged into ``problem``)
OP_FIELDS: tuple[tuple[str, pa.DataType], ...] = tuple(
    (name, _ARROW_TYPES[t]) for name, t in nn_ops.COLUMNS if name != "error")

#: per-record framing facts and the verdict
RECORD_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("record_offset", pa.int64()), ("checksum", pa.int64()),
    ("valid", pa.bool_()), ("problem", pa.string()),
)

#: The edits table's Arrow schema (the Spark schema is derived from it in ingest.py).
EDITS_ARROW_SCHEMA = pa.schema(list(KEY_FIELDS + OP_FIELDS + RECORD_FIELDS))
EDITS_COLUMNS: tuple[str, ...] = tuple(EDITS_ARROW_SCHEMA.names)
_OP_NAMES = tuple(n for n, _ in OP_FIELDS)


def decode_segment(jid: str, node: str, segment_start: int, segment_end: int,
                   content: bytes | memoryview,
                   max_record_bytes: int = seg.DEFAULT_MAX_RECORD_BYTES) -> pa.RecordBatch:
    """Decode one finalized segment copy into a batch of edits rows.

    Args:
        jid: journal id.
        node: the JournalNode (directory) holding this copy.
        segment_start / segment_end: txids from the file name.
        content: the whole file.
        max_record_bytes: records longer than this are corrupt.

    Returns:
        A ``RecordBatch`` with :data:`EDITS_ARROW_SCHEMA`.
    """
    where = f"{jid}/{node}/{seg.segment_file_name(segment_start, segment_end)}"
    fast = _clean_records(content, segment_start, segment_end, max_record_bytes)
    if fast is not None:
        # A clean copy (the common case): one framing pass, no scan report needed.
        txids, opcodes, bodies, offsets, checksums = fast
        scan = None
    else:
        scan = seg.scan_segment(content, expected_first_txid=segment_start,
                                max_record_bytes=max_record_bytes, stop_after_txid=segment_end)
        txids, opcodes, bodies, offsets, checksums = [], [], [], [], []
        if scan.header_ok and scan.num_records:
            offset = seg.HEADER_SIZE
            view = memoryview(content)[:scan.valid_length]
            for rec in seg.iter_records(view, seg.HEADER_SIZE, where=where,
                                        allow_torn_tail=False, max_record_bytes=max_record_bytes):
                txids.append(rec.txid)
                opcodes.append(rec.opcode)
                bodies.append(rec.body)
                offsets.append(offset)
                checksums.append(rec.checksum)
                offset += seg.RECORD_OVERHEAD + len(rec.body)
    cols = nn_ops.decode_columns(txids, opcodes, bodies)
    problems: list[str | None] = [None if e is None else f"{where}: {e}" for e in cols["error"]]

    # Problems of the copy as a whole (invariant 2), each as its own invalid row.
    extra: list[tuple[int | None, int | None, str]] = []  # (txid, offset, problem)
    if scan is not None:
        for p in scan.problems:
            extra.append((None, p.offset, f"{where}: {p.kind} at byte {p.offset}: {p.detail}"))
        if scan.header_ok and scan.last_txid != segment_end:
            last = scan.last_txid if scan.num_records else "none"
            # placed at the end of the file: it is a consequence of the problems before it
            extra.append((None, scan.total_length,
                          f"{where}: short copy: valid records end at txid {last}, "
                          f"the file name says {segment_end}"))
        if scan.header_ok and scan.num_records == 0 and not extra:
            extra.append((None, scan.total_length, f"{where}: no records"))

    n_ok = len(txids)
    n = n_ok + len(extra)
    arrays: dict[str, pa.Array] = {
        "jid": pa.array([jid] * n, pa.string()),
        "node": pa.array([node] * n, pa.string()),
        "segment_start": pa.array([segment_start] * n, pa.int64()),
        "segment_end": pa.array([segment_end] * n, pa.int64()),
    }
    pad = [None] * len(extra)
    for name, typ in OP_FIELDS:
        values = cols[name]
        if name == "txid":
            values = values + [t for t, _o, _p in extra]
        elif name in ("opcode", "op"):
            values = values + pad
        else:
            values = values + pad
        arrays[name] = _column(name, typ, values, txids, opcodes, bodies, problems, where)
    arrays["record_offset"] = pa.array(offsets + [o for _t, o, _p in extra], pa.int64())
    arrays["checksum"] = pa.array(checksums + pad, pa.int64())
    all_problems = problems + [p for _t, _o, p in extra]
    arrays["valid"] = pa.array([p is None for p in all_problems], pa.bool_())
    arrays["problem"] = pa.array(all_problems, pa.string())
    return pa.RecordBatch.from_arrays([arrays[c] for c in EDITS_COLUMNS], schema=EDITS_ARROW_SCHEMA)


def _clean_records(content, start: int, end: int, max_record_bytes: int):
    """Frame a copy in one pass when it is clean; None sends the caller to the full scan.

    Clean means: a good header, then records ``start..end`` with verified
    checksums and consecutive txids (bytes after ``end`` are ignored, as a
    reader of a finalized segment does).

    Returns:
        ``(txids, opcodes, bodies, offsets, checksums)`` or None.
    """
    try:
        seg.decode_header(content)
    except Exception:  # CorruptSegmentError: the full scan reports it
        return None
    txids: list[int] = []
    opcodes: list[int] = []
    bodies: list[bytes] = []
    offsets: list[int] = []
    checksums: list[int] = []
    offset = seg.HEADER_SIZE
    expect = start
    try_decode, ok = seg.try_decode, seg.OK
    while expect <= end:
        d = try_decode(content, offset, max_record_bytes)
        if d.status != ok:
            return None
        rec = d.record
        if rec.txid != expect:
            return None
        txids.append(expect)
        opcodes.append(rec.opcode)
        bodies.append(rec.body)
        offsets.append(offset)
        checksums.append(rec.checksum)
        offset = d.next_offset
        expect += 1
    return txids, opcodes, bodies, offsets, checksums


def _column(name: str, typ: pa.DataType, values: list, txids: list[int], opcodes: list[int],
            bodies: list[bytes], problems: list[str | None], where: str) -> pa.Array:
    """One Arrow column; a body whose field has the wrong type is found and marked invalid.

    The shared column decoder does not type-check fields (it is the fast
    path); when Arrow refuses a column, :func:`qjournal.namenode.ops.decode_op`
    names the offending records, whose fields become null and whose rows
    become invalid.
    """
    try:
        return pa.array(values, typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    for i, (txid, opcode, body) in enumerate(zip(txids, opcodes, bodies)):
        if problems[i] is not None:
            continue
        try:
            nn_ops.decode_op(opcode, body, txid)
        except CorruptRecordError as e:
            problems[i] = f"{where}: {e.message}"
            values[i] = None
            continue
        try:
            pa.array([values[i]], typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            problems[i] = f"{where}: field {name!r} at txid {txid} does not fit {typ}"
            values[i] = None
    return pa.array(values, typ)


def decode_path_batches(keys: dict[str, tuple[str, str, int, int]],
                        batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` function over raw ``binaryFile`` rows (``path``, ``content``).

    Bind ``keys`` with ``functools.partial``: it maps each file's ``path`` as
    ``binaryFile`` reports it to ``(jid, node, segment_start, segment_end)``,
    so no join (and no shuffle) is needed before decoding.

    Args:
        keys: path -> copy identity, built on the driver at discovery.
        batches: Arrow batches from Spark.

    Yields:
        Batches with :data:`EDITS_ARROW_SCHEMA`, one per file.

    Raises:
        KeyError: a path that discovery did not list (a programmer error).
    """
    for batch in batches:
        paths = batch.column("path").to_pylist()
        content = batch.column("content")
        for i in range(batch.num_rows):
            jid, node, start, end = keys[paths[i]]
            buf = content[i].as_buffer()
            data = b"" if buf is None else memoryview(buf).cast("B")
            yield decode_segment(jid, node, start, end, data)


__all__ = ["EDITS_ARROW_SCHEMA", "EDITS_COLUMNS", "KEY_FIELDS", "OP_FIELDS", "RECORD_FIELDS",
           "decode_segment", "decode_path_batches"]
