"""Table tests of the JournalNode request gate (protocol/jn_rules.py)."""

import pytest

from qjournal.errors import EpochError, InvalidRequestError, InvariantViolation, JournalOutOfSyncError
from qjournal.protocol.jn_rules import (MAX_JID_LENGTH, check_new_epoch, check_request,
                                        check_write_request, validate_jid)
from qjournal.protocol.messages import RequestInfo
from qjournal.protocol.segment import INVALID_TXID as X


def req(epoch, serial, committed=X):
    return RequestInfo("j", epoch, serial, committed)


# promised, serial, committed, request -> (adopt, serial, committed, changed) or error type
CHECK_TABLE = [
    ("same epoch, next serial", 3, 5, 10, req(3, 6), (False, 6, 10, False)),
    ("same epoch, serial jump", 3, 5, 10, req(3, 60), (False, 60, 10, False)),
    ("same epoch, equal serial", 3, 5, 10, req(3, 5), JournalOutOfSyncError),
    ("same epoch, older serial", 3, 5, 10, req(3, 4), JournalOutOfSyncError),
    ("older epoch", 3, 5, 10, req(2, 100), EpochError),
    ("older epoch even with committed", 3, 5, 10, req(2, 100, 50), EpochError),
    ("newer epoch adopts, serial reset", 3, 5, 10, req(4, 0), (True, 0, 10, False)),
    ("newer epoch low serial ok", 3, 99, 10, req(4, 1), (True, 1, 10, False)),
    ("newer epoch negative serial", 3, 5, 10, req(4, -1), JournalOutOfSyncError),
    ("committed advances", 3, 5, 10, req(3, 6, 12), (False, 6, 12, True)),
    ("committed equal", 3, 5, 10, req(3, 6, 10), (False, 6, 10, False)),
    ("committed from unknown", 3, 5, X, req(3, 6, 0), (False, 6, 0, True)),
    ("committed backwards", 3, 5, 10, req(3, 6, 9), InvariantViolation),
    ("committed negative", 3, 5, 10, req(3, 6, -2), InvalidRequestError),
    ("fresh node first call", 0, -1, X, req(1, 0), (True, 0, X, False)),
]


@pytest.mark.parametrize("name,promised,serial,committed,r,expect", CHECK_TABLE,
                         ids=[row[0] for row in CHECK_TABLE])
def test_check_request(name, promised, serial, committed, r, expect):
    if isinstance(expect, type):
        with pytest.raises(expect) as ei:
            check_request(promised, serial, committed, r)
        assert "journal j" in str(ei.value)
    else:
        d = check_request(promised, serial, committed, r)
        assert (d.adopt_epoch, d.ipc_serial, d.committed_txid, d.committed_changed) == expect
        assert d.epoch == r.epoch


def test_epoch_error_message_names_epochs():
    with pytest.raises(EpochError, match="IPC's epoch 1 is less than the last promised epoch 3"):
        check_request(3, 0, X, req(1, 1))


# promised, serial, committed, writer epoch, request -> ok serial or error
WRITE_TABLE = [
    ("writer epoch matches", 3, 5, X, 3, req(3, 6), 6),
    ("writer epoch older than request", 3, 5, X, 2, req(3, 6), JournalOutOfSyncError),
    ("request newer than promise, no start", 3, 5, X, 3, req(4, 0), JournalOutOfSyncError),
    ("stale writer fenced first", 3, 5, X, 2, req(2, 6), EpochError),
    ("serial repeats", 3, 5, X, 3, req(3, 5), JournalOutOfSyncError),
]


@pytest.mark.parametrize("name,promised,serial,committed,writer,r,expect", WRITE_TABLE,
                         ids=[row[0] for row in WRITE_TABLE])
def test_check_write_request(name, promised, serial, committed, writer, r, expect):
    if isinstance(expect, type):
        with pytest.raises(expect):
            check_write_request(promised, serial, committed, writer, r)
    else:
        assert check_write_request(promised, serial, committed, writer, r).ipc_serial == expect


@pytest.mark.parametrize("promised,epoch,ok", [(0, 1, True), (3, 4, True), (3, 10, True),
                                               (3, 3, False), (3, 2, False), (0, 0, False)])
def test_check_new_epoch(promised, epoch, ok):
    if ok:
        check_new_epoch("j", promised, epoch)
    else:
        with pytest.raises(EpochError, match=f"Proposed epoch {epoch} <= last promise {promised}"):
            check_new_epoch("j", promised, epoch)


def test_check_new_epoch_negative():
    with pytest.raises(InvalidRequestError):
        check_new_epoch("j", 0, -1)


@pytest.mark.parametrize("jid", ["j", "test-journal", "ns1.journal_2", "A" * MAX_JID_LENGTH])
def test_valid_jids(jid):
    assert validate_jid(jid) == jid


@pytest.mark.parametrize("jid,word", [("", "empty"), ("../x", "separator"), ("a/b", "separator"),
                                      (".hidden", "starts with '.'"), ("..", "starts with '.'"),
                                      ("-x", "characters"), ("a b", "characters"), ("a\x00", "characters"),
                                      ("é", "characters"), ("A" * (MAX_JID_LENGTH + 1), "limit"),
                                      (None, "string"), (5, "string")])
def test_invalid_jids(jid, word):
    with pytest.raises(InvalidRequestError, match=word):
        validate_jid(jid)
