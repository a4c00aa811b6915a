"""Where a JournalNode keeps a journal on disk: the one statement of the directory layout.

Why a module: the JournalNode's storage (real and simulated), the Spark pipeline reading
journal directories, the edit-log generator, the chaos harness and the simulator's end-state
reader all need the same paths; each computing ``<dir>/<jid>/current`` itself is how one of
them drifts. Pure string work (``posixpath``), no file system.

Layout (reference §2.1; ``<edits dir>`` is ``dfs.journalnode.edits.dir``, or
``dfs.journalnode.edits.dir.<jid>`` for that journal)::

    <edits dir>/<jid>/in_use.lock                 the storage lock (util/storage_dir.py)
    <edits dir>/<jid>/current/VERSION             namespace id, cluster id, layout version
                             /last-promised-epoch  the Paxos promise (durable before any reply)
                             /last-writer-epoch    the epoch that last started a segment
                             /committed-txid       20 bytes: txid, epoch that reported it, CRC32C
                                                   (best effort, no fsync; journal.py says why)
                             /purged-below-txid    the highest purge bound (the syncer never re-fetches below)
                             /sync-rejoin-txid     while a node formatted from its peers may not vote
                             /edits_inprogress_<start>, edits_<start>-<end>   segments (protocol/segment.py)
                             /paxos/<segment start>                           accepted recovery values

File names inside ``current/`` are relative (``paxos/<start>`` has one subdirectory).
"""

from __future__ import annotations

import posixpath

__all__ = ["CURRENT_DIR", "PAXOS_DIR", "VERSION_FILE", "LAST_PROMISED_EPOCH", "LAST_WRITER_EPOCH",
           "COMMITTED_TXID", "PURGED_BELOW", "REJOIN_TXID", "journal_dir", "current_dir", "paxos_name"]

#: the directory of a journal's live files, under ``<edits dir>/<jid>``
CURRENT_DIR = "current"
#: subdirectory of ``current/`` holding one paxos file per segment under recovery
PAXOS_DIR = "paxos"
VERSION_FILE = "VERSION"
LAST_PROMISED_EPOCH = "last-promised-epoch"
LAST_WRITER_EPOCH = "last-writer-epoch"
COMMITTED_TXID = "committed-txid"
#: the highest ``min_txid_to_keep`` of a purge: the syncer never re-fetches below it
PURGED_BELOW = "purged-below-txid"
#: present while a node formatted from its peers has not caught up (it may not vote)
REJOIN_TXID = "sync-rejoin-txid"


def journal_dir(edits_dir: str, jid: str) -> str:
    """``<edits dir>/<jid>``: the journal's directory (its lock lives here)."""
    return posixpath.join(edits_dir, jid)


def current_dir(edits_dir: str, jid: str) -> str:
    """``<edits dir>/<jid>/current``: the journal's segments and durable fields."""
    return posixpath.join(edits_dir, jid, CURRENT_DIR)


def paxos_name(segment_txid: int) -> str:
    """The name, relative to ``current/``, of the paxos file of the segment starting at ``segment_txid``."""
    return f"{PAXOS_DIR}/{int(segment_txid)}"
