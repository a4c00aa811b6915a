"""Decode segment copies into rows of the edits table, in Arrow batches of bounded size.

Why here: Spark's executors run this module (through the ``qjournal`` data
source, :mod:`qjournal.pipeline.source`) on the bytes of a segment copy, so it
must be importable from the installed (or shipped) ``qjournal`` package and
must not touch Spark itself. It adds no codec of its own: framing and
checksums come from :mod:`qjournal.protocol.segment`, the op fields from
:func:`qjournal.namenode.ops.decode_columns`; :mod:`qjournal.pipeline.vdecode`
compiles the clean case of both (no per-record Python loop on the hot path)
and hands anything it is unsure of back to them. It is the one decoder of the
pipeline: the ingest, ``spark.read.format("qjournal")`` and the streaming
source all decode here.

Theory of operation: for one segment copy (``jid``, ``node``, ``segment_start``,
``segment_end``, bytes, usually a memory map of a file) :func:`frame_segment`
finds where the valid records are (a clean copy in one compiled pass,
:func:`qjournal.pipeline.vdecode.frame_clean`; otherwise ``scan_segment``
reports the damage), keeping five integers per record and no body.
:func:`decode_framed` then decodes the bodies ``batch_rows`` records at a time
into ``pyarrow.RecordBatch`` es with :data:`EDITS_ARROW_SCHEMA`, so memory holds
one batch whatever the segment's size: compiled
(:func:`qjournal.pipeline.vdecode.decode_bodies`) when every record of the batch
is one it understands, else in Python (:func:`_batch`, the reference). With
``compiled=False`` only the reference paths run (tests compare the two).
Everything the scan or the op decoder refused becomes a row with ``valid =
false`` and a ``problem`` naming segment, byte offset and reason, so a damaged
copy never fails the job and never disappears silently.

Invariants:

1. A row with ``valid = true`` is a record whose checksum verified, whose txid
   follows the previous valid row of the same copy, which lies inside
   ``[segment_start, segment_end]`` and whose body decoded as its op.
2. Every problem of a copy yields at least one ``valid = false`` row; a copy
   with no valid record at all yields one (``problem`` says why).
3. Rows of a batch are in file order (txid ascending for the valid ones).
4. The compiled and the reference paths give equal batches (``Table.equals``)
   for every copy; the compiled kernels decline what they cannot match.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa

from qjournal.errors import CorruptRecordError
from qjournal.namenode import ops as nn_ops
from qjournal.pipeline import vdecode
from qjournal.protocol import segment as seg

#: identity of a segment copy, first in every row (partition columns included)
KEY_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("jid", pa.string()), ("node", pa.string()),
    ("segment_start", pa.int64()), ("segment_end", pa.int64()),
)

#: op columns from the shared codec, without its ``error`` column (merged into ``problem``)
OP_FIELDS: tuple[tuple[str, pa.DataType], ...] = tuple(
    (name, vdecode.ARROW_TYPES[t]) for name, t in nn_ops.COLUMNS if name != "error")

#: per-record framing facts and the verdict
RECORD_FIELDS: tuple[tuple[str, pa.DataType], ...] = (
    ("record_offset", pa.int64()), ("checksum", pa.int64()),
    ("valid", pa.bool_()), ("problem", pa.string()),
)

#: The edits table's Arrow schema (the Spark schema is derived from it in ingest.py).
EDITS_ARROW_SCHEMA = pa.schema(list(KEY_FIELDS + OP_FIELDS + RECORD_FIELDS))
EDITS_COLUMNS: tuple[str, ...] = tuple(EDITS_ARROW_SCHEMA.names)
_OP_NAMES = tuple(n for n, _ in OP_FIELDS)

#: rows per decoded batch: bounds an executor's memory whatever the segment's size
DEFAULT_BATCH_ROWS = 65536


def decode_segment(jid: str, node: str, segment_start: int, segment_end: int,
                   content: bytes | memoryview,
                   max_record_bytes: int = seg.DEFAULT_MAX_RECORD_BYTES, *,
                   compiled: bool = True) -> pa.RecordBatch:
    """Decode one finalized segment copy into one batch of edits rows (all of them).

    Args:
        jid: journal id.
        node: the JournalNode (directory) holding this copy.
        segment_start / segment_end: txids from the file name.
        content: the whole file.
        max_record_bytes: records longer than this are corrupt.
        compiled: use the compiled kernels where they apply (False: the reference path only).

    Returns:
        A ``RecordBatch`` with :data:`EDITS_ARROW_SCHEMA`.
    """
    batches = list(decode_segment_batches(jid, node, segment_start, segment_end, content,
                                          max_record_bytes=max_record_bytes, batch_rows=None,
                                          compiled=compiled))
    if len(batches) == 1:
        return batches[0]
    table = pa.Table.from_batches(batches, EDITS_ARROW_SCHEMA).combine_chunks()
    return pa.RecordBatch.from_arrays([table.column(c).combine_chunks() for c in EDITS_COLUMNS],
                                      schema=EDITS_ARROW_SCHEMA)


@dataclass(frozen=True, slots=True)
class Framing:
    """Where a copy's records are (the framing pass), without their bodies.

    Attributes:
        where: ``jid/node/edits_<s>-<e>``, the prefix of every problem.
        txids / opcodes / offsets / lengths / checksums: int64 arrays of the valid
            records in file order (``offsets`` of the record, ``lengths`` of its body).
        extra: problems of the copy as a whole: ``(txid, offset, problem)``.
    """

    where: str
    txids: np.ndarray
    opcodes: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray
    checksums: np.ndarray
    extra: tuple[tuple[int | None, int | None, str], ...]

    @property
    def clean(self) -> bool:
        """No problem at the framing level (bodies are judged when decoded)."""
        return not self.extra


def frame_segment(jid: str, node: str, segment_start: int, segment_end: int,
                  content: bytes | memoryview,
                  max_record_bytes: int = seg.DEFAULT_MAX_RECORD_BYTES, *,
                  compiled: bool = True) -> Framing:
    """Frame a copy: its valid records' positions and the copy's problems (invariants 1, 2).

    Memory: five machine integers per record; no body is kept. ``compiled=False``
    frames every copy with the scan (the reference the compiled pass must match).
    """
    where = f"{jid}/{node}/{seg.segment_file_name(segment_start, segment_end)}"
    clean = vdecode.frame_clean(content, segment_start, segment_end, max_record_bytes) if compiled else None
    if clean is not None:
        # A clean copy (the common case): one compiled framing pass, no scan report needed.
        return Framing(where, *clean, ())
    cols = tuple(array("q") for _ in range(5))
    txids, opcodes, offsets, lengths, checksums = cols
    scan = seg.scan_segment(content, expected_first_txid=segment_start,
                            max_record_bytes=max_record_bytes, stop_after_txid=segment_end)
    if scan.header_ok and scan.num_records:
        offset = seg.HEADER_SIZE
        view = memoryview(content)[:scan.valid_length]
        for rec in seg.iter_records(view, seg.HEADER_SIZE, where=where,
                                    allow_torn_tail=False, max_record_bytes=max_record_bytes):
            txids.append(rec.txid)
            opcodes.append(rec.opcode)
            offsets.append(offset)
            lengths.append(len(rec.body))
            checksums.append(rec.checksum)
            offset += seg.RECORD_OVERHEAD + len(rec.body)
        view.release()
    # Problems of the copy as a whole (invariant 2), each as its own invalid row.
    extra: list[tuple[int | None, int | None, str]] = []  # (txid, offset, problem)
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
    return Framing(where, *(np.frombuffer(c, dtype=np.int64) for c in cols), tuple(extra))


def problem_batch(jid: str, node: str, segment_start: int, segment_end: int,
                  problem: str) -> pa.RecordBatch:
    """One invalid row for a copy that could not be read at all (invariant 2)."""
    where = f"{jid}/{node}/{seg.segment_file_name(segment_start, segment_end)}"
    empty = Framing(where, *(np.empty(0, dtype=np.int64) for _ in range(5)),
                    ((None, None, f"{where}: {problem}"),))
    return next(decode_framed(jid, node, segment_start, segment_end, b"", empty))


def decode_segment_batches(jid: str, node: str, segment_start: int, segment_end: int,
                           content: bytes | memoryview, *,
                           max_record_bytes: int = seg.DEFAULT_MAX_RECORD_BYTES,
                           batch_rows: int | None = DEFAULT_BATCH_ROWS,
                           txid_range: tuple[int, int] | None = None,
                           compiled: bool = True) -> Iterator[pa.RecordBatch]:
    """Decode one segment copy into batches of at most ``batch_rows`` rows (module docstring).

    Args:
        jid / node / segment_start / segment_end / content / max_record_bytes / compiled:
            as :func:`decode_segment`.
        batch_rows: the most rows per batch (None: one batch).
        txid_range: ``(first, last)``: only valid rows inside it (the copy's problem rows stay).

    Yields:
        Batches with :data:`EDITS_ARROW_SCHEMA`.
    """
    framing = frame_segment(jid, node, segment_start, segment_end, content, max_record_bytes,
                            compiled=compiled)
    yield from decode_framed(jid, node, segment_start, segment_end, content, framing,
                             batch_rows=batch_rows, txid_range=txid_range, compiled=compiled)


def decode_framed(jid: str, node: str, segment_start: int, segment_end: int,
                  content: bytes | memoryview, framing: Framing, *,
                  batch_rows: int | None = DEFAULT_BATCH_ROWS,
                  txid_range: tuple[int, int] | None = None,
                  compiled: bool = True) -> Iterator[pa.RecordBatch]:
    """Decode the bodies of framed records, ``batch_rows`` at a time (bounded memory).

    The valid records run consecutively from ``segment_start`` (invariant 1), so
    a txid range is an index range. The copy's own problems come last. Each batch
    is decoded by the compiled kernels when they accept all of its records
    (``compiled``), else by :func:`_batch` (invariant 4).
    """
    n = len(framing.txids)
    lo, hi = 0, n
    if txid_range is not None:
        lo = min(n, max(0, txid_range[0] - segment_start))
        hi = max(lo, min(n, txid_range[1] - segment_start + 1))
    step = max(1, batch_rows or (hi - lo) or 1)
    view = memoryview(content)
    try:
        i = lo
        while i < hi or (i == hi and framing.extra):
            j = min(hi, i + step)
            last = j >= hi
            extra = framing.extra if last else ()
            batch = (_compiled_batch(jid, node, segment_start, segment_end, content, framing, i, j, extra)
                     if compiled and j > i else None)
            if batch is None:
                bodies = [bytes(view[o + seg.REC_HEAD_SIZE:o + seg.REC_HEAD_SIZE + ln])
                          for o, ln in zip(framing.offsets[i:j].tolist(), framing.lengths[i:j].tolist())]
                batch = _batch(jid, node, segment_start, segment_end, framing, i, j, bodies, extra)
            yield batch
            if last:
                return
            i = j
    finally:
        view.release()


def _batch(jid: str, node: str, segment_start: int, segment_end: int, framing: Framing, i: int, j: int,
           bodies: list[bytes], extra) -> pa.RecordBatch:
    """Rows ``i:j`` of a framed copy (plus ``extra`` problem rows) as one batch."""
    where = framing.where
    txids = framing.txids[i:j].tolist()
    opcodes = framing.opcodes[i:j].tolist()
    cols = nn_ops.decode_columns(txids, opcodes, bodies)
    problems: list[str | None] = [None if e is None else f"{where}: {e}" for e in cols["error"]]
    n = len(txids) + len(extra)
    arrays: dict[str, pa.Array] = {
        "jid": pa.array([jid] * n, pa.string()),
        "node": pa.array([node] * n, pa.string()),
        "segment_start": pa.array([segment_start] * n, pa.int64()),
        "segment_end": pa.array([segment_end] * n, pa.int64()),
    }
    pad = [None] * len(extra)
    for name, typ in OP_FIELDS:
        values = cols[name]
        values = values + ([t for t, _o, _p in extra] if name == "txid" else pad)
        arrays[name] = _column(name, typ, values, txids, opcodes, bodies, problems, where)
    arrays["record_offset"] = pa.array(framing.offsets[i:j].tolist() + [o for _t, o, _p in extra], pa.int64())
    arrays["checksum"] = pa.array(framing.checksums[i:j].tolist() + pad, pa.int64())
    all_problems = problems + [p for _t, _o, p in extra]
    arrays["valid"] = pa.array([p is None for p in all_problems], pa.bool_())
    arrays["problem"] = pa.array(all_problems, pa.string())
    return pa.RecordBatch.from_arrays([arrays[c] for c in EDITS_COLUMNS], schema=EDITS_ARROW_SCHEMA)


def _compiled_batch(jid: str, node: str, segment_start: int, segment_end: int, content, framing: Framing,
                    i: int, j: int, extra) -> pa.RecordBatch | None:
    """Rows ``i:j`` of a framed copy (plus ``extra`` problem rows) decoded by the compiled kernels;
    None when they decline the batch (the caller runs :func:`_batch`)."""
    ops = vdecode.decode_bodies(content, framing.offsets[i:j], framing.lengths[i:j], framing.opcodes[i:j])
    if ops is None:
        return None
    n = j - i
    arrays: dict[str, pa.Array] = {
        "jid": pa.repeat(pa.scalar(jid, pa.string()), n),
        "node": pa.repeat(pa.scalar(node, pa.string()), n),
        "segment_start": pa.repeat(pa.scalar(segment_start, pa.int64()), n),
        "segment_end": pa.repeat(pa.scalar(segment_end, pa.int64()), n),
        "txid": pa.array(framing.txids[i:j], pa.int64()),
        "opcode": pa.array(framing.opcodes[i:j].astype(np.int32), pa.int32()),
        "record_offset": pa.array(framing.offsets[i:j], pa.int64()),
        "checksum": pa.array(framing.checksums[i:j], pa.int64()),
        "valid": pa.array(np.ones(n, dtype=np.bool_), pa.bool_()),
        "problem": pa.nulls(n, pa.string()),
        **ops,
    }
    batch = pa.RecordBatch.from_arrays([arrays[c] for c in EDITS_COLUMNS], schema=EDITS_ARROW_SCHEMA)
    if not extra:
        return batch
    # the copy's own problem rows, made where they always are
    return pa.concat_batches([batch, _batch(jid, node, segment_start, segment_end, framing, j, j, [], extra)])


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


__all__ = ["EDITS_ARROW_SCHEMA", "EDITS_COLUMNS", "KEY_FIELDS", "OP_FIELDS", "RECORD_FIELDS",
           "DEFAULT_BATCH_ROWS", "Framing", "frame_segment", "decode_framed", "decode_segment",
           "decode_segment_batches", "problem_batch"]
