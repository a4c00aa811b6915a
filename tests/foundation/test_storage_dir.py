"""One home for a storage directory's VERSION file and lock (protocol/version_file.py, util/storage_dir.py)."""

import json
import os
import subprocess
import sys

import pytest

from qjournal.errors import JournalError, JournalLockedError
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.version_file import STORAGE_TYPES, decode_version, encode_version
from qjournal.util.storage_dir import StorageLock, read_version, write_version

NS = NamespaceInfo(4242, "CID-a", 1)


@pytest.mark.parametrize("storage_type", STORAGE_TYPES)
def test_round_trip(storage_type):
    raw = encode_version(NS, storage_type)
    assert decode_version(raw, "x/VERSION") == NS
    assert f"storageType={storage_type}".encode() in raw


@pytest.mark.parametrize("raw,needle", [
    (b"clusterID=a\nlayoutVersion=1\n", "no namespaceID"),
    (b"namespaceID=12\n", "no clusterID"),
    (b"namespaceID=twelve\nclusterID=a\n", "twelve"),
    (b"namespaceID=1\nclusterID=a\nlayoutVersion=x\n", "'x'"),
    (b"{not json", "malformed"),
    (b'{"cluster_id": "a"}', "namespace_id"),
    (b"", "no namespaceID"),
])
def test_malformed_content_is_a_journal_error_naming_the_file(raw, needle):
    with pytest.raises(JournalError) as ei:
        decode_version(raw, "/some/dir/current/VERSION")
    assert "/some/dir/current/VERSION" in str(ei.value) and needle in str(ei.value)


def test_a_legacy_json_nnversion_still_decodes():
    legacy = json.dumps(NS.to_wire(), sort_keys=True).encode()
    assert decode_version(legacy, "NNVERSION") == NS


def test_an_unknown_storage_type_is_a_programmer_error():
    with pytest.raises(ValueError):
        encode_version(NS, "SOMETHING")


def test_read_and_write_on_disk(tmp_path):
    path = str(tmp_path / "VERSION")
    assert read_version(path) is None
    write_version(path, NS, "EDITS")
    assert read_version(path) == NS
    assert not [p for p in os.listdir(tmp_path) if p != "VERSION"], "no temporary file left"


def test_a_second_locker_is_refused_naming_the_holder_and_released_on_release(tmp_path):
    a = StorageLock(str(tmp_path / "d"), "journal A")
    a.acquire()
    b = StorageLock(str(tmp_path / "d"), "journal B")
    with pytest.raises(JournalLockedError) as ei:
        b.acquire()
    assert "journal B" in str(ei.value) and f'"pid": {os.getpid()}' in str(ei.value)
    a.release()
    b.acquire()
    assert b.held
    b.release()


def test_another_process_holding_the_lock_is_named(tmp_path):
    d = str(tmp_path / "d")
    code = ("import sys; from qjournal.util.storage_dir import StorageLock;"
            f"l = StorageLock({d!r}); l.acquire(); print('READY', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        with pytest.raises(JournalLockedError) as ei:
            StorageLock(d).acquire()
        assert f'"pid": {proc.pid}' in str(ei.value)
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)
    lock = StorageLock(d)
    lock.acquire()  # the holder exited: its lock went with it
    lock.release()
