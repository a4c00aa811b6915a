"""NNStorage: where the NameNode keeps its state, and the journals it writes.

Why a module: the daemon, the offline commands (``format.py``), the HA
health check and the status pages all need the same answers (which name dir,
which edits dirs, which namespace, which journals) and none of them should
work them out on its own. HDFS's ``NNStorage`` plus the journal opening of
``FSEditLog.initJournals`` and the retention of ``NNStorageRetentionManager``.

Layout:

* ``<name dir>/current/NNVERSION``: JSON of the ``NamespaceInfo`` (namespace
  id, cluster id, layout version), written once at format (atomically); its
  absence means "not formatted".
* ``<name dir>/current/fsimage_<txid>`` and ``.crc``: the images (``image.py``).
* The local edits dirs (``dfs.namenode.edits.dir``, default the name dir) are
  FileJournals; the shared edits dir (``dfs.namenode.shared.edits.dir``,
  ``qjournal://`` or ``file://``) is the *required* journal of an HA pair.
  Writes go to a ``JournalSet`` of all of them.

Invariants:

1. :func:`open_journals` returns *fresh* journal objects: a quorum journal
   takes a new epoch once per object, so every attempt to become the writer
   opens its own (``QuorumJournalManager`` contract).
2. A journal set always has a required member: the shared journal, or the
   only journal there is.
3. Retention never removes the newest image, nor an edit that the oldest kept
   image (minus ``num.extra.edits.retained`` txns) still needs; edits are purged
   only through the writer's journal set (the active).
"""

from __future__ import annotations

import asyncio
import logging
import os

from qjournal.config import Configuration
from qjournal.errors import InvalidRequestError, QJournalError
from qjournal.journalmanager.base import JournalManager
from qjournal.journalmanager.file import local_path_of_uri
from qjournal.journalmanager.journalset import JournalSet
from qjournal.namenode.journal_registry import JournalOpener, open_journal
from qjournal.namenode import image as img
from qjournal.protocol.messages import NamespaceInfo
from qjournal.util.storage_dir import read_version, write_version

log = logging.getLogger(__name__)

NN_VERSION_FILE = "NNVERSION"


def _uri_to_path(uri: str, key: str) -> str:
    try:
        return local_path_of_uri(uri)
    except ValueError:
        raise InvalidRequestError(f"configuration key {key}: {uri!r} is not an absolute path or file:// URI",
                                  key=key) from None


def name_dir_of(conf: Configuration) -> str:
    """The first ``dfs.namenode.name.dir`` as a path.

    Raises:
        InvalidRequestError: the key is empty or not a local path.
    """
    dirs = conf.get_list("dfs.namenode.name.dir")
    if not dirs:
        raise InvalidRequestError("configuration key dfs.namenode.name.dir is empty",
                                  key="dfs.namenode.name.dir")
    return _uri_to_path(dirs[0], "dfs.namenode.name.dir")


def local_edits_uris(conf: Configuration) -> list[str]:
    """``dfs.namenode.edits.dir`` as file:// URIs (bare paths accepted).

    Raises:
        InvalidRequestError: a bare entry is not an absolute path.
    """
    out = []
    for u in conf.get_list("dfs.namenode.edits.dir"):
        out.append(u if "://" in u else f"file://{_uri_to_path(u, 'dfs.namenode.edits.dir')}")
    return out


def local_edits_dirs(conf: Configuration) -> list[str]:
    """``dfs.namenode.edits.dir`` as local paths (the resource check watches their free space).

    Raises:
        InvalidRequestError: an entry is not a local path.
    """
    return [_uri_to_path(u, "dfs.namenode.edits.dir") for u in local_edits_uris(conf)]


def read_nn_version(name_dir: str) -> NamespaceInfo | None:
    """The namespace of a name directory (``current/NNVERSION``), or None before the format.

    Raises:
        JournalError: unreadable or malformed (the file named).
    """
    return read_version(os.path.join(img.current_dir(name_dir), NN_VERSION_FILE))


def write_nn_version(name_dir: str, ns_info: NamespaceInfo) -> None:
    """Record the namespace of a name directory, durably (the commit point of a format)."""
    os.makedirs(img.current_dir(name_dir), exist_ok=True)
    write_version(os.path.join(img.current_dir(name_dir), NN_VERSION_FILE), ns_info, "NAME_NODE")


def open_journals(conf: Configuration, ns_info: NamespaceInfo | None,
                  opener: JournalOpener = open_journal) -> tuple[list[JournalManager], JournalManager | None]:
    """Fresh journal objects (invariant 1): the local FileJournals and the shared (required) journal.

    Args:
        conf: the configuration (``dfs.namenode.edits.dir``, ``dfs.namenode.shared.edits.dir``).
        ns_info: the namespace, given to the shared journal.
        opener: opens a journal by URI (the registry's :func:`open_journal` by default).

    Returns:
        ``(local, shared)``; ``shared`` is None without ``dfs.namenode.shared.edits.dir``.

    Raises:
        UnknownSchemeError, InvalidRequestError: a journal URI that cannot be opened.
    """
    local = [opener(u, conf) for u in local_edits_uris(conf)]
    shared_uri = conf.get("dfs.namenode.shared.edits.dir")
    shared = None
    if shared_uri:
        shared = opener(shared_uri, conf)
        shared.required = True
        if ns_info is not None and hasattr(shared, "ns_info"):
            shared.ns_info = ns_info  # type: ignore[attr-defined]
    return local, shared


def make_journal_set(local: list[JournalManager], shared: JournalManager | None) -> JournalManager:
    """The writer's ``JournalSet`` over ``local`` and ``shared`` (invariant 2)."""
    members = list(local) + ([shared] if shared is not None else [])
    if len(members) == 1:
        members[0].required = True
    return JournalSet(members)


async def purge_old_storage(conf: Configuration, name_dir: str, journals: JournalManager | None) -> None:
    """Retention (invariant 3): keep ``dfs.namenode.num.checkpoints.retained`` images and the edits
    they and ``dfs.namenode.num.extra.edits.retained`` more txns need.

    Args:
        conf: read at each call (the keys may change at run time).
        name_dir: where the images are.
        journals: the writer's journal set (the active), or None to purge images only.
    """
    keep = max(1, int(conf.get_int("dfs.namenode.num.checkpoints.retained") or 1))
    extra = max(0, int(conf.get_int("dfs.namenode.num.extra.edits.retained") or 0))
    await asyncio.to_thread(img.purge_images, name_dir, keep)
    images = img.list_images(name_dir)
    if not images:
        return
    min_txid = images[0][0] + 1 - extra
    if min_txid > 1 and journals is not None:
        try:
            await journals.purge_logs_older_than(min_txid)
        except QJournalError as e:
            log.warning("purging edits older than %d failed: %s", min_txid, e)


def _stream_description(journal: object, stream: object) -> str:
    """Hadoop-like description of one journal's output stream (``NameJournalStatus``)."""
    if stream is None:
        return ""
    loggers = getattr(getattr(journal, "loggers", None), "loggers", None)
    seg = getattr(stream, "segment_txid", None)
    head = f"Writing segment beginning at txid {seg}." if seg is not None else "open for write"
    if not loggers:
        return head
    parts = []
    for lg in loggers:
        extra = ", out of sync" if getattr(lg, "out_of_sync", False) else ""
        parts.append(f"{lg.name} (Written txid {getattr(lg, 'highest_acked_txid', '?')}{extra})")
    return f"{head} " + ", ".join(parts)


def journal_node_statuses(journal_set: JournalManager | None, shared_reader: JournalManager | None) -> list[dict]:
    """Each JournalNode of the quorum journals as this NameNode's loggers see them (Hadoop's per-logger
    ``QJMJournalNodeStatus``): the writer's view while active (acknowledged txid, lag behind the
    committed txid, queued bytes, out of sync), else the reader's loggers with only their names and
    HTTP addresses.

    Returns:
        ``[{"journal", "name", "http_url", "writer", "written_txid", "lag_txns", "queued_bytes",
        "out_of_sync"}]`` sorted by journal URI and node name; the writer's numbers are None on a reader.
    """
    out: list[dict] = []
    members = getattr(journal_set, "members", None)
    journals = [(m.journal, True) for m in members] if members is not None else []
    if not journals and shared_reader is not None:
        journals = [(shared_reader, False)]
    for journal, writer in journals:
        loggers = getattr(getattr(journal, "loggers", None), "loggers", None)
        for lg in loggers or ():
            out.append({"journal": str(getattr(journal, "uri", "") or repr(journal)), "name": lg.name,
                        "http_url": lg.http_url or "", "writer": writer,
                        "written_txid": lg.highest_acked_txid if writer else None,
                        "lag_txns": lg.lag_txns if writer else None,
                        "queued_bytes": lg.queued_bytes if writer else None,
                        "out_of_sync": bool(lg.out_of_sync) if writer else None})
    return sorted(out, key=lambda d: (d["journal"], d["name"]))


def journal_statuses(journal_set: JournalManager | None, shared_reader: JournalManager | None,
                     conf: Configuration) -> list[dict]:
    """A NameNode's journals as Hadoop's ``NameJournalStatus`` entries (status page, ``dfsadmin -report``).

    Args:
        journal_set: the writer's journal set (the active), or None.
        shared_reader: the shared journal being tailed (a standby), or None.
        conf: for the local edits dirs of a NameNode that is not writing.

    Returns:
        ``[{"manager", "stream", "disabled", "required"}]`` (strings, as Hadoop): the writer's
        set when active, else the shared journal being tailed and the local edits dirs.
    """
    def flag(v: object) -> str:
        return "true" if v else "false"

    out: list[dict] = []
    members = getattr(journal_set, "members", None)
    if members is not None:
        for m in members:
            out.append({"manager": str(getattr(m.journal, "uri", "") or repr(m.journal)),
                        "stream": (f"failed: {m.failure}" if m.failed
                                   else _stream_description(m.journal, m.stream)),
                        "disabled": flag(m.failed), "required": flag(m.journal.required)})
        return out
    if shared_reader is not None:
        out.append({"manager": str(getattr(shared_reader, "uri", "") or repr(shared_reader)),
                    "stream": "open for read", "disabled": "false", "required": "true"})
    try:
        local = local_edits_uris(conf)
    except QJournalError:  # a status shows what it can
        local = []
    for uri in local:
        out.append({"manager": uri, "stream": "", "disabled": "false", "required": "false"})
    return out


__all__ = ["NN_VERSION_FILE", "name_dir_of", "local_edits_uris", "local_edits_dirs", "read_nn_version",
           "write_nn_version", "open_journals", "make_journal_set", "purge_old_storage", "journal_statuses",
           "journal_node_statuses"]
