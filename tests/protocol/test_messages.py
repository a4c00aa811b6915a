"""Round trips and rejections of the QJournalProtocol wire messages."""

import pytest

from qjournal.errors import InvalidRequestError
from qjournal.protocol.messages import (INVALID_TXID, JournalState, Manifest, NamespaceInfo,
                                        NewEpochResponse, PersistedPaxosData,
                                        PrepareRecoveryResponse, RequestInfo, SegmentState,
                                        parse_storage_info)

SAMPLES = [
    RequestInfo("j1", 3, 7, 100),
    RequestInfo("j1", 0, 0),
    SegmentState(1, 10, True),
    SegmentState(1, 10, True, 0xDEADBEEF),
    PersistedPaxosData(SegmentState(3, 9, True, 7), 2),
    PersistedPaxosData(SegmentState(1, 10, True), 4),
    PrepareRecoveryResponse(SegmentState(5, 9, False), 2, 3, 8),
    PrepareRecoveryResponse(None, None, 0, None),
    NewEpochResponse(None),
    NewEpochResponse(17),
    JournalState(5, 8480, "http://127.0.0.1:8480"),
    JournalState(5, 0, "mem://jn1", NamespaceInfo(12, "c")),
    Manifest((SegmentState(1, 3, False), SegmentState(4, 9, True)), 8),
    Manifest((SegmentState(1, 3, False),), 3, 2),
    Manifest(),
    NamespaceInfo(12, "c", -64),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_round_trip(msg):
    assert type(msg).from_wire(msg.to_wire()) == msg


def test_paxos_bytes_round_trip():
    p = PersistedPaxosData(SegmentState(1, 10, True), 4)
    assert PersistedPaxosData.from_bytes(p.to_bytes()) == p
    with pytest.raises(InvalidRequestError, match="paxos/1"):
        PersistedPaxosData.from_bytes(b"\x00garbage", where="paxos/1")


@pytest.mark.parametrize("cls,wire,word", [
    (RequestInfo, None, "expected a map"),
    (RequestInfo, {"jid": "j", "epoch": 1}, "ipc_serial"),
    (RequestInfo, {"jid": 5, "epoch": 1, "ipc_serial": 1}, "jid"),
    (RequestInfo, {"jid": "j", "epoch": "1", "ipc_serial": 1}, "epoch"),
    (RequestInfo, {"jid": "j", "epoch": True, "ipc_serial": 1}, "epoch"),
    (RequestInfo, {"jid": "j", "epoch": -1, "ipc_serial": 1}, "negative epoch"),
    (SegmentState, [1, 2], "expected"),
    (SegmentState, [1, 2, True, -1], "not a CRC32C"),
    (SegmentState, [1, 2, True, "x"], "digest"),
    (SegmentState, [1, 2, 1], "in_progress"),
    (SegmentState, "x", "expected"),
    (Manifest, {"segments": 3}, "segments"),
    (PrepareRecoveryResponse, {"segment_state": None}, "last_writer_epoch"),
    (JournalState, {"last_promised_epoch": 1, "ns_info": {"namespace_id": 1}}, "cluster_id"),
    (JournalState, [], "expected a map"),
    (Manifest, {"segments": [], "last_writer_epoch": "2"}, "last_writer_epoch"),
    (NewEpochResponse, {}, "last_segment_txid"),
])
def test_malformed_rejected(cls, wire, word):
    with pytest.raises(InvalidRequestError, match=word):
        cls.from_wire(wire)


def test_committed_txid_defaults():
    r = RequestInfo.from_wire({"jid": "j", "epoch": 1, "ipc_serial": 2})
    assert r.committed_txid == INVALID_TXID and not r.has_committed_txid
    r = RequestInfo.from_wire({"jid": "j", "epoch": 1, "ipc_serial": 2, "committed_txid": None})
    assert r.committed_txid == INVALID_TXID


def test_segment_state_digest_on_the_wire_only_when_known():
    assert SegmentState(1, 2, True).to_wire() == [1, 2, True]
    assert SegmentState(1, 2, True, 5).to_wire() == [1, 2, True, 5]
    assert SegmentState.from_wire([1, 2, True, 5]).digest == 5
    assert SegmentState(1, 2, True, 5) == SegmentState(1, 2, True, 6)  # not part of equality


def test_optional_result_fields_absent_from_an_older_answer():
    """A node that does not report ``ns_info`` or ``last_writer_epoch`` answers with None."""
    assert JournalState.from_wire({"last_promised_epoch": 3}) == JournalState(3)
    assert Manifest.from_wire({"segments": [[1, 2, False]]}).last_writer_epoch is None
    assert "last_writer_epoch" not in Manifest().to_wire()  # on the wire only when known


@pytest.mark.parametrize("text,parsed", [("12:c", (12, "c")), ("-64:12:0:c", (12, "c"))])
def test_storage_info(text, parsed):
    assert parse_storage_info(text) == parsed
    assert NamespaceInfo(12, "c").storage_info == "12:c"


@pytest.mark.parametrize("text", ["", "x:c", "1:2:3", "a:b:c:d"])
def test_storage_info_rejected(text):
    with pytest.raises(InvalidRequestError, match="storageInfo"):
        parse_storage_info(text)
