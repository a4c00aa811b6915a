"""qjournal.journalnode: the JournalNode (HDFS-3077's acceptor) and its storage.

Why a package: the per-journal rules (``journal.Journal``, synchronous, storage
injected), the storage interface and its disk implementation (``storage``),
and the asyncio daemon (``node.JournalNode`` with RPC and the aiohttp server of
``http``) are one role. The daemon module is imported lazily so that the pure
core can be used (by the simulator) without aiohttp.

In-process use::

    node = JournalNode(edits_dir=d, rpc_address=("127.0.0.1", 0), http_address=("127.0.0.1", 0))
    info = await node.start()       # {"rpc": "127.0.0.1:P", "http": "127.0.0.1:Q", "http_url": ...}
    ...
    await node.stop()

or on a memory network without HTTP (segments served through ``mem://<name>``)::

    node = JournalNode(edits_dir=d, network=net, name="jn1", http=False)
"""

from qjournal.journalnode.journal import AcceptRecoveryPlan, Journal
from qjournal.journalnode.storage import DiskJournalStorage, JournalStorage

__all__ = ["Journal", "AcceptRecoveryPlan", "JournalStorage", "DiskJournalStorage", "JournalNode"]


def __getattr__(name: str):
    if name == "JournalNode":
        from qjournal.journalnode.node import JournalNode
        return JournalNode
    raise AttributeError(name)
