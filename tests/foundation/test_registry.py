"""Journal URI registry: built-ins, registered schemes, config plugins, entry points, errors."""

from __future__ import annotations

import sys
import types

import pytest

from qjournal.client.qjm import QuorumJournalManager
from qjournal.config import Configuration
from qjournal.errors import JournalError, UnknownSchemeError
from qjournal.namenode import journal_registry as registry
from qjournal.journalmanager.file import FileJournal
from qjournal.journalmanager.journalset import JournalSet

from .helpers import NS, read_all, run, write_segment


def test_file_scheme_and_bare_path(tmp_path):
    j = registry.open_journal(f"file://{tmp_path}/a")
    assert isinstance(j, FileJournal) and j.directory == str(tmp_path / "a")
    j2 = registry.open_journal(str(tmp_path / "b"))
    assert isinstance(j2, FileJournal) and j2.uri == f"file://{tmp_path}/b"


def test_unknown_scheme_lists_known_ones():
    with pytest.raises(UnknownSchemeError, match="'bookkeeper'.*file.*qjournal"):
        registry.open_journal("bookkeeper://zk1/ledgers")
    with pytest.raises(UnknownSchemeError, match="not a URI"):
        registry.open_journal("relative/path")


def test_register_scheme_for_tests(tmp_path):
    made = []

    def factory(uri, conf):
        made.append(uri)
        return FileJournal(str(tmp_path / "mem"), uri=uri)

    registry.register_scheme("mem", factory)
    try:
        j = registry.open_journal("mem://x/y")
        assert made == ["mem://x/y"] and j.uri == "mem://x/y"
        assert "mem" in registry.known_schemes()
    finally:
        registry.unregister_scheme("mem")
    with pytest.raises(UnknownSchemeError):
        registry.open_journal("mem://x/y")


def test_factory_must_return_a_journal():
    registry.register_scheme("bad", lambda uri, conf: object())
    try:
        with pytest.raises(JournalError, match="not a Journal"):
            registry.open_journal("bad://x")
    finally:
        registry.unregister_scheme("bad")


def test_plugin_from_configuration(tmp_path, monkeypatch):
    mod = types.ModuleType("qj_test_plugin")
    mod.make = lambda uri, conf: FileJournal(str(tmp_path / "plug"), uri=uri)
    monkeypatch.setitem(sys.modules, "qj_test_plugin", mod)
    conf = Configuration.load(overrides=["dfs.namenode.edits.journal-plugin.plug=qj_test_plugin:make"])
    assert registry.open_journal("plug://a", conf).uri == "plug://a"
    bad = Configuration.load(overrides=["dfs.namenode.edits.journal-plugin.plug=qj_test_plugin:nope"])
    with pytest.raises(JournalError, match="journal-plugin.plug.*cannot load"):
        registry.open_journal("plug://a", bad)


def test_entry_point_group_is_consulted(monkeypatch, tmp_path):
    class EP:
        name, value = "ext", "x:y"

        def load(self):
            return lambda uri, conf: FileJournal(str(tmp_path / "ext"), uri=uri)

    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: [EP()] if group == "qjournal.journals" else [])
    assert registry.open_journal("ext://a").uri == "ext://a"


def test_qjournal_scheme_opens_the_quorum_client():
    async def go():
        j = registry.open_journal("qjournal://h1:8485;h2:8485;h3:8485/ns1")
        assert isinstance(j, QuorumJournalManager) and j.jid == "ns1"
        await j.close()
    run(go())


def test_open_journal_set_with_required_from_conf(tmp_path):
    async def go():
        a, b = f"file://{tmp_path}/a", f"file://{tmp_path}/b"
        conf = Configuration.load(overrides=[f"dfs.namenode.edits.dir.required={b}"])
        s = registry.open_journal_set([a, b], conf)
        assert isinstance(s, JournalSet) and [m.journal.required for m in s.members] == [False, True]
        await s.format(NS)
        await s.recover_unfinalized_segments()
        await write_segment(s, 1, 5)
        assert await read_all(await s.open_input(1)) == [1, 2, 3, 4, 5]
        await s.close()
    run(go())
