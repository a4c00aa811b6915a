"""The simulators run the daemon's JournalNode, not a copy (issue 26).

The JournalNode daemon (``journalnode/node.py``), the journal simulator and the whole-cluster simulator
(``sim/journalnodes.py`` under both) serve the QJournalProtocol through the one
:class:`~qjournal.journalnode.service.JournalNodeService` class: each process's RPC server dispatches
to it, and nothing else maps the protocol onto ``Journal``. A spy put on the class's own methods sees
the calls of all three, made on instances of that very class.
"""

from __future__ import annotations

import asyncio
import functools
import inspect

import pytest

from qjournal.config import Configuration
from qjournal.journalnode.node import JournalNode
from qjournal.journalnode.service import JournalNodeService
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.protocols import QJOURNAL
from qjournal.protocol.segment import OP_DATA, encode_record
from qjournal.client.qjm import QuorumJournalManager
from qjournal.sim.ha_workload import HAOptions, run_ha_seed
from qjournal.sim.journalnodes import SimJournalNode
from qjournal.sim.workload import SimOptions, run_seed
from qjournal.transport import MemoryNetwork

NS = NamespaceInfo(99, "one-service")


@pytest.fixture
def spy(monkeypatch):
    """Every ``rpc_<method>`` of JournalNodeService wrapped: ``calls[where]`` collects ``(method, type of self)``."""
    calls: dict[str, set] = {}
    where = {"now": ""}
    for m in QJOURNAL:
        original = getattr(JournalNodeService, f"rpc_{m.name}")

        @functools.wraps(original)
        async def spied(self, *args, _original=original, _name=m.name, **kwargs):
            calls.setdefault(where["now"], set()).add((_name, type(self)))
            return await _original(self, *args, **kwargs)
        assert inspect.iscoroutinefunction(spied)
        monkeypatch.setattr(JournalNodeService, f"rpc_{m.name}", spied)
    return calls, where


async def _daemon_round(tmp_path) -> list[JournalNode]:
    """Three threaded JournalNode daemons on a memory network, a writer's recovery, a segment, a read."""
    net = MemoryNetwork()
    names = [f"jn{i}:8485" for i in range(3)]
    conf = Configuration({"qjournal.journalnode.fsync": "false"})
    nodes = [JournalNode(conf, edits_dir=str(tmp_path / n.split(":")[0]), network=net, name=n, http=False)
             for n in names]
    for jn in nodes:
        await jn.start()
    qjm = QuorumJournalManager("qjournal://" + ";".join(names) + "/daemon", ns_info=NS, network=net)
    try:
        await qjm.format(NS, force=False)
        await qjm.recover_unfinalized_segments()
        out = await qjm.start_log_segment(1, 1)
        for t in range(1, 4):
            out.write_raw(encode_record(t, OP_DATA, b"x%d" % t), t, 1)
            out.mark()
        await out.sync()
        await out.close()
        await qjm.finalize_log_segment(1, 3)
        assert [s.end_txid for s in await qjm.get_manifest(0, in_progress_ok=False)] == [3]
    finally:
        await qjm.close()
    return nodes


def test_the_daemon_and_both_simulators_dispatch_through_the_one_service_class(spy, tmp_path):
    calls, where = spy

    where["now"] = "daemon"
    nodes = asyncio.run(_daemon_round(tmp_path))
    try:
        for jn in nodes:
            assert type(jn.service) is JournalNodeService
            # the RPC server's dispatch lands on the class's own method (the spy), bound to that service
            entry = jn.rpc_server._lookup(QJOURNAL.journal.name)
            assert entry.func.__self__ is jn.service
            assert entry.func.__func__ is JournalNodeService.rpc_journal
    finally:
        async def stop():
            for jn in nodes:
                await jn.stop()
        asyncio.run(stop())

    where["now"] = "journal simulator"
    assert not run_seed(SimOptions(seed=3, steps=80)).failed

    where["now"] = "cluster simulator"
    assert not run_ha_seed(HAOptions(seed=3, steps=6)).failed

    must = {"new_epoch", "start_log_segment", "journal", "finalize_log_segment", "get_edit_log_manifest",
            "get_journal_state"}
    for place in ("daemon", "journal simulator", "cluster simulator"):
        seen = calls.get(place, set())
        assert {cls for _, cls in seen} == {JournalNodeService}, place
        assert must <= {name for name, _ in seen}, (place, sorted(must - {name for name, _ in seen}))


def test_the_simulated_journalnode_is_a_host_not_a_handler():
    """``SimJournalNode`` serves nothing itself: its RPC server's handler is the service of its incarnation."""
    assert not [n for n in dir(SimJournalNode) if n.startswith("rpc_")]
    assert "rpc_protocols" not in vars(SimJournalNode)
