"""In-process JournalNodes over the in-memory network, for the quorum client's tests.

Real ``JournalNode`` objects (the real per-journal rules and a real disk under a temp
directory, fsync off) serve RPC on a ``MemoryNetwork``; segments are served to peers and
readers through ``mem://`` URLs instead of HTTP.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

from qjournal.client.qjm import QuorumJournalManager
from qjournal.client.settings import QJMSettings
from qjournal.config import Configuration
from qjournal.protocol.messages import NamespaceInfo
from qjournal.journalnode.node import JournalNode
from qjournal.transport import MemoryNetwork

NS = NamespaceInfo(4711, "test-cluster")
JID = "testjournal"
_ids = itertools.count(1)

#: short timeouts: in-memory calls answer in microseconds; a dead node fails fast on connect
FAST = QJMSettings().with_overrides(
    start_segment_timeout_ms=5000, prepare_recovery_timeout_ms=5000, accept_recovery_timeout_ms=5000,
    finalize_segment_timeout_ms=5000, select_input_streams_timeout_ms=5000,
    get_journal_state_timeout_ms=5000, new_epoch_timeout_ms=5000, write_txns_timeout_ms=5000,
    operations_timeout_ms=5000, connect_timeout_ms=1000, out_of_sync_heartbeat_interval_ms=3_600_000)


class MemCluster:
    """n JournalNodes named ``c<k>-jn<i>:8485`` under ``root``."""

    def __init__(self, root: str, n: int = 3) -> None:
        k = next(_ids)
        self.root = root
        self.network = MemoryNetwork()
        self.names = [f"c{k}-jn{i}:8485" for i in range(n)]
        self.uri = "qjournal://" + ";".join(self.names) + f"/{JID}"
        self.conf = Configuration({"qjournal.journalnode.fsync": "false"})
        self.nodes: dict[str, JournalNode | None] = {n: None for n in self.names}

    def edits_dir(self, name: str) -> str:
        return os.path.join(self.root, name.split(":")[0])

    async def start(self, *names: str) -> None:
        for name in names or self.names:
            if self.nodes[name] is None:
                jn = JournalNode(self.conf, edits_dir=self.edits_dir(name), network=self.network,
                                 name=name, http=False, threaded=False)
                await jn.start()
                self.nodes[name] = jn

    async def stop(self, *names: str) -> None:
        for name in names or self.names:
            jn = self.nodes[name]
            if jn is not None:
                self.nodes[name] = None
                await jn.stop()

    def journal(self, name: str) -> Any:
        """The running node's per-journal core (the real ``Journal``)."""
        jn = self.nodes[name]
        assert jn is not None, f"{name} is down"
        return jn.service.journals[JID].journal

    def qjm(self, settings: QJMSettings = FAST, ns_info: NamespaceInfo | None = NS, **kw: Any) -> QuorumJournalManager:
        return QuorumJournalManager(self.uri, ns_info=ns_info, network=self.network, settings=settings, **kw)

    async def close(self) -> None:
        await self.stop()
