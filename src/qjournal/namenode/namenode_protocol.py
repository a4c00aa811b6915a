"""NamenodeProtocol on the NameNode: the calls between NameNodes and from operators.

Why a module: these calls move the NameNode's *storage* (images, segments),
not its namespace, and have their own rules: HDFS's ``NamenodeProtocol``
(``versionRequest``, ``rollEditLog``) and its image transfer servlet (the
standby's checkpoint upload, ``-bootstrapStandby``'s image download), here as
RPCs carrying the bytes (bounded by ``ipc.maximum.data.length``).

Theory of operation:

* ``upload_image``: the standby's checkpoint (``checkpointer.py``) arrives
  with its ``.crc`` line; the active alone accepts it, verifies the checksum,
  stores it (commit point: the rename, ``image.py``) and applies retention.
* ``get_image``: the newest image that reads back valid, with its ``.crc`` and
  the namespace info, for ``namenode -bootstrapStandby`` (``format.py``).
* ``get_namespace_info``, ``roll_edit_log`` (the active, not in safe mode:
  :func:`roll_edit_log`, shared with ``dfsadmin -rollEdits``), ``get_stats``
  (counters for operators and tests).

Invariants:

1. A stored image was verified against its checksum first (``image.save_image_bytes``).
2. Only the active stores an uploaded image (``OpCategory.CHECKPOINT``); a
   standby refuses it with ``StandbyError`` and the uploader moves on.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from qjournal.errors import JournalError, QJournalError
from qjournal.namenode import image as img
from qjournal.namenode.editlog import FSEditLog
from qjournal.namenode.ha_state import OpCategory, check_safe_mode
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.protocols import NAMENODE


class NamenodeContext(Protocol):
    """What the NamenodeProtocol needs of its NameNode, and nothing more (the daemon implements it)."""

    name_dir: str
    #: the namespace's info (None until the storage is read)
    ns_info: NamespaceInfo | None
    #: txid of the newest image stored
    last_checkpoint_txid: int
    #: the open edit log (the active only)
    editlog: FSEditLog | None
    #: safe mode (``ha_state`` invariant 4)
    safe_mode: bool
    #: "NameNode <id>", for messages
    label: str

    def check_operation(self, category: OpCategory, method: str) -> None:
        """The HA gate. Raises StandbyError when this NameNode does not serve ``category``."""

    async def purge_old_storage(self) -> None:
        """Apply the retention keys to images (and, on the active, edits)."""

    def stats(self) -> dict:
        """Counters: state, txids, inodes, edit log, retry cache, checkpoints, tailer."""


async def roll_edit_log(nn: NamenodeContext, min_txns: int = 1) -> int | None:
    """Roll the active's edit log (``roll_edit_log``, ``dfsadmin -rollEdits``).

    Args:
        nn: the NameNode.
        min_txns: roll only a segment holding at least this many txns besides its start marker
            (0: always, as ``-rollEdits``).

    Returns:
        The new segment's first txid, or None when nothing was rolled.

    Raises:
        StandbyError: not the active; SafeModeError: in safe mode (HDFS: "Log not rolled").
    """
    nn.check_operation(OpCategory.WRITE, NAMENODE.roll_edit_log)
    check_safe_mode(nn.safe_mode, OpCategory.WRITE, NAMENODE.roll_edit_log, nn_label=nn.label)
    return await nn.editlog.roll(min_txns) if nn.editlog is not None else None


class NamenodeProtocolHandler:
    """The NamenodeProtocol calls of one NameNode (module docstring).

    Args:
        nn: the NameNode, through the narrow :class:`NamenodeContext`.
    """

    #: the protocol this handler serves (calls run concurrently; arguments decoded by the RPC server)
    rpc_protocols = (NAMENODE,)

    def __init__(self, nn: NamenodeContext) -> None:
        self.nn = nn

    async def rpc_upload_image(self, txid: int, data: bytes, crc: bytes) -> None:
        """Checkpoint upload from the standby: verify, store, purge (invariants 1, 2).

        Raises:
            StandbyError: this NameNode is not active.
            CorruptSegmentError: the bytes do not match their checksum.
        """
        nn = self.nn
        nn.check_operation(OpCategory.CHECKPOINT, NAMENODE.upload_image)
        await asyncio.to_thread(img.save_image_bytes, nn.name_dir, txid, data, crc)
        nn.last_checkpoint_txid = max(nn.last_checkpoint_txid, txid)
        await nn.purge_old_storage()

    async def rpc_get_namespace_info(self, user: str = "", groups: list = (), state_id: int | None = None) -> dict:
        """Returns this namespace's NamespaceInfo wire dict. (``user``, ``groups``, ``state_id``: the DFS
        client sends its identity with every call; a NamenodeProtocol caller is judged by the protocol's
        ACL, so this call and the two below do not use them.)"""
        return self.nn.ns_info.to_wire()  # type: ignore[union-attr]

    async def rpc_get_image(self) -> dict:
        """The newest valid image for ``-bootstrapStandby``.

        Returns:
            ``{"txid", "data", "crc", "ns_info"}``.

        Raises:
            JournalError: no image reads back valid.
        """
        nn = self.nn
        images = img.list_images(nn.name_dir)
        for txid, path in reversed(images):
            try:
                data, crc = await asyncio.to_thread(img.read_image_bytes, path)
            except QJournalError:
                continue
            return {"txid": txid, "data": data, "crc": crc, "ns_info": nn.ns_info.to_wire()}  # type: ignore[union-attr]
        raise JournalError(f"{nn.name_dir}: no valid image to send")

    async def rpc_roll_edit_log(self, user: str = "", groups: list = (), state_id: int | None = None) -> int | None:
        """Roll the edit log now. Returns the new segment's first txid (None: nothing to roll).
        Raises StandbyError, SafeModeError."""
        return await roll_edit_log(self.nn)

    async def rpc_get_stats(self, user: str = "", groups: list = (), state_id: int | None = None) -> dict:
        """Returns counters: state, last applied txid, inodes, edit log and retry cache statistics."""
        return self.nn.stats()


__all__ = ["NamenodeProtocolHandler", "NamenodeContext", "roll_edit_log"]
