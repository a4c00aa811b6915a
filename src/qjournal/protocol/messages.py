"""Wire messages of QJournalProtocol, shared by the JournalNode and the quorum client.

Why one module: the writer (``client/``) and the acceptor (``journalnode/``)
must agree on every field of every RPC argument and result. Each message is a
frozen dataclass with ``to_wire()`` (plain msgpack-able values: dicts, lists,
ints, strings, bools, None) and ``from_wire()``; the RPC table in
docs/architecture.md names the wire shapes.

This module is pure: no I/O. ``from_wire`` never trusts its input. A value of
the wrong shape or type raises :class:`InvalidRequestError` naming the message
and field, so a malformed request is answered with an error and never kills a
daemon.

Invariants:

1. ``X.from_wire(x.to_wire()) == x`` for every message ``x``.
2. ``from_wire`` raises only :class:`InvalidRequestError` on bad input.
3. "No txid" is :data:`INVALID_TXID` (-12345) in ``RequestInfo`` and ``None`` in
   optional result fields, as in HDFS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from qjournal.errors import InvalidRequestError
from qjournal.protocol.segment import INVALID_TXID, LAYOUT_VERSION

__all__ = [
    "NamespaceInfo", "parse_storage_info", "RequestInfo", "SegmentState", "PersistedPaxosData",
    "PrepareRecoveryResponse", "NewEpochResponse", "JournalState", "Manifest", "JournaledEdits",
    "INVALID_TXID",
]


# --- field helpers ----------------------------------------------------------------

def _get(d: Any, key: str, where: str) -> Any:
    if not isinstance(d, dict):
        raise InvalidRequestError(f"{where}: expected a map, got {type(d).__name__}",
                                  where=where)
    if key not in d:
        raise InvalidRequestError(f"{where}: missing field {key!r}", where=where, field=key)
    return d[key]


def wire_int(v: Any, where: str, name: str) -> int:
    """Check that ``v`` is an int (not a bool) and return it.

    Raises:
        InvalidRequestError: naming ``where`` and ``name``.
    """
    if isinstance(v, bool) or not isinstance(v, int):
        raise InvalidRequestError(f"{where}: field {name!r} must be an integer, got {v!r:.60}",
                                  where=where, field=name)
    return v


def wire_opt_int(v: Any, where: str, name: str) -> int | None:
    """Like :func:`wire_int` but accepts None."""
    return None if v is None else wire_int(v, where, name)


def wire_bool(v: Any, where: str, name: str) -> bool:
    """Check that ``v`` is a bool and return it.

    Raises:
        InvalidRequestError: naming ``where`` and ``name``.
    """
    if not isinstance(v, bool):
        raise InvalidRequestError(f"{where}: field {name!r} must be a boolean, got {v!r:.60}",
                                  where=where, field=name)
    return v


def wire_str(v: Any, where: str, name: str) -> str:
    """Check that ``v`` is a str and return it.

    Raises:
        InvalidRequestError: naming ``where`` and ``name``.
    """
    if not isinstance(v, str):
        raise InvalidRequestError(f"{where}: field {name!r} must be a string, got {v!r:.60}",
                                  where=where, field=name)
    return v


# --- messages ------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """Identity of the namespace a journal belongs to (checked on every writer).

    It travels as the ``ns_info`` argument of ``format`` and ``new_epoch`` and is
    stored in every storage directory's VERSION file (:mod:`qjournal.util.storage_dir`).

    Attributes:
        namespace_id: random id chosen at ``namenode -format``.
        cluster_id: human-readable cluster id.
        layout_version: layout of the edit records.
    """

    namespace_id: int
    cluster_id: str
    layout_version: int = LAYOUT_VERSION

    @property
    def storage_info(self) -> str:
        """The ``storageInfo`` parameter of ``/getJournal``: ``NSID:CLUSTERID`` (see
        :func:`parse_storage_info`)."""
        return f"{self.namespace_id}:{self.cluster_id}"

    def to_wire(self) -> dict:
        return {"namespace_id": self.namespace_id, "cluster_id": self.cluster_id,
                "layout_version": self.layout_version}

    @classmethod
    def from_wire(cls, d: Any) -> "NamespaceInfo":
        """Raises: InvalidRequestError on a malformed map."""
        w = "NamespaceInfo"
        lv = d.get("layout_version", LAYOUT_VERSION) if isinstance(d, dict) else None
        return cls(wire_int(_get(d, "namespace_id", w), w, "namespace_id"),
                   wire_str(_get(d, "cluster_id", w), w, "cluster_id"),
                   wire_int(lv, w, "layout_version"))


def parse_storage_info(text: str) -> tuple[int, str]:
    """``NSID:CLUSTERID`` (ours) or Hadoop's ``LV:NSID:CTIME:CLUSTERID`` -> (namespace id, cluster id).

    The reader of a segment names the namespace it expects in the ``storageInfo``
    parameter of ``/getJournal``; the JournalNode refuses a segment of another one.

    Raises:
        InvalidRequestError: anything else.
    """
    parts = text.split(":")
    try:
        if len(parts) == 2:
            return int(parts[0]), parts[1]
        if len(parts) == 4:
            return int(parts[1]), parts[3]
    except ValueError:
        pass
    raise InvalidRequestError(f"bad storageInfo {text[:80]!r}: expected NSID:CLUSTERID",
                              storage_info=text[:80])


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """The header of every epoch-checked call (HDFS RequestInfoProto).

    Attributes:
        jid: journal id.
        epoch: the writer's epoch.
        ipc_serial: strictly increasing per epoch, per JournalNode channel.
        committed_txid: highest txid the writer knows is on a quorum, or INVALID_TXID.
    """

    jid: str
    epoch: int
    ipc_serial: int
    committed_txid: int = INVALID_TXID

    @property
    def has_committed_txid(self) -> bool:
        return self.committed_txid != INVALID_TXID

    def to_wire(self) -> dict:
        return {"jid": self.jid, "epoch": self.epoch, "ipc_serial": self.ipc_serial,
                "committed_txid": self.committed_txid}

    @classmethod
    def from_wire(cls, d: Any) -> "RequestInfo":
        """Raises: InvalidRequestError on a malformed map."""
        w = "RequestInfo"
        jid = wire_str(_get(d, "jid", w), w, "jid")
        epoch = wire_int(_get(d, "epoch", w), w, "epoch")
        serial = wire_int(_get(d, "ipc_serial", w), w, "ipc_serial")
        committed = d.get("committed_txid", INVALID_TXID)
        committed = INVALID_TXID if committed is None else wire_int(committed, w, "committed_txid")
        if epoch < 0:
            raise InvalidRequestError(f"{w}: journal {jid!r}: negative epoch {epoch}",
                                      jid=jid, epoch=epoch)
        return cls(jid, epoch, serial, committed)


@dataclass(frozen=True, slots=True, order=True)
class SegmentState:
    """A segment's extent (HDFS SegmentStateProto). Wire form ``[start, end, in_progress]``,
    or ``[start, end, in_progress, digest]`` when the content digest is known.

    For an in-progress segment ``end_txid`` is the highest txid written so far.

    ``digest`` is the CRC32C of the segment's record bytes from ``start_txid``
    through ``end_txid`` (header excluded), as reported by ``prepare_recovery``
    (seed 000 §2.8 sends an md5 of the segment with its length). A JournalNode
    asked to accept a state compares it with its own copy, so a copy of the
    same length but other contents (written by another writer) is replaced,
    not kept. It takes no part in equality or ordering; None means unknown.
    """

    start_txid: int
    end_txid: int
    in_progress: bool
    digest: int | None = field(default=None, compare=False)

    @property
    def num_txns(self) -> int:
        return self.end_txid - self.start_txid + 1

    def to_wire(self) -> list:
        if self.digest is None:
            return [self.start_txid, self.end_txid, self.in_progress]
        return [self.start_txid, self.end_txid, self.in_progress, self.digest]

    @classmethod
    def from_wire(cls, w: Any) -> "SegmentState":
        """Accepts ``[s, e, ip]``, ``[s, e, ip, digest]`` or a map with those field names.

        Raises: InvalidRequestError on a malformed value.
        """
        where = "SegmentState"
        if isinstance(w, dict):
            w = [_get(w, "start_txid", where), _get(w, "end_txid", where),
                 _get(w, "in_progress", where), w.get("digest")]
        if not isinstance(w, (list, tuple)) or len(w) not in (3, 4):
            raise InvalidRequestError(f"{where}: expected [start, end, in_progress(, digest)], got {w!r:.80}",
                                      where=where)
        digest = wire_opt_int(w[3], where, "digest") if len(w) == 4 else None
        if digest is not None and not 0 <= digest <= 0xFFFFFFFF:
            raise InvalidRequestError(f"{where}: digest {digest} is not a CRC32C", where=where)
        return cls(wire_int(w[0], where, "start_txid"), wire_int(w[1], where, "end_txid"),
                   wire_bool(w[2], where, "in_progress"), digest)

    def __str__(self) -> str:
        d = "" if self.digest is None else f" crc {self.digest:08x}"
        return f"[{self.start_txid}-{self.end_txid}{' (in-progress)' if self.in_progress else ''}{d}]"


@dataclass(frozen=True, slots=True)
class PersistedPaxosData:
    """What a JournalNode stores in ``paxos/<segment start>`` (HDFS PersistedRecoveryPaxosData).

    It exists because accept-recovery is Paxos phase 2: the acceptor must
    remember, durably, which value (segment state) it accepted in which epoch,
    so a later prepare-recovery reports it. Written by atomic replace; the write
    is the commit point of ``accept_recovery``.
    """

    segment_state: SegmentState
    accepted_in_epoch: int

    def to_wire(self) -> dict:
        return {"segment_state": self.segment_state.to_wire(),
                "accepted_in_epoch": self.accepted_in_epoch}

    @classmethod
    def from_wire(cls, d: Any) -> "PersistedPaxosData":
        """Raises: InvalidRequestError on a malformed map."""
        w = "PersistedPaxosData"
        return cls(SegmentState.from_wire(_get(d, "segment_state", w)),
                   wire_int(_get(d, "accepted_in_epoch", w), w, "accepted_in_epoch"))

    def to_bytes(self) -> bytes:
        """On-disk form: one line of JSON (human readable, parsed back by :meth:`from_bytes`)."""
        return (json.dumps(self.to_wire(), sort_keys=True) + "\n").encode("ascii")

    @classmethod
    def from_bytes(cls, raw: bytes, where: str = "paxos data") -> "PersistedPaxosData":
        """Raises: InvalidRequestError naming ``where`` when the bytes do not parse."""
        try:
            d = json.loads(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as e:
            raise InvalidRequestError(f"{where}: unreadable paxos data: {e}", where=where) from e
        return cls.from_wire(d)


@dataclass(frozen=True, slots=True)
class PrepareRecoveryResponse:
    """Result of ``prepare_recovery`` (Paxos phase 1b).

    Attributes:
        segment_state: the node's view of the segment (accepted value if any,
            else what is on disk), None when it has no such segment.
        accepted_in_epoch: the epoch in which ``segment_state`` was accepted, or
            None when it was not set by an accept-recovery.
        last_writer_epoch: the epoch of the last writer that started a segment here.
        last_committed_txid: the node's committed txid, None when unknown.
    """

    segment_state: SegmentState | None
    accepted_in_epoch: int | None
    last_writer_epoch: int
    last_committed_txid: int | None = None

    def to_wire(self) -> dict:
        return {"segment_state": None if self.segment_state is None else self.segment_state.to_wire(),
                "accepted_in_epoch": self.accepted_in_epoch,
                "last_writer_epoch": self.last_writer_epoch,
                "last_committed_txid": self.last_committed_txid}

    @classmethod
    def from_wire(cls, d: Any) -> "PrepareRecoveryResponse":
        """Raises: InvalidRequestError on a malformed map."""
        w = "PrepareRecoveryResponse"
        seg = _get(d, "segment_state", w)
        committed = wire_opt_int(d.get("last_committed_txid"), w, "last_committed_txid")
        if committed == INVALID_TXID:
            committed = None
        return cls(None if seg is None else SegmentState.from_wire(seg),
                   wire_opt_int(d.get("accepted_in_epoch"), w, "accepted_in_epoch"),
                   wire_int(_get(d, "last_writer_epoch", w), w, "last_writer_epoch"),
                   committed)


@dataclass(frozen=True, slots=True)
class NewEpochResponse:
    """Result of ``new_epoch``: start txid of the newest segment holding a txn, or None."""

    last_segment_txid: int | None

    def to_wire(self) -> dict:
        return {"last_segment_txid": self.last_segment_txid}

    @classmethod
    def from_wire(cls, d: Any) -> "NewEpochResponse":
        """Raises: InvalidRequestError on a malformed map."""
        w = "NewEpochResponse"
        return cls(wire_opt_int(_get(d, "last_segment_txid", w), w, "last_segment_txid"))


@dataclass(frozen=True, slots=True)
class JournalState:
    """Result of ``get_journal_state``: the promise, where to download segments, the namespace.

    Attributes:
        last_promised_epoch: the node's durable promise (0 on a fresh node).
        http_port: port of the node's HTTP server (0 when it has none).
        http_url: base URL of that server, e.g. ``http://127.0.0.1:8480`` ("" when none).
        ns_info: the namespace the journal was formatted for, None when it is not
            formatted (a writer started without one learns it from here).
    """

    last_promised_epoch: int
    http_port: int = 0
    http_url: str = ""
    ns_info: NamespaceInfo | None = None

    def to_wire(self) -> dict:
        return {"last_promised_epoch": self.last_promised_epoch, "http_port": self.http_port,
                "http_url": self.http_url,
                "ns_info": None if self.ns_info is None else self.ns_info.to_wire()}

    @classmethod
    def from_wire(cls, d: Any) -> "JournalState":
        """Raises: InvalidRequestError on a malformed map."""
        w = "JournalState"
        promised = wire_int(_get(d, "last_promised_epoch", w), w, "last_promised_epoch")
        ns = d.get("ns_info")
        return cls(promised,
                   wire_int(d.get("http_port", 0) or 0, w, "http_port"),
                   wire_str(d.get("http_url", "") or "", w, "http_url"),
                   None if ns is None else NamespaceInfo.from_wire(ns))


@dataclass(frozen=True, slots=True)
class Manifest:
    """Result of ``get_edit_log_manifest``: segments sorted by start, and the committed txid.

    ``committed_txid`` is INVALID_TXID when the node does not know it.
    ``last_writer_epoch`` is the epoch of the last writer that started a segment
    on the node (the reader takes in-progress copies only from the newest
    writer's nodes), None when the node does not report it; it is on the wire
    only when known. ``committed_epoch`` is the epoch of the writer that reported
    ``committed_txid`` (a reader cuts an in-progress copy only at a committed txid
    its own writer reported), None when not reported.
    """

    segments: tuple[SegmentState, ...] = field(default_factory=tuple)
    committed_txid: int = INVALID_TXID
    last_writer_epoch: int | None = None
    committed_epoch: int | None = None

    def to_wire(self) -> dict:
        out: dict[str, Any] = {"segments": [s.to_wire() for s in self.segments],
                               "committed_txid": self.committed_txid}
        if self.last_writer_epoch is not None:
            out["last_writer_epoch"] = self.last_writer_epoch
        if self.committed_epoch is not None:
            out["committed_epoch"] = self.committed_epoch
        return out

    @classmethod
    def from_wire(cls, d: Any) -> "Manifest":
        """Raises: InvalidRequestError on a malformed map."""
        w = "Manifest"
        segs = _get(d, "segments", w)
        if not isinstance(segs, (list, tuple)):
            raise InvalidRequestError(f"{w}: 'segments' must be a list", where=w)
        committed = d.get("committed_txid", INVALID_TXID)
        committed = INVALID_TXID if committed is None else wire_int(committed, w, "committed_txid")
        return cls(tuple(SegmentState.from_wire(s) for s in segs), committed,
                   wire_opt_int(d.get("last_writer_epoch"), w, "last_writer_epoch"),
                   wire_opt_int(d.get("committed_epoch"), w, "committed_epoch"))


@dataclass(frozen=True, slots=True)
class JournaledEdits:
    """Result of ``get_journaled_edits`` (HDFS-13150 GetJournaledEditsResponse).

    ``records`` holds ``num_txns`` framed records (``segment`` format, no segment
    header) with consecutive txids from ``first_txid``; every one of them is known
    committed by the answering node (see ``journalnode/edit_cache.py``).
    ``num_txns`` 0 means the node knows no committed edit at or after the asked
    txid. ``committed_txid`` and ``writer_epoch`` (the epoch of the writer whose
    edits the cache holds) are for the reader's checks and for diagnostics.
    """

    first_txid: int
    num_txns: int
    records: bytes
    layout_version: int = LAYOUT_VERSION
    committed_txid: int = INVALID_TXID
    writer_epoch: int = 0

    @property
    def last_txid(self) -> int:
        """The last txid returned (``first_txid - 1`` when none)."""
        return self.first_txid + self.num_txns - 1

    def to_wire(self) -> dict:
        return {"first_txid": self.first_txid, "num_txns": self.num_txns, "records": self.records,
                "layout_version": self.layout_version, "committed_txid": self.committed_txid,
                "writer_epoch": self.writer_epoch}

    @classmethod
    def from_wire(cls, d: Any) -> "JournaledEdits":
        """Raises: InvalidRequestError on a malformed map."""
        w = "JournaledEdits"
        records = _get(d, "records", w)
        if not isinstance(records, (bytes, bytearray, memoryview)):
            raise InvalidRequestError(f"{w}: 'records' must be bytes, got {type(records).__name__}",
                                      where=w)
        n = wire_int(_get(d, "num_txns", w), w, "num_txns")
        if n < 0 or (n == 0) != (len(records) == 0):
            raise InvalidRequestError(f"{w}: {n} txns in {len(records)} bytes", where=w)
        return cls(wire_int(_get(d, "first_txid", w), w, "first_txid"), n, bytes(records),
                   wire_int(d.get("layout_version", LAYOUT_VERSION), w, "layout_version"),
                   wire_int(d.get("committed_txid", INVALID_TXID), w, "committed_txid"),
                   wire_int(d.get("writer_epoch", 0), w, "writer_epoch"))
