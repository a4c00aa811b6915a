"""Compiled (numba) framing and body decoding of segment copies: the pipeline's hot path.

Why: the pipeline must decode edits faster than the NameNode replays them
(issue 14), and a per-record Python loop (``try_decode`` per record, one
``msgpack.unpackb`` per body, Arrow arrays built from Python lists) cannot. The
kernels here run over a numpy ``uint8`` view of the copy (no copy of the bytes)
and hand Arrow its buffers directly. They are an accelerator, not a second
decoder: whenever a kernel is not certain that its answer equals the reference
path's (:mod:`qjournal.pipeline.decode` with :mod:`qjournal.protocol.segment` and
:func:`qjournal.namenode.ops.decode_columns`), it says so and the caller runs the
reference path instead. Problem rows are never made here.

Theory of operation:

1. :func:`frame_clean` checks the header (magic, layout version, header CRC32C)
   and walks records ``segment_start..segment_end`` in one compiled pass,
   verifying length limit, consecutive txids and each record's CRC32C
   (Castagnoli, slice-by-8 tables built once with numpy). It returns the five
   framing arrays, or None when the copy is not clean (the caller then scans).
2. :func:`decode_bodies` parses each framed body as a msgpack map with string keys
   (the key table is :data:`qjournal.namenode.ops.BODY_COLUMNS`), writing int
   columns as int64 values plus validity and string/binary columns as
   ``(start, length)`` into the copy plus validity. Two more kernels lay out
   each string/binary column's int32 offsets and gather the values, record by
   record, into one data buffer; Arrow wraps slices of these buffers
   (``from_buffers``; all of them come from Arrow's memory pool, which reuses
   pages from batch to batch) and validates as UTF-8 the string columns that hold
   a byte >= 0x80 (ASCII is valid UTF-8). It returns None (the caller decodes
   the batch in Python) on anything it does not fully understand: an unknown
   opcode, a body that is not one map, a key outside the table, a value whose
   msgpack type is not its column's (an int for int columns, str for string
   ones, bin for binary ones, or nil), an int outside an int32 column's range,
   trailing bytes, invalid UTF-8.
3. Kernels are compiled on first use with ``cache=True`` (``__pycache__`` beside
   this file, the user's numba cache dir for a zip shipped with ``addPyFile``,
   or ``NUMBA_CACHE_DIR``); where no cache directory is writable they compile
   once per process instead (:func:`_kernel`).

Invariants:

1. :func:`frame_clean` returns arrays only for a copy whose header is good
   (its layout version :data:`~qjournal.protocol.segment.LAYOUT_VERSION`) and
   whose records ``segment_start..segment_end`` each decode as ``ok`` under
   :func:`~qjournal.protocol.segment.try_decode` with the expected txid, and
   then the same five values per record the scan would give; otherwise None.
2. :func:`decode_bodies` returns columns only when the reference decoder would
   have produced every row of the batch valid, and then the same values
   (nil -> null; duplicate keys: the last wins, as in ``msgpack.unpackb``).
3. No kernel reads outside ``[offset, offset + 17 + length)`` of a framed record
   or outside the buffer while framing; every length is checked before use.
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from qjournal.namenode import ops as nn_ops
from qjournal.protocol import segment as seg

#: Arrow type of each of :data:`qjournal.namenode.ops.COLUMNS`'s type names
ARROW_TYPES = {"int64": pa.int64(), "int32": pa.int32(), "string": pa.string(), "binary": pa.binary()}

# the segment format's numbers, from its one home (numba freezes module globals at compile time)
_HEADER_SIZE = seg.HEADER_SIZE
_REC_HEAD_SIZE = seg.REC_HEAD_SIZE
_OP_INVALID_ZERO = seg.OP_INVALID_ZERO
_OP_INVALID_FF = seg.OP_INVALID_FF

# column kinds in the kernels
_K_INT64, _K_INT32, _K_STRING, _K_BINARY = 0, 1, 2, 3
_KIND_BY_TYPE = {"int64": _K_INT64, "int32": _K_INT32, "string": _K_STRING, "binary": _K_BINARY}
_INT64_MAX = 2 ** 63 - 1
#: the largest data buffer of one string column of a batch (Arrow's int32 offsets)
_MAX_STRING_DATA_BYTES = 2 ** 31 - 1


def _kernel(fn):
    """``numba.njit(cache=True, nogil=True)``, or without the cache where none can be written (theory 3).

    numba refuses ``cache=True`` at decoration when it finds no writable
    locator (a read-only install, no home directory) and fails at the first
    save when a zip's user-wide cache directory cannot be made; both mean:
    compile in memory, once per process.
    """
    try:
        compiled = numba.njit(cache=True, nogil=True)(fn)
        compiled._cache._impl.locator.ensure_cache_path()
        return compiled
    except (RuntimeError, OSError, AttributeError):
        return numba.njit(nogil=True)(fn)


def _crc32c_tables() -> np.ndarray:
    """Slice-by-8 tables of CRC32C (reflected Castagnoli polynomial 0x82F63B78), shape (8, 256)."""
    t = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        t = np.where(t & 1, (t >> 1) ^ np.uint32(0x82F63B78), t >> 1).astype(np.uint32)
    tables = np.empty((8, 256), dtype=np.uint32)
    tables[0] = t
    for k in range(1, 8):
        prev = tables[k - 1]
        tables[k] = (prev >> 8) ^ tables[0][prev & 0xFF]
    return tables


_CRC_TABLES = _crc32c_tables()


@_kernel
def _crc32c_kernel(buf, start, end, tables):
    """CRC32C of ``buf[start:end]`` (8 bytes per step, then byte by byte)."""
    t0, t1, t2, t3 = tables[0], tables[1], tables[2], tables[3]
    t4, t5, t6, t7 = tables[4], tables[5], tables[6], tables[7]
    crc = np.int64(0xFFFFFFFF)
    i = start
    while i + 8 <= end:
        lo = crc ^ (np.int64(buf[i]) | (np.int64(buf[i + 1]) << 8)
                    | (np.int64(buf[i + 2]) << 16) | (np.int64(buf[i + 3]) << 24))
        crc = np.int64(t7[lo & 0xFF] ^ t6[(lo >> 8) & 0xFF] ^ t5[(lo >> 16) & 0xFF] ^ t4[(lo >> 24) & 0xFF]
                       ^ t3[buf[i + 4]] ^ t2[buf[i + 5]] ^ t1[buf[i + 6]] ^ t0[buf[i + 7]])
        i += 8
    while i < end:
        crc = np.int64(t0[(crc ^ buf[i]) & 0xFF]) ^ (crc >> 8)
        i += 1
    return crc ^ 0xFFFFFFFF


@_kernel
def _be(buf, i, n):
    """The big-endian unsigned integer of ``n`` bytes at ``buf[i]`` (n <= 8; 8 bytes wrap to int64)."""
    v = np.int64(0)
    for k in range(n):
        v = (v << 8) | np.int64(buf[i + k])
    return v


@_kernel
def _frame_kernel(buf, start, max_len, tables, magic, version,
                  txids, opcodes, offsets, lengths, checksums):
    """Frame ``len(txids)`` records from txid ``start``; False at the first thing that is not clean."""
    size = buf.shape[0]
    if size < _HEADER_SIZE:
        return False
    for k in range(8):
        if buf[k] != magic[k]:
            return False
    if _be(buf, 8, 4) != version or _be(buf, 12, 4) != _crc32c_kernel(buf, 0, 12, tables):
        return False
    off = np.int64(_HEADER_SIZE)
    for r in range(txids.shape[0]):
        if off + _REC_HEAD_SIZE > size:
            return False
        op = buf[off]
        if op == _OP_INVALID_ZERO or op == _OP_INVALID_FF:
            return False
        length = _be(buf, off + 1, 4)
        if length > max_len or _be(buf, off + 5, 8) != start + r:
            return False
        body_end = off + _REC_HEAD_SIZE + length
        if body_end + 4 > size:
            return False
        stored = _be(buf, body_end, 4)
        if stored != _crc32c_kernel(buf, off, body_end, tables):
            return False
        txids[r] = start + r
        opcodes[r] = op
        offsets[r] = off
        lengths[r] = length
        checksums[r] = stored
        off = body_end + 4
    return True


def as_bytes_array(content) -> np.ndarray | None:
    """A read-only ``uint8`` view of ``content`` (bytes, memoryview, mmap), or None if it has no flat buffer."""
    try:
        arr = np.frombuffer(content, dtype=np.uint8)
    except (TypeError, ValueError, BufferError):
        return None
    arr.flags.writeable = False  # one kernel signature for bytes, bytearrays and maps alike
    return arr


_MAGIC = np.frombuffer(seg.MAGIC, dtype=np.uint8)


def frame_clean(content, segment_start: int, segment_end: int,
                max_record_bytes: int) -> tuple[np.ndarray, ...] | None:
    """Frame a clean copy in one compiled pass (theory 1, invariant 1).

    Clean means: a good header, then records ``segment_start..segment_end`` with
    verified checksums and consecutive txids (bytes after ``segment_end`` are
    ignored, as a reader of a finalized segment does).

    Returns:
        ``(txids, opcodes, offsets, lengths, checksums)`` as int64 arrays, or None
        when the copy is not clean (the caller scans it and reports why).
    """
    buf = as_bytes_array(content)
    if buf is None:
        return None
    n = segment_end - segment_start + 1
    if (n < 1 or n > max(0, buf.shape[0] - seg.HEADER_SIZE) // seg.RECORD_OVERHEAD
            or segment_start < 0 or segment_end > _INT64_MAX):
        # a name with no txid (the scan reports it), more txids than the bytes can hold, or
        # txids the kernel's int64 cannot hold (a record's u64 txid is compared as int64)
        return None
    cols = tuple(np.empty(n, dtype=np.int64) for _ in range(5))
    if not _frame_kernel(buf, segment_start, max_record_bytes, _CRC_TABLES, _MAGIC,
                         seg.LAYOUT_VERSION, *cols):
        return None
    return cols


def crc32c(data) -> int:
    """CRC32C of a bytes-like object with the compiled kernel (the tests compare it with ``crc32c``)."""
    buf = as_bytes_array(data)
    return int(_crc32c_kernel(buf, 0, buf.shape[0], _CRC_TABLES))


# --- bodies ---------------------------------------------------------------------

_COLUMN_TYPES = dict(nn_ops.COLUMNS)
#: the body columns in key-table order, with their Arrow types
BODY_FIELDS: tuple[tuple[str, pa.DataType], ...] = tuple(
    (c, ARROW_TYPES[_COLUMN_TYPES[c]]) for c in nn_ops.BODY_COLUMNS)
_KEY_LENS = np.array([len(c.encode()) for c in nn_ops.BODY_COLUMNS], dtype=np.int64)
_KEYS = np.zeros((len(nn_ops.BODY_COLUMNS), int(_KEY_LENS.max())), dtype=np.uint8)
for _i, _c in enumerate(nn_ops.BODY_COLUMNS):
    _KEYS[_i, :len(_c.encode())] = np.frombuffer(_c.encode(), dtype=np.uint8)
_KINDS = np.array([_KIND_BY_TYPE[_COLUMN_TYPES[c]] for c in nn_ops.BODY_COLUMNS], dtype=np.int64)
#: the string and binary columns (their values are gathered into Arrow data buffers)
_VAR_COLUMNS = np.flatnonzero(_KINDS >= _K_STRING).astype(np.int64)
_KNOWN_OPCODES = np.zeros(256, dtype=np.uint8)
_KNOWN_OPCODES[list(nn_ops.OPCODE_NAMES)] = 1
#: opcode -> ``OP_...`` name (null for unknown opcodes, which never reach a take)
_OP_NAMES = pa.array([nn_ops.OPCODE_NAMES.get(i) for i in range(256)], pa.string())


@_kernel
def _match_key(buf, p, klen, keys, key_lens, hint):
    """The key table index of ``buf[p:p+klen]``, trying ``hint`` first (bodies list fields in order); -1 if none."""
    ncol = key_lens.shape[0]
    for t in range(ncol):
        c = hint + t
        if c >= ncol:
            c -= ncol
        if key_lens[c] != klen:
            continue
        same = True
        for q in range(klen):
            if keys[c, q] != buf[p + q]:
                same = False
                break
        if same:
            return c
    return -1


@_kernel
def _bodies_kernel(buf, offsets, lengths, opcodes, known, keys, key_lens, kinds, vals, lens, valid):
    """Decode each framed body into the column matrices (theory 2); the first row it refuses, or -1.

    One flat loop on purpose: a call to another compiled function costs more
    than parsing a field (the array arguments are reference-counted per call),
    so only the rare path (a key out of table order) calls :func:`_match_key`.
    """
    ncol = key_lens.shape[0]
    for r in range(offsets.shape[0]):
        if known[opcodes[r]] == 0:
            return r
        p = offsets[r] + _REC_HEAD_SIZE
        end = p + lengths[r]
        if p >= end:
            return r
        b = np.int64(buf[p])
        if 0x80 <= b <= 0x8F:  # fixmap
            count = b - 0x80
            p += 1
        elif b == 0xDE or b == 0xDF:  # map16, map32
            h = 3 if b == 0xDE else 5
            if p + h > end:
                return r
            count = np.int64(0)
            for k in range(1, h):
                count = (count << 8) | np.int64(buf[p + k])
            p += h
        else:
            return r
        hint = 0
        c = 0
        for item in range(2 * count):  # key, value, key, value, ...
            if p >= end:
                return r
            b = np.int64(buf[p])
            # a str (fixstr, str8/16/32) or bin (bin8/16/32): a head of h bytes, then slen bytes
            h = 0
            slen = np.int64(0)
            is_str = True
            if 0xA0 <= b <= 0xBF:
                h = 1
                slen = b - 0xA0
            elif 0xD9 <= b <= 0xDB or 0xC4 <= b <= 0xC6:
                is_str = b >= 0xD9
                h = 1 + (np.int64(1) << (b - (0xD9 if is_str else 0xC4)))
                if p + h > end:
                    return r
                for k in range(1, h):
                    slen = (slen << 8) | np.int64(buf[p + k])
            if h > 0 and p + h + slen > end:
                return r
            if item % 2 == 0:  # the key: a str naming a column
                if h == 0 or not is_str:
                    return r
                p += h
                # its column: the one after the previous key first (bodies list fields in table order)
                c = hint
                if key_lens[c] == slen:
                    for q in range(slen):
                        if keys[c, q] != buf[p + q]:
                            c = -1
                            break
                else:
                    c = -1
                if c < 0:
                    c = _match_key(buf, p, slen, keys, key_lens, hint)
                    if c < 0:
                        return r
                hint = c + 1 if c + 1 < ncol else 0
                p += slen
                continue
            kind = kinds[c]
            if h > 0:  # a string or binary value: where it is
                if kind != (2 if is_str else 3):
                    return r
                vals[c, r] = p + h
                lens[c, r] = slen
                p += h + slen
            elif b == 0xC0:  # nil: null (the last of duplicate keys wins)
                valid[c, r] = 0
                p += 1
                continue
            elif kind == 0 or kind == 1:
                if b <= 0x7F:  # positive fixint
                    v = b
                    p += 1
                elif b >= 0xE0:  # negative fixint
                    v = b - 256
                    p += 1
                elif 0xCC <= b <= 0xD3:  # uint8..uint64, int8..int64
                    signed = b >= 0xD0
                    n = np.int64(1) << (b - (0xD0 if signed else 0xCC))
                    if p + 1 + n > end or (n == 8 and not signed and buf[p + 1] >= 0x80):
                        return r  # cut, or a uint64 over int64's range
                    v = np.int64(0)
                    for k in range(1, n + 1):
                        v = (v << 8) | np.int64(buf[p + k])
                    if signed and n < 8 and v >= (np.int64(1) << (8 * n - 1)):
                        v -= np.int64(1) << (8 * n)
                    p += 1 + n
                else:
                    return r
                if kind == 1 and (v < -2147483648 or v > 2147483647):  # int32's range
                    return r
                vals[c, r] = v
            else:
                return r
            valid[c, r] = 1
        if p != end:
            return r
    return -1


@_kernel
def _string_offsets(lens, valid, var_cols, offs, max_bytes):
    """Arrow's int32 offsets of each string/binary column (``var_cols``) into ``offs`` (one row each).

    Returns:
        Each column's data size, or an empty array when one is over ``max_bytes``.
    """
    n = lens.shape[1]
    totals = np.zeros(var_cols.shape[0], dtype=np.int64)
    for j in range(var_cols.shape[0]):
        c = var_cols[j]
        pos = np.int64(0)
        for r in range(n):
            offs[j, r] = pos
            if valid[c, r]:
                pos += lens[c, r]
                if pos > max_bytes:
                    return np.zeros(0, dtype=np.int64)
        offs[j, n] = pos
        totals[j] = pos
    return totals


@_kernel
def _string_gather(buf, starts, lens, valid, var_cols, offs, bases, data, non_ascii):
    """Copy every string/binary value into ``data`` (column ``j`` from ``bases[j]``), record by record.

    Record order reads the copy once, front to back (a pass per column would
    read it once per column). ``non_ascii[j]`` is set when column ``j`` holds a
    byte >= 0x80: only those columns need a UTF-8 check.
    """
    for r in range(starts.shape[1]):
        for j in range(var_cols.shape[0]):
            c = var_cols[j]
            if valid[c, r]:
                s = starts[c, r]
                d = bases[j] + offs[j, r]
                seen = 0
                for q in range(lens[c, r]):
                    x = buf[s + q]
                    data[d + q] = x
                    seen |= x
                if seen >= 0x80:
                    non_ascii[j] = 1


def _arrow_alloc(nbytes: int) -> tuple[pa.Buffer, np.ndarray]:
    """A buffer from Arrow's memory pool (which keeps freed pages: no page faults per batch) and its bytes."""
    out = pa.allocate_buffer(nbytes)
    return out, np.frombuffer(out, dtype=np.uint8)


def _validity(mask: np.ndarray) -> tuple[pa.Buffer | None, int]:
    """Arrow's validity bitmap of a 0/1 byte mask (None when all valid) and its null count."""
    nulls = int(mask.shape[0] - np.count_nonzero(mask))
    if nulls == 0:
        return None, 0
    return pa.py_buffer(np.packbits(mask, bitorder="little")), nulls


def decode_bodies(content, offsets: np.ndarray, lengths: np.ndarray,
                  opcodes: np.ndarray) -> dict[str, pa.Array] | None:
    """The ``op`` column and every body column of the framed records (theory 2, invariant 2).

    Args:
        content: the copy's bytes (those the framing arrays point into).
        offsets / lengths / opcodes: int64 framing arrays of the records to decode.

    Returns:
        ``{column: Arrow array}`` for ``op`` and :data:`BODY_FIELDS`, or None
        when any record needs the reference decoder.
    """
    buf = as_bytes_array(content)
    if buf is None:
        return None
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    lengths = np.ascontiguousarray(lengths, dtype=np.int64)
    opcodes = np.ascontiguousarray(opcodes, dtype=np.int64)
    n = offsets.shape[0]
    ncol = len(BODY_FIELDS)
    vals_buf, vals = _arrow_alloc(ncol * n * 8)  # int values, or string starts; int64 columns keep slices
    vals = vals.view(np.int64).reshape(ncol, n)
    lens = _arrow_alloc(ncol * n * 8)[1].view(np.int64).reshape(ncol, n)
    valid = _arrow_alloc(ncol * n)[1].reshape(ncol, n)
    valid.fill(0)
    if _bodies_kernel(buf, offsets, lengths, opcodes, _KNOWN_OPCODES, _KEYS, _KEY_LENS, _KINDS,
                      vals, lens, valid) >= 0:
        return None
    out: dict[str, pa.Array] = {"op": _OP_NAMES.take(pa.array(opcodes))}
    nvar = _VAR_COLUMNS.shape[0]
    offs_buf, offs = _arrow_alloc(nvar * (n + 1) * 4)
    offs = offs.view(np.int32).reshape(nvar, n + 1)
    totals = _string_offsets(lens, valid, _VAR_COLUMNS, offs, _MAX_STRING_DATA_BYTES)
    if totals.shape[0] != nvar:
        return None
    bases = np.concatenate(([0], np.cumsum(totals)[:-1])).astype(np.int64)
    data_buf, data = _arrow_alloc(int(totals.sum()))
    non_ascii = np.zeros(nvar, dtype=np.uint8)
    _string_gather(buf, vals, lens, valid, _VAR_COLUMNS, offs, bases, data, non_ascii)
    var_index = {int(c): j for j, c in enumerate(_VAR_COLUMNS)}
    for c, (name, typ) in enumerate(BODY_FIELDS):
        bitmap, nulls = _validity(valid[c])
        if _KINDS[c] == _K_INT64:
            out[name] = pa.Array.from_buffers(typ, n, [bitmap, vals_buf.slice(c * n * 8, n * 8)], nulls)
        elif _KINDS[c] == _K_INT32:
            int32_buf, int32 = _arrow_alloc(n * 4)
            np.copyto(int32.view(np.int32), vals[c], casting="unsafe")  # in range: the kernel checked
            out[name] = pa.Array.from_buffers(typ, n, [bitmap, int32_buf], nulls)
        else:
            j = var_index[c]
            arr = pa.Array.from_buffers(typ, n, [bitmap, offs_buf.slice(j * (n + 1) * 4, (n + 1) * 4),
                                                 data_buf.slice(int(bases[j]), int(totals[j]))], nulls)
            if _KINDS[c] == _K_STRING and non_ascii[j]:
                try:
                    arr.validate(full=True)
                except pa.ArrowInvalid:  # invalid UTF-8: the reference reports the record
                    return None
            out[name] = arr
    return out


__all__ = ["ARROW_TYPES", "BODY_FIELDS", "as_bytes_array", "crc32c", "decode_bodies", "frame_clean"]
