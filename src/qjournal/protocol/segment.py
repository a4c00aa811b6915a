"""The edit-log segment format: one definition shared by every reader and writer.

Why one module: the NameNode, the JournalNode, the quorum client, ``qjournal
oev`` and the Spark decoder must agree on every byte. This module is pure (no
files, no clocks): it turns records into bytes and bytes into records, and it
scans a segment image to find how much of it is valid. It is the only place
that knows the framing: the writer's hot path (:func:`append_record`) and the
JournalNode's (:func:`validate_batch`) live here too, beside the precise
:func:`encode_record` and :func:`scan_batch` they must agree with.

Layout (all integers big-endian)::

    header   magic "QJEDITS1" (8) | u32 layout_version | u32 header_crc    16 bytes
    record   u8 opcode | u32 length | u64 txid | body[length] | u32 crc32c   17 + length bytes
    trailer  optional padding of 0x00 or 0xFF bytes (never a valid opcode)

``crc32c`` covers opcode, length, txid and body. ``length`` is the body length.
``header_crc`` is the crc32c of the first 12 header bytes (magic and layout
version), so a flipped bit in the layout version is detected like one in a
record (it was a "flags" field that had to be 0, which left the version
unprotected).

File names: ``edits_inprogress_<start>`` and ``edits_<start>-<end>`` with
19-digit zero-padded txids, as in HDFS.

Invariants:

1. A record is returned by a reader only if its checksum verifies and its
   length is within ``max_record_bytes``.
2. The *valid prefix* of a segment is the longest run of records, starting
   right after the header, whose checksums verify and whose txids are
   consecutive. ``scan_segment`` reports its end offset and last txid; bytes
   after it are never treated as data, whatever they contain.
3. Opcodes 0x00 and 0xFF are reserved (padding/terminator), so a zero-filled or
   0xFF-filled tail ends the log cleanly.
4. A segment arriving in chunks (a download) is decoded by :class:`SegmentDecoder`
   with the rules of :func:`try_decode`, holding at most the undecoded rest of
   the last chunk fed plus one partial record (at most ``max_record_bytes`` +
   17), whatever the segment's size; :func:`scan_segment_chunks` is
   :func:`scan_segment` over such a stream.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple

import crc32c as _crc32c

from qjournal.errors import CorruptRecordError, CorruptSegmentError, InvariantViolation, RecordTooLargeError

MAGIC = b"QJEDITS1"
LAYOUT_VERSION = 1
_HEADER = struct.Struct(">8sII")
HEADER_SIZE = _HEADER.size  # 16

_REC_HEAD = struct.Struct(">BIQ")  # opcode, length, txid
REC_HEAD_SIZE = _REC_HEAD.size  # 13
_CRC = struct.Struct(">I")
RECORD_OVERHEAD = REC_HEAD_SIZE + _CRC.size  # 17
_REC_HEAD_PACK = _REC_HEAD.pack
_CRC_PACK = _CRC.pack

#: Default ceiling on a record body, as Hadoop's dfs.namenode.max.op.size (50 MiB).
DEFAULT_MAX_RECORD_BYTES = 50 * 1024 * 1024

OP_INVALID_ZERO = 0x00
OP_INVALID_FF = 0xFF
#: Opcode for opaque application data (used by ``qjournal log write`` and tests).
OP_DATA = 0x01

#: INVALID_TXID as in HDFS: "no txid".
INVALID_TXID = -12345

crc32c = _crc32c.crc32c


class EditRecord(NamedTuple):
    """One decoded record (a named tuple: replay makes one per edit, and a frozen dataclass costs
    2.6x more to build)."""

    txid: int
    opcode: int
    body: bytes
    checksum: int = 0

    def encode(self) -> bytes:
        return encode_record(self.txid, self.opcode, self.body)


def encode_header(layout_version: int = LAYOUT_VERSION) -> bytes:
    """The 16-byte segment header for ``layout_version`` (with its header checksum)."""
    head = MAGIC + (layout_version & 0xFFFFFFFF).to_bytes(4, "big")
    return head + crc32c(head).to_bytes(4, "big")


def decode_header(buf: bytes | memoryview, where: str = "segment") -> int:
    """Return the layout version of a segment header.

    Raises:
        CorruptSegmentError: the buffer is too short or the magic is wrong.
    """
    if len(buf) < HEADER_SIZE:
        raise CorruptSegmentError(
            f"{where}: header truncated ({len(buf)} of {HEADER_SIZE} bytes)", where=where
        )
    magic, version, stored = _HEADER.unpack_from(buf, 0)
    if magic != MAGIC:
        raise CorruptSegmentError(f"{where}: bad magic {bytes(magic)!r}", where=where)
    actual = crc32c(bytes(buf[:12]))
    if stored != actual:
        raise CorruptSegmentError(
            f"{where}: header checksum mismatch (layout version field {version}): stored {stored:#010x}, "
            f"computed {actual:#010x}", where=where)
    return version


def encode_record(txid: int, opcode: int, body: bytes,
                  max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> bytes:
    """Frame one record.

    Raises:
        RecordTooLargeError: body longer than ``max_record_bytes``.
        ValueError: reserved opcode or negative txid (programmer error).
    """
    if opcode in (OP_INVALID_ZERO, OP_INVALID_FF) or not 0 <= opcode <= 0xFF:
        raise ValueError(f"opcode {opcode:#x} is reserved or out of range")
    if txid < 0:
        raise ValueError(f"txid {txid} is negative")
    n = len(body)
    if n > max_record_bytes:
        raise RecordTooLargeError(
            f"record at txid {txid} is {n} bytes, over the limit of {max_record_bytes}",
            txid=txid, size=n, limit=max_record_bytes)
    rec = _REC_HEAD.pack(opcode, n, txid) + body
    return rec + _CRC.pack(crc32c(rec))  # one CRC pass over opcode..body


def append_record(out: bytearray, txid: int, opcode: int, body: bytes,
                  max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> None:
    """Frame one record at the end of ``out``: the writer's hot path, the same bytes as
    :func:`encode_record` with at most one copy of the body.

    Raises:
        as :func:`encode_record`.
    """
    n = len(body)
    if n > max_record_bytes or not 0 < opcode < 0xFF or txid < 0:
        encode_record(txid, opcode, body, max_record_bytes)  # raises the precise error
    if n <= 256:  # a small body: one concatenation, one CRC call
        rec = _REC_HEAD_PACK(opcode, n, txid) + body
        out += rec
        out += _CRC_PACK(crc32c(rec))
    else:  # a large body: never copied twice
        head = _REC_HEAD_PACK(opcode, n, txid)
        out += head
        out += body
        out += _CRC_PACK(crc32c(body, crc32c(head)))


def encode_records(records: list[tuple[int, int, bytes]] | list[EditRecord],
                   max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> bytes:
    """Frame several records back to back (a batch, as sent in one ``journal`` call)."""
    parts = []
    for r in records:
        if isinstance(r, EditRecord):
            parts.append(encode_record(r.txid, r.opcode, r.body, max_record_bytes))
        else:
            parts.append(encode_record(r[0], r[1], r[2], max_record_bytes))
    return b"".join(parts)


# --- decoding -----------------------------------------------------------------

#: decode outcomes (see :func:`try_decode`)
OK, END, TRUNCATED, CORRUPT = "ok", "end", "truncated", "corrupt"


class Decoded(NamedTuple):
    """What :func:`try_decode` found at one offset."""

    status: str
    record: EditRecord | None
    next_offset: int
    reason: str = ""


def try_decode(buf: bytes | memoryview, offset: int,
               max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Decoded:
    """Decode the record at ``offset`` without raising.

    Returns a :class:`Decoded` whose status is:
      * ``ok``: a valid record; ``next_offset`` follows it.
      * ``end``: clean end (no bytes left, or a padding byte 0x00/0xFF).
      * ``truncated``: the record runs past the end of the buffer (a torn tail).
      * ``corrupt``: bad length or checksum; ``reason`` says which.
    """
    size = len(buf)
    if offset >= size:
        return Decoded(END, None, offset)
    op = buf[offset]
    if op == OP_INVALID_ZERO or op == OP_INVALID_FF:
        return Decoded(END, None, offset, f"padding byte {op:#04x}")
    if offset + REC_HEAD_SIZE > size:
        return Decoded(TRUNCATED, None, offset,
                       f"record header needs {REC_HEAD_SIZE} bytes, {size - offset} left")
    _op, length, txid = _REC_HEAD.unpack_from(buf, offset)
    if length > max_record_bytes:
        return Decoded(CORRUPT, None, offset,
                       f"length {length} over the maximum record size {max_record_bytes}")
    end = offset + REC_HEAD_SIZE + length + 4
    if end > size:
        return Decoded(TRUNCATED, None, offset,
                       f"record of {length} body bytes needs {end - offset} bytes, {size - offset} left")
    body_start = offset + REC_HEAD_SIZE
    (stored,) = _CRC.unpack_from(buf, end - 4)
    with memoryview(buf) as mv:
        actual = crc32c(mv[offset:end - 4])  # opcode..body in one pass
        body = bytes(mv[body_start:end - 4])
    if stored != actual:
        return Decoded(CORRUPT, None, offset,
                       f"checksum mismatch for txid {txid}: stored {stored:#010x}, computed {actual:#010x}")
    return Decoded(OK, EditRecord(txid, op, body, stored), end)


def decode_records(buf: bytes | bytearray | memoryview, offset: int, max_records: int,
                   max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                   expected_txid: int | None = None) -> tuple[list[EditRecord], int]:
    """Decode up to ``max_records`` consecutive records from ``offset``: the batch form of :func:`try_decode`.

    A record is taken exactly when :func:`try_decode` would return it as ``ok`` (invariant 1;
    ``tests/protocol/test_segment.py`` checks the two agree on random and damaged buffers), and,
    with ``expected_txid``, only while the txids run ``expected_txid``, ``expected_txid + 1``, ...
    The loop builds nothing but the records (one CRC32C call per record over opcode..body), which
    is what replay pays per edit before decoding the op.

    Returns:
        ``(records, next_offset)``. Fewer than ``max_records`` records means decoding stopped at
        ``next_offset``: :func:`try_decode` there says why (``end``, ``truncated``, ``corrupt``, or
        ``ok`` for a record whose txid broke the expected run).
    """
    out: list[EditRecord] = []
    append = out.append
    unpack = _REC_HEAD.unpack_from
    crc_at = _CRC.unpack_from
    crc = crc32c
    new, record = tuple.__new__, EditRecord  # EditRecord(...) calls a Python-level __new__: 1.7x slower
    size = len(buf)
    off = offset
    n = 0
    whole_bytes = type(buf) is bytes  # slicing bytes copies once; other buffers go through the view
    with memoryview(buf) as mv:
        while n < max_records and off + REC_HEAD_SIZE <= size:
            op, length, txid = unpack(buf, off)
            body_end = off + REC_HEAD_SIZE + length
            if (op == OP_INVALID_ZERO or op == OP_INVALID_FF or length > max_record_bytes
                    or body_end + 4 > size
                    or (expected_txid is not None and txid != expected_txid + n)):
                break
            (stored,) = crc_at(buf, body_end)
            if crc(mv[off:body_end]) != stored:
                break
            body = buf[off + REC_HEAD_SIZE:body_end] if whole_bytes else bytes(mv[off + REC_HEAD_SIZE:body_end])
            append(new(record, (txid, op, body, stored)))
            off = body_end + 4
            n += 1
    return out, off


def iter_records(buf: bytes | memoryview, offset: int = HEADER_SIZE, *,
                 where: str = "segment", allow_torn_tail: bool = True,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Iterator[EditRecord]:
    """Yield valid records from ``offset`` until the clean end.

    A torn final record ends iteration silently when ``allow_torn_tail`` (the
    in-progress case). Any checksum or length failure raises: a reader never
    returns a bad record and never skips silently over one.

    Raises:
        CorruptRecordError: naming ``where``, the byte offset and the reason.
    """
    while True:
        recs, offset = decode_records(buf, offset, _ITER_BATCH, max_record_bytes)
        yield from recs
        if len(recs) < _ITER_BATCH:
            check_stop(buf, offset, where=where, allow_torn_tail=allow_torn_tail,
                       max_record_bytes=max_record_bytes)
            return


#: records :func:`iter_records` decodes per :func:`decode_records` call
_ITER_BATCH = 1024


def check_stop(buf: bytes | bytearray | memoryview, offset: int, *, where: str, allow_torn_tail: bool,
               max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> Decoded:
    """Why :func:`decode_records` (without ``expected_txid``) stopped short at ``offset``: return the
    :func:`try_decode` verdict when it is a clean end (``end``, or ``truncated`` with
    ``allow_torn_tail``), raise otherwise.

    Raises:
        CorruptRecordError: a corrupt (or, without ``allow_torn_tail``, torn) record, naming ``where``
            and the byte offset.
        InvariantViolation: :func:`try_decode` accepts the record :func:`decode_records` refused.
    """
    d = try_decode(buf, offset, max_record_bytes)
    if d.status == END or (d.status == TRUNCATED and allow_torn_tail):
        return d
    if d.status == OK:
        raise InvariantViolation(f"{where}: decode_records stopped at byte {offset} on a record "
                                 f"try_decode accepts (txid {d.record.txid})")  # type: ignore[union-attr]
    raise CorruptRecordError(f"{where}: at byte {offset}: {d.reason}",
                             where=where, offset=offset, reason=d.reason)


def record_span(buf: bytes | memoryview, first_txid: int, from_txid: int, to_txid: int) -> tuple[int, int]:
    """Byte offsets ``[start, end)`` of the records ``from_txid..to_txid`` in a batch.

    ``buf`` is a batch of framed records that was already validated (e.g. by
    :func:`validate_batch`) and starts at ``first_txid``: only the record heads are
    walked, no checksum is computed. ``from_txid > to_txid`` gives an empty span.

    Raises:
        InvariantViolation: the range is outside the batch, or a record head does not
            carry the txid its position implies (the batch was not validated).
    """
    size = len(buf)
    unpack = _REC_HEAD.unpack_from
    off = 0
    txid = first_txid
    start = -1
    if from_txid > to_txid:
        return 0, 0
    while off < size:
        if txid == from_txid:
            start = off
        _op, length, rec_txid = unpack(buf, off)
        if rec_txid != txid:
            raise InvariantViolation(f"record_span: txid {rec_txid} at byte {off} where {txid} "
                                     f"was expected (batch from txid {first_txid})")
        off += REC_HEAD_SIZE + length + 4
        if txid == to_txid:
            if start < 0 or off > size:
                break
            return start, off
        txid += 1
    raise InvariantViolation(f"record_span: txids {from_txid}-{to_txid} are not inside the batch "
                             f"starting at txid {first_txid} ({size} bytes)")


def scan_batch(buf: bytes | memoryview, first_txid: int, num_txns: int, *,
               max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES, where: str = "batch") -> int:
    """Validate a batch of framed records as received by ``journal``.

    Every record must verify, txids must run ``first_txid .. first_txid+num_txns-1``
    and the batch must contain exactly that many records and nothing else.

    Returns:
        The last txid of the batch.

    Raises:
        CorruptRecordError: any framing, checksum, count or txid mismatch.
    """
    offset = 0
    expect = first_txid
    size = len(buf)
    unpack = _REC_HEAD.unpack_from
    mv = memoryview(buf)
    while offset < size:
        if offset + REC_HEAD_SIZE > size:
            raise CorruptRecordError(f"{where}: truncated record header at byte {offset}",
                                     where=where, offset=offset)
        op, length, txid = unpack(buf, offset)
        if op == OP_INVALID_ZERO or op == OP_INVALID_FF:
            raise CorruptRecordError(f"{where}: reserved opcode {op:#04x} at byte {offset}",
                                     where=where, offset=offset)
        if length > max_record_bytes:
            raise CorruptRecordError(
                f"{where}: record at byte {offset} has length {length} over {max_record_bytes}",
                where=where, offset=offset)
        end = offset + REC_HEAD_SIZE + length + 4
        if end > size:
            raise CorruptRecordError(f"{where}: truncated record at byte {offset}",
                                     where=where, offset=offset)
        if txid != expect:
            raise CorruptRecordError(
                f"{where}: record at byte {offset} has txid {txid}, expected {expect}",
                where=where, offset=offset, txid=txid, expected=expect)
        if crc32c(mv[offset:end - 4]) != int.from_bytes(mv[end - 4:end], "big"):
            raise CorruptRecordError(f"{where}: checksum mismatch for txid {txid} at byte {offset}",
                                     where=where, offset=offset, txid=txid)
        offset = end
        expect += 1
    if expect - first_txid != num_txns:
        raise CorruptRecordError(
            f"{where}: holds {expect - first_txid} records, the call said {num_txns}",
            where=where, count=expect - first_txid, expected=num_txns)
    return expect - 1


def validate_batch(buf: bytes, first_txid: int, num_txns: int, max_record_bytes: int) -> int | None:
    """The JournalNode's hot path: accept exactly the batches :func:`scan_batch` accepts.

    Same checks as :func:`scan_batch` (framing, reserved
    opcodes, record size limit, consecutive txids from ``first_txid``, CRC32C of
    every record, record count) with the least Python work per record; it
    returns None instead of raising, and the caller then runs ``scan_batch``
    for the precise error. ``tests/protocol/test_validate_batch.py`` checks
    the equivalence on random and damaged batches.

    Returns:
        The last txid of the batch, or None when the batch is refused.
    """
    n, off = valid_run(buf, 0, num_txns, max_record_bytes, first_txid)
    return first_txid + n - 1 if n == num_txns and off == len(buf) else None


def valid_run(buf: bytes | bytearray | memoryview, offset: int, max_records: int, max_record_bytes: int,
              expected_txid: int) -> tuple[int, int]:
    """The records :func:`decode_records` would take from ``offset`` (with ``expected_txid``), counted and
    not built: the checks of :func:`validate_batch` and the scans, with the least Python work per record.

    Returns:
        ``(count, next_offset)``.
    """
    size = len(buf)
    unpack = _REC_HEAD.unpack_from
    crc_at = _CRC.unpack_from
    crc = crc32c
    off = offset
    expect = expected_txid
    end_txid = expected_txid + max_records
    with memoryview(buf) as mv:
        while expect < end_txid and off + REC_HEAD_SIZE <= size:
            op, length, txid = unpack(buf, off)
            body_end = off + REC_HEAD_SIZE + length
            if (txid != expect or length > max_record_bytes or op == 0 or op == 0xFF
                    or body_end + 4 > size or crc(mv[off:body_end]) != crc_at(buf, body_end)[0]):
                break
            off = body_end + 4
            expect += 1
    return expect - expected_txid, off


@dataclass(frozen=True, slots=True)
class ScanProblem:
    """Something the scanner refused, with where and why."""

    offset: int
    kind: str  # "torn-tail" | "corrupt" | "txid-gap" | "trailing-garbage" | "bad-header"
    detail: str


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What :func:`scan_segment` found.

    Attributes:
        layout_version: from the header, or None when the header is unusable.
        first_txid / last_txid: the valid prefix's txids (INVALID_TXID when empty).
        num_records: records in the valid prefix.
        valid_length: byte offset just after the valid prefix (HEADER_SIZE when empty).
        total_length: the size of the scanned image.
        problems: everything after the valid prefix that is not clean padding.
    """

    layout_version: int | None
    first_txid: int
    last_txid: int
    num_records: int
    valid_length: int
    total_length: int
    problems: tuple[ScanProblem, ...] = field(default_factory=tuple)

    @property
    def header_ok(self) -> bool:
        return self.layout_version is not None

    @property
    def clean(self) -> bool:
        return not self.problems

    @property
    def empty(self) -> bool:
        return self.num_records == 0


def scan_segment(buf: bytes | memoryview, *, expected_first_txid: int | None = None,
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                 stop_after_txid: int | None = None) -> ScanResult:
    """Find the valid prefix of a segment image (invariant 2) and report the rest.

    After the valid prefix ends on a bad record, the scanner resynchronises
    byte by byte to report any further decodable records (as ``corrupt``
    problems naming their txids) so an operator sees exactly what was lost;
    none of them is part of the valid prefix.

    Args:
        expected_first_txid: when given, a first record with another txid ends
            the prefix at once (reported as ``txid-gap``).
        stop_after_txid: stop scanning once this txid is reached (readers of a
            finalized segment ignore bytes after its end).
    """
    total = len(buf)
    try:
        version = decode_header(buf)
    except CorruptSegmentError as e:
        return ScanResult(None, INVALID_TXID, INVALID_TXID, 0, 0, total,
                          (ScanProblem(0, "bad-header", e.message),))
    offset = HEADER_SIZE
    first = last = INVALID_TXID
    n = 0
    problems: list[ScanProblem] = []
    while True:
        want = (last + 1) if n else expected_first_txid
        if want is None and offset + REC_HEAD_SIZE <= total:
            want = _REC_HEAD.unpack_from(buf, offset)[2]  # any first txid; the rest run on from it
        k, next_offset = (0, offset) if want is None else valid_run(
            buf, offset, _scan_batch(want, stop_after_txid), max_record_bytes, want)
        if k:
            if n == 0:
                first = want
            last = want + k - 1
            n += k
            offset = next_offset
            if stop_after_txid is not None and last >= stop_after_txid:
                return ScanResult(version, first, last, n, offset, total, ())
            continue
        d = try_decode(buf, offset, max_record_bytes)
        if d.status == OK:  # a valid record, not the next txid
            problems.append(ScanProblem(offset, "txid-gap",
                                        f"record has txid {d.record.txid}, expected {want}"))  # type: ignore[union-attr]
            break
        if d.status == END:
            # Clean padding must run to the end of the image.
            bad = _first_non_padding(buf, offset)
            if bad is not None:
                problems.append(ScanProblem(bad, "trailing-garbage",
                                            f"non-padding byte {buf[bad]:#04x} after the end of the log"))
            return ScanResult(version, first, last, n, offset, total, tuple(problems))
        if d.status == TRUNCATED:
            problems.append(ScanProblem(offset, "torn-tail", d.reason))
            return ScanResult(version, first, last, n, offset, total, tuple(problems))
        problems.append(ScanProblem(offset, "corrupt", d.reason))
        break
    valid_length = offset
    # Resync: report later decodable records; they are not part of the valid prefix. Runs of
    # padding (a preallocated tail after a torn write) are skipped whole, not byte by byte.
    pos = offset + 1
    while pos < total:
        d = try_decode(buf, pos, max_record_bytes)
        if d.status == OK:
            problems.append(ScanProblem(pos, "corrupt",
                                        f"txid {d.record.txid} is unreachable after the damage at byte {valid_length}"))
            pos = d.next_offset
        elif buf[pos] in (OP_INVALID_ZERO, OP_INVALID_FF):
            m = _NON_PADDING.search(buf, pos)
            if m is None:
                break
            pos = m.start()
        else:
            pos += 1
    return ScanResult(version, first, last, n, valid_length, total, tuple(problems))


#: records a scan decodes per :func:`decode_records` call
_SCAN_BATCH = 4096


def _scan_batch(want: int, stop_after_txid: int | None) -> int:
    """How many records from txid ``want`` a scan may take next: never past ``stop_after_txid``."""
    if stop_after_txid is None:
        return _SCAN_BATCH
    return max(1, min(_SCAN_BATCH, stop_after_txid - want + 1))


#: a byte that is not padding (invariant 3)
_NON_PADDING = re.compile(rb"[^\x00\xff]")


def _first_non_padding(buf: bytes | memoryview, offset: int) -> int | None:
    m = _NON_PADDING.search(buf, offset)
    return None if m is None else m.start()


# --- incremental decoding (invariant 4) -------------------------------------------------


class SegmentDecoder:
    """Bytes in, complete records out: a segment decoded while it arrives in chunks.

    Feed chunks with :meth:`feed`, pull records with :meth:`next_record` until it
    returns None (more bytes needed, or the log ended at a padding byte), and
    call :meth:`finish` once the input ended. The header is checked when its 16
    bytes are in; each record by :func:`try_decode` (invariant 1). Txid order is
    the caller's rule (a reader, a scan). Bytes after a padding byte are not
    kept, only checked to be padding too (invariant 3).

    Args:
        where: names the segment in errors.
        max_record_bytes: the record size limit, which also bounds the bytes held.

    Attributes:
        layout_version: from the header once it arrived (None before).
        ended: a padding byte ended the log.
    """

    def __init__(self, *, where: str = "segment", max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> None:
        self.where = where
        self.max_record_bytes = max_record_bytes
        self.layout_version: int | None = None
        self.ended = False
        self._buf = bytearray()
        self._pos = 0          # first undecoded byte in _buf
        self._base = 0         # segment offset of _buf[0]
        self._crc_pos = 0      # bytes of _buf before it are folded into _records_crc
        self._records_crc = 0
        self._fed = 0
        self._garbage_at: int | None = None

    @property
    def offset(self) -> int:
        """Segment offset just after the last record returned (the valid length so far)."""
        return self._base + self._pos

    @property
    def fed_bytes(self) -> int:
        """Bytes fed so far."""
        return self._fed

    @property
    def buffered_bytes(self) -> int:
        """Bytes held and not yet decoded (the memory bound of invariant 4)."""
        return len(self._buf) - self._pos

    @property
    def records_crc(self) -> int:
        """CRC32C of the record bytes returned so far (from the end of the header to :attr:`offset`):
        the segment digest of seed 000 §2.8 once every record is out."""
        self._fold_crc()
        return self._records_crc

    def _fold_crc(self) -> None:
        if self._pos > self._crc_pos:
            with memoryview(self._buf) as mv:
                self._records_crc = crc32c(mv[self._crc_pos:self._pos], self._records_crc)
            self._crc_pos = self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append the next chunk of the segment."""
        n = len(data)
        if self.ended:
            if self._garbage_at is None:
                first = _first_non_padding(data, 0)
                if first is not None:
                    self._garbage_at = self._fed + first
            self._fed += n
            return
        if self._pos:
            self._fold_crc()
            del self._buf[:self._pos]
            self._base += self._pos
            self._crc_pos -= self._pos
            self._pos = 0
        self._buf += data
        self._fed += n

    def next_record(self, expected_txid: int | None = None) -> EditRecord | None:
        """The next complete record, or None when more bytes are needed or the log ended.

        Args:
            expected_txid: when given, a record with another txid is refused and left
                unconsumed (:attr:`offset` stays before it).

        Raises:
            CorruptSegmentError: a bad header.
            CorruptRecordError: a record fails its checksum or its length limit, or has
                another txid than ``expected_txid`` (then its fields hold ``txid`` and
                ``expected``).
        """
        if self.layout_version is None:
            if len(self._buf) - self._pos < HEADER_SIZE:
                return None
            self.layout_version = decode_header(bytes(self._buf[self._pos:self._pos + HEADER_SIZE]), self.where)
            self._pos += HEADER_SIZE
            self._crc_pos = self._pos
        if self.ended:
            return None
        d = try_decode(self._buf, self._pos, self.max_record_bytes)
        if d.status == OK:
            rec = d.record
            assert rec is not None
            if expected_txid is not None and rec.txid != expected_txid:
                raise CorruptRecordError(
                    f"{self.where}: record at byte {self.offset} has txid {rec.txid}, expected {expected_txid}",
                    where=self.where, offset=self.offset, txid=rec.txid, expected=expected_txid)
            self._pos = d.next_offset
            return rec
        if d.status == END:
            if self._pos < len(self._buf):  # a padding byte: the log ends here [3]
                self.ended = True
                first = _first_non_padding(self._buf, self._pos)
                if first is not None:
                    self._garbage_at = self._base + first
                self._fold_crc()
                del self._buf[self._pos:]
            return None
        if d.status == TRUNCATED:
            return None
        raise CorruptRecordError(f"{self.where}: at byte {self.offset}: {d.reason}",
                                 where=self.where, offset=self.offset, reason=d.reason)

    def next_records(self, max_records: int, expected_txid: int | None = None) -> list[EditRecord]:
        """Up to ``max_records`` complete records: the batch form of :meth:`next_record`.

        The records are those successive :meth:`next_record` calls would return (with
        ``expected_txid``, ``expected_txid + 1``, ...); an empty list where :meth:`next_record`
        would return None, and the same errors where it would raise (possibly after returning the
        good records before the bad one).
        """
        if self.layout_version is not None and not self.ended:
            recs, off = decode_records(self._buf, self._pos, max_records, self.max_record_bytes, expected_txid)
            if recs:
                self._pos = off
                return recs
        rec = self.next_record(expected_txid)  # the header, the end, a torn tail, the precise error
        return [rec] if rec is not None else []

    def skip_records(self, max_records: int, expected_txid: int) -> int:
        """Consume the records ``next_records(max_records, expected_txid)`` would return, without
        building them (a scan needs their number only); raises where it would.

        Returns:
            How many (0 where it returns ``[]``).
        """
        if self.layout_version is not None and not self.ended:
            n, off = valid_run(self._buf, self._pos, max_records, self.max_record_bytes, expected_txid)
            if n:
                self._pos = off
                return n
        return 0 if self.next_record(expected_txid) is None else 1

    def finish(self) -> ScanProblem | None:
        """The input ended: what is wrong with its end, or None for a clean end.

        Call after :meth:`next_record` returned None. Returns a ``bad-header``
        (fewer than 16 bytes), ``torn-tail`` (an incomplete record) or
        ``trailing-garbage`` (non-padding bytes after the padding) problem.
        """
        if self.layout_version is None:
            return ScanProblem(0, "bad-header",
                               f"{self.where}: header truncated ({self._fed} of {HEADER_SIZE} bytes)")
        if self._garbage_at is not None:
            return ScanProblem(self._garbage_at, "trailing-garbage",
                               f"non-padding byte after the end of the log at byte {self._garbage_at}")
        if not self.ended and self.buffered_bytes:
            d = try_decode(self._buf, self._pos, self.max_record_bytes)
            return ScanProblem(self.offset, "torn-tail", d.reason)
        return None


def scan_segment_chunks(chunks: Iterable[bytes], *, expected_first_txid: int | None = None,
                        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                        stop_after_txid: int | None = None,
                        where: str = "segment") -> tuple[ScanResult, int]:
    """:func:`scan_segment` over a segment read in chunks, in bounded memory (invariant 4).

    The valid prefix, its txids and length are those :func:`scan_segment` finds;
    ``problems`` holds only the first problem (the whole-image resync that lists
    the records unreachable after damage is :func:`scan_segment`'s alone), and
    ``total_length`` counts the bytes read, which stop early once
    ``stop_after_txid`` is reached.

    Returns:
        ``(result, digest)``: the digest is the CRC32C of the valid prefix's record bytes.
    """
    dec = SegmentDecoder(where=where, max_record_bytes=max_record_bytes)
    first = last = INVALID_TXID
    n = 0
    problem: ScanProblem | None = None

    def result() -> tuple[ScanResult, int]:
        valid = dec.offset if dec.layout_version is not None else 0
        return (ScanResult(dec.layout_version, first, last, n, valid, dec.fed_bytes,
                           (problem,) if problem is not None else ()), dec.records_crc)

    for chunk in chunks:
        dec.feed(chunk)
        while True:
            start = dec.offset
            want = (last + 1) if n else expected_first_txid
            try:
                if want is None:  # any first txid; the rest run on from it
                    rec = dec.next_record()
                    k, want = (0, None) if rec is None else (1, rec.txid)
                else:
                    k = dec.skip_records(_scan_batch(want, stop_after_txid), want)
            except CorruptSegmentError as e:
                problem = ScanProblem(0, "bad-header", e.message)
                return result()
            except CorruptRecordError as e:
                kind = "txid-gap" if "expected" in e.fields else "corrupt"
                problem = ScanProblem(start, kind, e.fields.get("reason") or e.message)
                return result()
            if not k:
                break
            if n == 0:
                first = want
            last = want + k - 1  # type: ignore[operator]
            n += k
            if stop_after_txid is not None and last >= stop_after_txid:
                return result()
    problem = dec.finish()
    return result()


# --- file names -----------------------------------------------------------------

_FINALIZED = re.compile(r"^edits_(\d{19})-(\d{19})$")
_INPROGRESS = re.compile(r"^edits_inprogress_(\d{19})$")


@dataclass(frozen=True, slots=True)
class SegmentName:
    start_txid: int
    end_txid: int | None  # None while in progress

    @property
    def in_progress(self) -> bool:
        return self.end_txid is None

    @property
    def file_name(self) -> str:
        return segment_file_name(self.start_txid, self.end_txid)


def segment_file_name(start_txid: int, end_txid: int | None = None) -> str:
    """``edits_inprogress_<start>`` or ``edits_<start>-<end>`` (19-digit zero-padded)."""
    if end_txid is None:
        return f"edits_inprogress_{start_txid:019d}"
    return f"edits_{start_txid:019d}-{end_txid:019d}"


def parse_segment_file_name(name: str) -> SegmentName | None:
    """Parse a segment file name; None for anything else (tmp files, .empty, ...)."""
    m = _FINALIZED.match(name)
    if m:
        return SegmentName(int(m.group(1)), int(m.group(2)))
    m = _INPROGRESS.match(name)
    if m:
        return SegmentName(int(m.group(1)), None)
    return None
