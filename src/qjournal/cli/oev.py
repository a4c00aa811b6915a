"""``qjournal oev``: the offline edits viewer (as ``hdfs oev``) and segment checker.

Why: when a journal misbehaves an operator needs to see what is in a segment
file without starting any daemon: every record (txid, opcode, length,
checksum, decoded fields), and with ``--scan`` exactly where and how a file
is damaged. The exit status makes it usable from scripts: 0 for a clean file,
1 when any corruption is found, 2 for a usage or I/O error.

Decoding of record bodies uses the NameNode's op registry
(``qjournal.namenode.ops``) when it is importable and knows the opcode;
otherwise the body is printed as hex.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, TextIO
from xml.sax.saxutils import escape

from qjournal.errors import QJournalError
from qjournal.namenode import ops
from qjournal.protocol import segment as seg


def _op_decoder() -> tuple[Callable[[int], str], Callable[[int, bytes, int], dict]]:
    """(opcode -> name, decoder): the NameNode's ops, and ``OP_DATA`` for opaque records."""
    def name(op: int) -> str:
        if op == seg.OP_DATA and op not in ops.OPS:
            return "OP_DATA"
        return ops.opcode_name(op)

    def decode(op: int, body: bytes, txid: int) -> dict:
        if op not in ops.OPS:
            raise KeyError(op)
        decoded = ops.decode_op(op, body, txid)
        fields = decoded.to_body() if hasattr(decoded, "to_body") else vars(decoded)
        return {k: _jsonable(v) for k, v in sorted(fields.items())}

    return name, decode


def _jsonable(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    return v


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def scan_file(path: str, out: TextIO) -> int:
    """Print the valid range of a segment file and each problem; return the exit status."""
    data = _read(path)
    name = os.path.basename(path)
    parsed = seg.parse_segment_file_name(name)
    expected_first = parsed.start_txid if parsed else None
    r = seg.scan_segment(data, expected_first_txid=expected_first)
    problems = list(r.problems)
    if parsed is not None and not parsed.in_progress and r.header_ok:
        if r.empty or r.last_txid != parsed.end_txid:
            have = "no valid record" if r.empty else f"valid txids up to {r.last_txid}"
            problems.append(seg.ScanProblem(r.valid_length, "name-mismatch",
                                            f"file name says txids {parsed.start_txid}-{parsed.end_txid}, "
                                            f"the file has {have}"))
    out.write(f"file: {path}\n")
    out.write(f"size: {r.total_length} bytes\n")
    out.write(f"layout version: {r.layout_version if r.header_ok else 'unreadable'}\n")
    if r.empty:
        out.write(f"valid range: none (valid prefix ends at byte {r.valid_length})\n")
    else:
        out.write(f"valid range: txids {r.first_txid}-{r.last_txid} ({r.num_records} records, "
                  f"bytes {seg.HEADER_SIZE}-{r.valid_length})\n")
    for p in problems:
        out.write(f"problem: offset {p.offset}: {p.kind}: {p.detail}\n")
    in_progress = parsed is not None and parsed.in_progress
    fatal = [p for p in problems if not (p.kind == "torn-tail" and in_progress)]
    if not problems:
        out.write("status: clean\n")
    elif not fatal:
        out.write("status: torn tail of an in-progress segment (recovery truncates it)\n")
    else:
        out.write(f"status: CORRUPT ({len(fatal)} problem{'s' if len(fatal) != 1 else ''})\n")
    return 1 if fatal else 0


def dump_file(path: str, fmt: str, out: TextIO, err: TextIO) -> int:
    """Print every record of a segment file as JSON lines or XML, or counts per op (stats).

    Returns:
        0 when the file is clean (a torn tail of an in-progress segment is clean), 1 on corruption.
    """
    data = _read(path)
    name_of, decode = _op_decoder()
    try:
        version = seg.decode_header(data, where=path)
    except QJournalError as e:
        err.write(f"oev: {e}\n")
        return 1
    if fmt == "xml":
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n<EDITS>\n')
        out.write(f"  <EDITS_VERSION>{version}</EDITS_VERSION>\n")
    offset = seg.HEADER_SIZE
    status = 0
    counts: dict[str, int] = {}
    first: int | None = None
    last: int | None = None
    while True:
        d = seg.try_decode(data, offset)
        if d.status == seg.END:
            rest = data[offset:].strip(b"\x00\xff")
            if rest:
                err.write(f"oev: {path}: at byte {offset}: non-padding bytes after the end of the log\n")
                status = 1
            break
        if d.status != seg.OK:
            parsed = seg.parse_segment_file_name(os.path.basename(path))
            benign = d.status == seg.TRUNCATED and parsed is not None and parsed.in_progress
            err.write(f"oev: {path}: at byte {offset}: {d.status}: {d.reason}"
                      f"{' (torn tail of an in-progress segment)' if benign else ''}\n")
            status = 0 if benign else 1
            break
        rec = d.record
        assert rec is not None
        entry: dict[str, Any] = {"txid": rec.txid, "opcode": rec.opcode, "op": name_of(rec.opcode),
                                 "length": len(rec.body), "checksum": f"{rec.checksum:#010x}",
                                 "offset": offset}
        if fmt != "stats":
            try:
                entry["fields"] = decode(rec.opcode, rec.body, rec.txid)
            except KeyError:
                entry["body_hex"] = rec.body.hex()
            except QJournalError as e:
                entry["body_hex"] = rec.body.hex()
                entry["decode_error"] = str(e)
        if fmt == "json":
            out.write(json.dumps(entry, sort_keys=False, default=str) + "\n")
        elif fmt == "xml":
            _write_xml_record(out, entry)
        else:
            counts[entry["op"]] = counts.get(entry["op"], 0) + 1
            first = rec.txid if first is None else first
            last = rec.txid
        offset = d.next_offset
    if fmt == "xml":
        out.write("</EDITS>\n")
    elif fmt == "stats":
        total = sum(counts.values())
        out.write(f"file: {path}\nlayout version: {version}\n")
        out.write(f"records: {total}" + (f" (txids {first}-{last})" if total else "") + "\n")
        for name in sorted(counts):
            out.write(f"  {name:<24} {counts[name]:>10}\n")
    return status


def _write_xml_record(out: TextIO, e: dict) -> None:
    out.write("  <RECORD>\n")
    out.write(f"    <OPCODE>{escape(e['op'])}</OPCODE>\n    <DATA>\n")
    out.write(f"      <TXID>{e['txid']}</TXID>\n")
    out.write(f"      <LENGTH>{e['length']}</LENGTH>\n      <CHECKSUM>{e['checksum']}</CHECKSUM>\n")
    for k, v in (e.get("fields") or {}).items():
        tag = k.upper()
        out.write(f"      <{tag}>{escape('' if v is None else str(v))}</{tag}>\n")
    if "body_hex" in e:
        out.write(f"      <BODY_HEX>{e['body_hex']}</BODY_HEX>\n")
    if "decode_error" in e:
        out.write(f"      <DECODE_ERROR>{escape(e['decode_error'])}</DECODE_ERROR>\n")
    out.write("    </DATA>\n  </RECORD>\n")


def register(subparsers) -> None:
    """Add the ``oev`` subcommand."""
    p = subparsers.add_parser("oev")
    p.add_argument("-i", "--input", required=True, metavar="FILE", help="segment file (edits_...)")
    p.add_argument("-p", "--processor", choices=("json", "xml", "stats"), default="json",
                   help="output: json lines (default), xml (as hdfs oev), or stats (records per op)")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    p.add_argument("--scan", action="store_true",
                   help="print the valid range and every problem (offset, kind, detail) instead of records")
    p.set_defaults(func=main)


def main(args) -> int:
    """Run ``oev``; 0 clean, 1 corruption found, 2 usage or I/O error."""
    if not os.path.isfile(args.input):
        sys.stderr.write(f"oev: {args.input}: no such file\n")
        return 2
    out: TextIO = sys.stdout
    try:
        if args.output:
            out = open(args.output, "w", encoding="utf-8")
        if args.scan:
            return scan_file(args.input, out)
        return dump_file(args.input, args.processor, out, sys.stderr)
    except OSError as e:
        sys.stderr.write(f"oev: {e.filename or args.input}: {e.strerror}\n")
        return 2
    finally:
        if out is not sys.stdout:
            out.close()
