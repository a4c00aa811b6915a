"""``qjournal log format|write|read|status``: drive a quorum journal from the shell.

Why: operators and the chaos harness need to format a journal, become its
writer, read it back and see each JournalNode's state without a NameNode.
``write`` prints ``acked <txid>`` (flushed, one line) every time a quorum
acknowledged a batch, so an outside observer knows exactly which txids the
correctness requirements protect. Every subcommand exits non-zero with a
one-line reason when it cannot do its job (no quorum, fenced, not formatted).

Usage::

    qjournal log format --journal URI [--force]
    qjournal log write  --journal URI --count N --size BYTES [--batch K] [--roll-every T]
    qjournal log read   --journal URI --from TXID [--to TXID]
    qjournal log status --journal URI   (a JSON line per node, then the replica count summary)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import uuid
from typing import Any

from qjournal.client.qjm import NodeStatus, QuorumJournalManager
from qjournal.config import Configuration
from qjournal.errors import (ConfigError, EpochError, GapInTransactionsError, InvariantViolation,
                             JournalNotFormattedError, QJournalError, QuorumError)
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.segment import crc32c
from qjournal.protocol.sync_rules import finalized_replicas
from qjournal.util.logs import setup_logging

log = logging.getLogger(__name__)

__all__ = ["register", "record_body"]


def record_body(epoch: int, txid: int, size: int) -> bytes:
    """The bytes ``log write`` stores for ``txid``: a readable tag padded to ``size`` bytes."""
    tag = b"e%d:t%d:" % (epoch, txid)
    if size <= len(tag):
        return tag[:size]
    return tag + bytes([txid % 251]) * (size - len(tag))


def register(subparsers: Any) -> None:
    """Add the ``log`` subcommand and its four actions."""
    p = subparsers.add_parser("log", help="format, write, read or inspect a qjournal:// journal",
                              description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="log_command", metavar="ACTION")

    f = sub.add_parser("format", help="format the journal on every JournalNode")
    f.add_argument("--journal", required=True, metavar="URI")
    f.add_argument("--force", action="store_true", help="re-format a journal that holds data")
    f.add_argument("--namespace-id", type=int, default=None)
    f.add_argument("--cluster-id", default=None)
    f.set_defaults(func=_cmd_format)

    w = sub.add_parser("write", help="become the writer and append records")
    w.add_argument("--journal", required=True, metavar="URI")
    w.add_argument("--count", type=int, required=True, help="records to write")
    w.add_argument("--size", type=int, required=True, metavar="BYTES", help="bytes per record")
    w.add_argument("--batch", type=int, default=1, metavar="K", help="records per sync (default 1)")
    w.add_argument("--roll-every", type=int, default=0, metavar="TXNS",
                   help="finalize and start a new segment every TXNS records (0: one segment)")
    w.set_defaults(func=_cmd_write)

    r = sub.add_parser("read", help="print one JSON line per record of the finalized segments")
    r.add_argument("--journal", required=True, metavar="URI")
    r.add_argument("--from", dest="from_txid", type=int, required=True, metavar="TXID")
    r.add_argument("--to", dest="to_txid", type=int, default=None, metavar="TXID")
    r.set_defaults(func=_cmd_read)

    s = sub.add_parser("status", help="per JournalNode: epochs, segments, committed txid; replica counts")
    s.add_argument("--journal", default=None, metavar="URI",
                   help="default: dfs.namenode.shared.edits.dir of the configuration (--conf)")
    s.set_defaults(func=_cmd_status)

    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])


def _setup(args: argparse.Namespace) -> Configuration:
    setup_logging("log", "WARNING", json=False)
    return Configuration.from_args(args)


def _reason(e: BaseException) -> str:
    """One line saying why a command failed."""
    text = str(e).replace("\n", " ")
    if isinstance(e, JournalNotFormattedError) or "JournalNotFormattedError" in text:
        return f"journal not formatted: {text}"
    if isinstance(e, EpochError):
        return f"fenced by a newer writer: {text}"
    if isinstance(e, QuorumError):
        return f"no quorum: {text}"
    if isinstance(e, GapInTransactionsError):
        return f"gap in transactions: {text}"
    return f"{type(e).__name__}: {text}"


def _run(args: argparse.Namespace, coro_fn: Any) -> int:
    what = f"qjournal log {args.log_command}"
    try:
        conf = _setup(args)
        uri = args.journal or conf.get("dfs.namenode.shared.edits.dir")
        if not uri:
            raise ConfigError("no --journal URI and no dfs.namenode.shared.edits.dir in the configuration")
        qjm = QuorumJournalManager(uri, conf)
    except QJournalError as e:
        print(f"{what}: {_reason(e)}", file=sys.stderr, flush=True)
        return 1

    async def main() -> int:
        try:
            return await coro_fn(qjm, args)
        finally:
            await qjm.close()
    try:
        return asyncio.run(main())
    except InvariantViolation:
        raise
    except QJournalError as e:
        print(f"{what}: {_reason(e)}", file=sys.stderr, flush=True)
        return 1
    except BrokenPipeError:
        return 1


def _cmd_format(args: argparse.Namespace) -> int:
    async def go(qjm: Any, a: argparse.Namespace) -> int:
        nsid = a.namespace_id if a.namespace_id is not None else (uuid.uuid4().int & 0x7FFFFFFF) or 1
        ns = NamespaceInfo(nsid, a.cluster_id or f"CID-{uuid.uuid4()}")
        await qjm.format(ns, force=a.force)
        print(f"formatted {qjm.jid} on {len(qjm.loggers)} JournalNodes "
              f"(namespace {ns.namespace_id}, cluster {ns.cluster_id})", flush=True)
        return 0
    return _run(args, go)


def _cmd_write(args: argparse.Namespace) -> int:
    if args.count < 0 or args.size < 0 or args.batch < 1 or args.roll_every < 0:
        print("qjournal log write: --count and --size must be >= 0, --batch >= 1, --roll-every >= 0",
              file=sys.stderr)
        return 2

    async def go(qjm: Any, a: argparse.Namespace) -> int:
        await qjm.recover_unfinalized_segments()
        segs = await qjm.get_manifest(0)
        first = (segs[-1].end_txid + 1) if segs else 1
        epoch = qjm.epoch
        out = sys.stdout
        print(f"writer epoch {epoch}, starting at txid {first}", file=sys.stderr, flush=True)
        txid = first
        end = first + a.count - 1
        while txid <= end:
            seg_last = end if not a.roll_every else min(end, txid + a.roll_every - 1)
            seg_first = txid
            stream = await qjm.start_log_segment(seg_first)
            while txid <= seg_last:
                k = min(a.batch, seg_last - txid + 1)
                for t in range(txid, txid + k):
                    stream.write(t, record_body(epoch, t, a.size))
                stream.mark()
                await stream.sync()
                txid += k
                out.write(f"acked {txid - 1}\n")
                out.flush()
            await qjm.finalize_log_segment(seg_first, seg_last)
        print(f"done: txids {first}-{end} acknowledged and finalized", file=sys.stderr, flush=True)
        return 0
    return _run(args, go)


def _cmd_read(args: argparse.Namespace) -> int:
    async def go(qjm: Any, a: argparse.Namespace) -> int:
        stream = await qjm.open_input(a.from_txid, a.to_txid, in_progress_ok=False)
        out = sys.stdout
        async for rec in stream:
            out.write(json.dumps({"txid": rec.txid, "length": len(rec.body),
                                  "crc32c": f"{crc32c(rec.body):08x}"}) + "\n")
        out.flush()
        return 0
    return _run(args, go)


def _cmd_status(args: argparse.Namespace) -> int:
    async def go(qjm: Any, a: argparse.Namespace) -> int:
        st = await qjm.node_status()
        answered = 0
        for name in sorted(st):
            answered += st[name].answered and st[name].error is None
            print(json.dumps(_status_row(st[name])), flush=True)
        manifests = [st[name].manifest for name in sorted(st) if st[name].manifest is not None]
        total = len(qjm.loggers)
        replicas = finalized_replicas(manifests)
        under = [[s, e, n] for (s, e), n in replicas.items() if n < total]
        print(json.dumps({"finalized_segments": len(replicas), "journalnodes": total,
                          "answered": len(manifests), "under_replicated": under}), flush=True)
        if under:
            print(f"qjournal log status: {len(under)} finalized segment(s) on fewer than all {total} "
                  f"JournalNodes (start, end, copies): {under[:10]}{' ...' if len(under) > 10 else ''}",
                  file=sys.stderr, flush=True)
        if answered < qjm.loggers.majority:
            print(f"qjournal log status: only {answered} of {len(qjm.loggers)} JournalNodes answered "
                  f"(a quorum is {qjm.loggers.majority})", file=sys.stderr, flush=True)
            return 1
        return 0
    return _run(args, go)


def _status_row(st: NodeStatus) -> dict[str, Any]:
    """One JSON line of ``log status``: only what the node answered, and the error if any."""
    row: dict[str, Any] = {"node": st.node, "answered": st.answered}
    if st.state is not None:
        row["last_promised_epoch"] = st.state.last_promised_epoch
    if st.manifest is not None:
        if st.manifest.last_writer_epoch is not None:
            row["last_writer_epoch"] = st.manifest.last_writer_epoch
        row["committed_txid"] = st.manifest.committed_txid
        row["segments"] = [s.to_wire() for s in st.manifest.segments]
    if st.error is not None:
        row["error"] = st.error
    return row
