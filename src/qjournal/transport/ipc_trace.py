"""IPC tracing: one log line per RPC call and per answer, on both ends, as seed 000's annotated log shows.

Why: when a quorum write is slow or a recovery takes an unexpected turn, the question is what went over the wire,
to whom, in which epoch, and how long each answer took. HDFS answers it with its IPC layer's TRACE lines ("Call ->
host:port: getJournalState {...}" / "Response <- host:port: getJournalState {lastPromisedEpoch: 0 ...}"); these are
qjournal's. Off by default; ``qjournal.log.levels = qjournal.ipc=TRACE`` (or ``qjournal.ipc.client=TRACE`` /
``qjournal.ipc.server=TRACE``) turns them on in a daemon.

Theory of operation:

* The RPC client (:mod:`qjournal.transport.client`) logs ``Call -> <peer>: <method> <arguments> (<bytes> B)`` when
  it writes a request and ``Response <- <peer>: <method> <result> (<ms> ms)`` (or ``Error <-`` / ``Timeout``) when
  the answer comes; the server (:mod:`qjournal.transport.server`) logs ``Call <- <peer>: ...`` when it dispatches
  one and ``Response -> <peer>: ... (<bytes> B, <ms> ms)`` when it writes the answer. Every client and server
  traces this way, so a quorum client's calls and a JournalNode's answers read as one conversation; the arguments
  say what matters to the journal: the epoch, the IPC serial and the committed txid of a request header, the txid
  range and size of a batch of records.
* Cost when off: each end asks its logger once per call whether TRACE is on (:func:`enabled`), and keeps no
  timestamps; nothing is formatted. ``docs/performance.md`` ("IPC tracing") has the measurement.
* A summary is bounded (:data:`MAX_SUMMARY_CHARS`): a batch of records is its length, never its bytes.
"""

from __future__ import annotations

import logging
from typing import Any

from qjournal.util.logs import TRACE

__all__ = ["CLIENT", "SERVER", "enabled", "describe_args", "describe_result", "MAX_SUMMARY_CHARS"]

CLIENT = logging.getLogger("qjournal.ipc.client")
SERVER = logging.getLogger("qjournal.ipc.server")
#: the longest argument or result summary a line carries
MAX_SUMMARY_CHARS = 300


def enabled(logger: logging.Logger) -> bool:
    """Whether ``logger`` writes TRACE lines (one cached lookup: the only cost when tracing is off)."""
    return logger.isEnabledFor(TRACE)


def _short(v: Any) -> str:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return f"<{len(v)} bytes>"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_short(x)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)) and len(v) > 8:
        return f"[{', '.join(_short(x) for x in v[:8])}, ... {len(v)} items]"
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


def _clip(text: str) -> str:
    return text if len(text) <= MAX_SUMMARY_CHARS else text[:MAX_SUMMARY_CHARS - 3] + "..."


def describe_args(kwargs: dict) -> str:
    """A call's arguments as a trace line shows them: a request header as ``epoch=E ipc=N committed=C``, a batch
    as ``txids=F-L records=<n bytes>``, anything else as a short ``name=value``."""
    parts = []
    req = kwargs.get("req")
    if isinstance(req, dict):
        parts.append(f"jid={req.get('jid')!r} epoch={req.get('epoch')} ipc={req.get('ipc_serial')} "
                     f"committed={req.get('committed_txid')}")
    first, num = kwargs.get("first_txid"), kwargs.get("num_txns")
    txids = isinstance(first, int) and isinstance(num, int)
    if txids:
        parts.append(f"txids={first}-{first + num - 1}")
    for k, v in kwargs.items():
        if (k == "req" and isinstance(req, dict)) or (txids and k in ("first_txid", "num_txns")):
            continue
        parts.append(f"{k}={_short(v)}")
    return _clip(" ".join(parts))


def describe_result(result: Any) -> str:
    """An answer as a trace line shows it (bounded)."""
    return _clip(_short(result)) if result is not None else "{}"
