"""The offline storage commands of ``qjournal namenode``: -format, -bootstrapStandby, -initializeSharedEdits.

Why a module: these run once, before a NameNode serves, and create the
storage the daemon later only reads (``storage.py``). HDFS's ``NameNode.format``,
``BootstrapStandby`` and ``NameNode.initializeSharedEdits``.

Theory of operation:

* ``format_namenode``: a new namespace (random namespace id, ``CID-...``
  cluster id unless given), formats the local edits dirs and (by default) the
  shared edits dir, then writes ``NNVERSION`` and an empty image at txid 0.
* ``bootstrap_standby``: asks each other NameNode of the nameservice for its
  newest image (``get_image``), and adopts its namespace: formats the local
  edits dirs, writes ``NNVERSION`` and stores the image. The standby then
  reads the rest from the shared journal.
* ``initialize_shared_edits``: formats the shared journal and copies into it
  every local edit after the newest image, segment by segment (turning a
  non-HA NameNode into the first of an HA pair).

Invariants:

1. Nothing is formatted over existing storage without ``force``
   (``JournalAlreadyFormattedError``).
2. ``NNVERSION`` is written after the journals are formatted and before the
   image, so a name dir with an image always names its namespace.
"""

from __future__ import annotations

import os
import random
import time

from qjournal.config import Configuration
from qjournal.errors import (InvalidRequestError, JournalAlreadyFormattedError, JournalNotFormattedError,
                             QJournalError, ServiceFailedError)
from qjournal.namenode.journal_registry import JournalOpener, open_journal
from qjournal.namenode import image as img
from qjournal.namenode.addresses import namenode_ids, rpc_address_of
from qjournal.namenode.namespace import Namespace
from qjournal.namenode.storage import (make_journal_set, name_dir_of, open_journals, read_nn_version,
                                       write_nn_version)
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.segment import LAYOUT_VERSION
from qjournal.transport import RpcClient
from qjournal.transport.tls import client_context_from_conf
from qjournal.protocol.protocols import NAMENODE


async def format_namenode(conf: Configuration, *, cluster_id: str | None = None, force: bool = False,
                          namespace_id: int | None = None, format_shared: bool = True,
                          opener: JournalOpener = open_journal, now_ms: int | None = None) -> NamespaceInfo:
    """``namenode -format``: a new namespace with an empty image at txid 0.

    ``opener`` opens the journals (the simulator's puts the quorum client on its network);
    ``now_ms`` is the root's mtime (default: the wall clock).

    Returns:
        The new namespace's info.

    Raises:
        JournalAlreadyFormattedError: a directory holds data and not ``force`` (invariant 1).
    """
    name_dir = name_dir_of(conf)
    if read_nn_version(name_dir) is not None and not force:
        raise JournalAlreadyFormattedError(f"{name_dir}: already formatted; use -force to re-format",
                                           path=name_dir)
    ns_info = NamespaceInfo(namespace_id if namespace_id is not None else random.randrange(1, 2 ** 31),
                            cluster_id or f"CID-{random.randrange(16 ** 12):012x}", LAYOUT_VERSION)
    local, shared = open_journals(conf, ns_info, opener)
    targets = local + ([shared] if (shared is not None and format_shared) else [])
    try:
        for j in targets:
            await j.format(ns_info, force=force)
    finally:
        for j in local + ([shared] if shared is not None else []):
            await j.close()
    if os.path.isdir(img.current_dir(name_dir)) and force:
        for t, p in img.list_images(name_dir):
            os.unlink(p)
            if os.path.exists(p + ".crc"):
                os.unlink(p + ".crc")
    write_nn_version(name_dir, ns_info)  # invariant 2
    superuser = conf.get("qjournal.namenode.superuser") or "root"
    ns = Namespace(superuser, conf.get("dfs.permissions.superusergroup") or "supergroup",
                   root_mtime=now_ms if now_ms is not None else int(time.time() * 1000))
    img.save_image(name_dir, ns.to_image_columns(),
                   img.ImageInfo(0, LAYOUT_VERSION, ns_info.namespace_id, ns_info.cluster_id,
                                 ns.last_inode_id))
    return ns_info


async def bootstrap_standby(conf: Configuration, nn_id: str | None, *, force: bool = False) -> int:
    """``namenode -bootstrapStandby``: copy the namespace id and newest image from the other NameNode.

    Returns:
        The txid of the image copied.

    Raises:
        JournalAlreadyFormattedError: this name dir is formatted and not ``force`` (invariant 1).
        ServiceFailedError: no other NameNode answered.
    """
    name_dir = name_dir_of(conf)
    if read_nn_version(name_dir) is not None and not force:
        raise JournalAlreadyFormattedError(f"{name_dir}: already formatted; use -force", path=name_dir)
    me = nn_id or conf.get("dfs.ha.namenode.id")
    errors = []
    for other in namenode_ids(conf):
        if other == me:
            continue
        try:
            host, port = rpc_address_of(conf, other)
            c = await RpcClient.connect_tcp(host, port, connect_timeout_ms=5000,
                                            ssl=client_context_from_conf(conf))
            try:
                got = await c.call(NAMENODE.get_image,
                                   timeout_ms=conf.get_duration_ms(NAMENODE.get_image.timeout_key))
            finally:
                await c.close()
        except QJournalError as e:
            errors.append(f"{other}: {e}")
            continue
        ns_info = NamespaceInfo.from_wire(got["ns_info"])
        local, _shared = open_journals(conf, ns_info)
        try:
            for j in local:
                await j.format(ns_info, force=force)
        finally:
            for j in local:
                await j.close()
        write_nn_version(name_dir, ns_info)  # invariant 2
        img.save_image_bytes(name_dir, int(got["txid"]), got["data"], got["crc"])
        return int(got["txid"])
    raise ServiceFailedError("bootstrapStandby: no other NameNode answered: " + "; ".join(errors))


async def initialize_shared_edits(conf: Configuration) -> int:
    """``namenode -initializeSharedEdits``: format the shared journal and copy the local edits.

    Returns:
        The number of txns copied.

    Raises:
        JournalNotFormattedError: this NameNode was never formatted.
        InvalidRequestError: no ``dfs.namenode.shared.edits.dir``.
    """
    name_dir = name_dir_of(conf)
    ns_info = read_nn_version(name_dir)
    if ns_info is None:
        raise JournalNotFormattedError(f"{name_dir}: not formatted", path=name_dir)
    local, shared = open_journals(conf, ns_info)
    if shared is None:
        raise InvalidRequestError("dfs.namenode.shared.edits.dir is not set", key="dfs.namenode.shared.edits.dir")
    images = img.list_images(name_dir)
    since = (images[-1][0] + 1) if images else 1
    copied = 0
    try:
        await shared.format(ns_info, force=True)
        src = make_journal_set(local, None)
        await src.recover_unfinalized_segments()
        for seg in await src.get_manifest(since, False):
            out = await shared.start_log_segment(seg.start_txid)
            stream = await src.open_segment(seg)
            try:
                async for rec in stream:
                    out.write(rec.txid, rec.body, rec.opcode)
                    copied += 1
            finally:
                await stream.close()
            out.mark()
            await out.sync()
            await out.close()
            await shared.finalize_log_segment(seg.start_txid, seg.end_txid)
        await src.close()
    finally:
        await shared.close()
    return copied


__all__ = ["format_namenode", "bootstrap_standby", "initialize_shared_edits"]
