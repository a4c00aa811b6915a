"""Checkpointer: the standby saves images and uploads them to the active.

Why: without checkpoints, start-up and failover replay every edit since the
format, and the journals grow forever. HDFS's ``StandbyCheckpointer``: the
standby already holds the namespace, so it can write an image without
disturbing the active, then hand it over.

Theory of operation: every ``dfs.namenode.checkpoint.check.period`` the
checkpointer looks at ``last_applied_txid - last_checkpoint_txid``. When it
reaches ``dfs.namenode.checkpoint.txns``, or ``dfs.namenode.checkpoint.period``
has passed since the last checkpoint (and there is anything new), it

1. takes the image columns and ``last_applied_txid`` in one synchronous step
   (no ``await`` in between, so no op can be applied between them), only when
   the NameNode says its namespace is a prefix of the log (``may_checkpoint``:
   a standby tailing, not one still leaving active with an unsynced tail; or
   the non-HA active),
   then waits until that txid is durable (the non-HA active's namespace runs
   ahead of its sync),
2. writes ``fsimage_<txid>`` + ``.crc`` in a worker thread (commit point: the
   rename, ``image.py``),
3. HA: sends the bytes and the ``.crc`` line to every other NameNode that
   accepts them (the active; a standby refuses with ``StandbyError``) through
   ``upload_image``; non-HA: the NameNode checkpoints itself,
4. purges old images (and, on the active, old edits) by the retention keys.

Upload is an RPC carrying the bytes (bounded by ``ipc.maximum.data.length``);
a failed upload is retried at the next checkpoint.

``dfsadmin -saveNamespace`` saves through the same steps 1, 2 and 4
(:meth:`Checkpointer.save_namespace_image`), in any state whose namespace is a
prefix of the log (the active too), without the upload (HDFS's saveNamespace
writes the image of the NameNode it is sent to); with ``-beforeShutdown`` only
when :func:`save_needed` says so. One save at a time (a lock): two saves at
the same txid would write the same temporary file.

The checkpointer sees its NameNode only through :class:`CheckpointSource`
(the HA state, the two txids, a synchronous snapshot, retention): it knows
nothing else of the daemon, which owns and starts it.

Invariants:

1. An image written at txid *t* holds exactly the ops up to *t* (step 1), and
   ops up to *t* are durable in the journal before the image exists. (The
   whole-cluster simulator, seed 4090, found a standby-in-name still leaving
   active: its namespace held txids 249-289 while ``last_applied_txid`` said
   248, and the image it saved as 248 broke the next start-up.)
2. A checkpoint never blocks the RPC server's event loop on disk I/O or on the image's encoding: step 1 is a
   copy-on-write snapshot of the inode table (O(chunks), ``inode_table.py``), step 2 runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Protocol

from qjournal.config import Configuration
from qjournal.errors import QJournalError, StandbyError
from qjournal.namenode import image as img
from qjournal.namenode.addresses import namenode_ids, rpc_address_of
from qjournal.namenode.inode_table import TableSnapshot
from qjournal.transport import RpcConnector
from qjournal.util.tasks import cancel_and_wait, spawn
from qjournal.protocol.protocols import NAMENODE

log = logging.getLogger(__name__)


class CheckpointSource(Protocol):
    """What the checkpointer needs of its NameNode, and nothing more (the daemon implements it)."""

    def may_checkpoint(self) -> bool:
        """Is a periodic checkpoint allowed now: the namespace is exactly the log up to
        ``last_applied_txid`` and this NameNode is the one that checkpoints (a tailing
        standby; the non-HA active)?"""

    def namespace_is_log_prefix(self) -> bool:
        """Is the namespace now exactly the log up to ``last_applied_txid``, whatever the
        HA state (saveNamespace)?"""

    async def make_durable(self, txid: int) -> None:
        """Return once the ops up to ``txid`` are durable in the journal."""

    #: txid of the newest image stored (the checkpointer advances it)
    last_checkpoint_txid: int

    @property
    def last_applied_txid(self) -> int:
        """The txid of the namespace state (the daemon's invariant 3)."""

    def snapshot_image(self) -> tuple[TableSnapshot, img.ImageInfo]:
        """The image rows (a copy-on-write snapshot of the inode table) and their ``ImageInfo`` at
        ``last_applied_txid``, in one synchronous step."""

    async def purge_old_storage(self) -> None:
        """Apply the retention keys to images (and, on the active, edits)."""


class Checkpointer:
    """Periodic checkpoints for one NameNode (module docstring).

    Args:
        nn: the NameNode, through the narrow :class:`CheckpointSource`.
        conf: the checkpoint keys and, with HA, the addresses of the other NameNodes.
        nn_id: this NameNode's id (it never uploads to itself).
        name_dir: where images are saved.
        clock_ms: the monotonic clock in ms (the checkpoint period is a duration: a wall clock that
            jumps must not start or hold back a checkpoint; issue 28, H1).
        ha_enabled: checkpoint on the standby and upload to the active (else: the active checkpoints itself).
        connect: reaches the other NameNodes (the upload).
        on_crash: told if the checkpoint loop dies of an unexpected error (the NameNode fails).
        after_upload: awaited after an image reached the active (HA): the standby asks the active to roll
            its log (``log_roller.py``), so the edits after the image start a segment of their own.
    """

    def __init__(self, nn: CheckpointSource, conf: Configuration, *, nn_id: str | None, name_dir: str,
                 clock_ms: Callable[[], int], ha_enabled: bool, connect: RpcConnector,
                 on_crash: Callable[[BaseException], None] | None = None,
                 after_upload: Callable[[], Awaitable[object]] | None = None) -> None:
        self.nn = nn
        self.connect = connect
        self.after_upload = after_upload
        self.on_crash = on_crash
        self.conf = conf
        self.nn_id = nn_id
        self.name_dir = name_dir
        self.clock_ms = clock_ms
        self.ha_enabled = ha_enabled
        self.check_period_ms = int(conf.get_duration_ms("dfs.namenode.checkpoint.check.period") or 60000)
        self.period_ms = int(conf.get_duration_ms("dfs.namenode.checkpoint.period") or 0)
        self.txns = int(conf.get_int("dfs.namenode.checkpoint.txns") or 0)
        self.upload_timeout_ms = int(conf.get_duration_ms("qjournal.namenode.checkpoint.upload.timeout.ms")
                                     or 60000)
        self._task: asyncio.Task | None = None
        #: one save at a time (module docstring)
        self._save_lock = asyncio.Lock()
        self._last_time_ms = clock_ms()
        self.checkpoints = 0
        self.uploads = 0
        self.last_error = ""

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = spawn(self._run(), name=f"checkpointer-{self.nn_id}", on_crash=self.on_crash)

    async def stop(self) -> None:
        t, self._task = self._task, None
        await cancel_and_wait(t)

    def due(self) -> bool:
        """Is a checkpoint due now (txn count or period)?"""
        nn = self.nn
        pending = nn.last_applied_txid - nn.last_checkpoint_txid
        if pending <= 0:
            return False
        if self.txns and pending >= self.txns:
            return True
        return bool(self.period_ms) and self.clock_ms() - self._last_time_ms >= self.period_ms

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_period_ms / 1000.0)
            if not self.nn.may_checkpoint() or not self.due():
                continue
            try:
                await self.checkpoint()
                self.last_error = ""
            except (QJournalError, OSError) as e:
                self.last_error = str(e)
                log.warning("checkpoint failed, will retry: %s", e)

    async def checkpoint(self) -> int:
        """Save an image at the current txid, upload it (HA), purge old storage.

        Returns:
            The txid of the image.

        Raises:
            StandbyError: this NameNode does not checkpoint now (``may_checkpoint``).
        """
        return await self._save(self.nn.may_checkpoint, upload=self.ha_enabled)

    async def save_namespace_image(self) -> int:
        """saveNamespace: save an image at the current txid (no upload), purge old storage.

        Returns:
            The txid of the image.

        Raises:
            StandbyError: the namespace is not a prefix of the log now (a transition is under way).
        """
        return await self._save(self.nn.namespace_is_log_prefix, upload=False)

    async def _save(self, allowed: Callable[[], bool], upload: bool) -> int:
        nn = self.nn
        async with self._save_lock:
            # step 1: one synchronous snapshot (invariant 1), no await since the check
            if not allowed():
                raise StandbyError("this NameNode's namespace is not a prefix of the log now "
                                   "(leaving active, or not serving): no checkpoint")
            cols, info = nn.snapshot_image()
            txid = info.txid
            await nn.make_durable(txid)
            path = await asyncio.to_thread(img.save_image, self.name_dir, cols, info)
            nn.last_checkpoint_txid = max(nn.last_checkpoint_txid, txid)
            self._last_time_ms = self.clock_ms()
            self.checkpoints += 1
            log.info("saved checkpoint", extra={"txid": txid, "path": path})
            if upload:
                await self._upload(path, txid)
        await nn.purge_old_storage()
        return txid

    async def _upload(self, path: str, txid: int) -> None:
        data, crc = await asyncio.to_thread(img.read_image_bytes, path)
        for other in namenode_ids(self.conf):
            if other == self.nn_id:
                continue
            try:
                c = await self.connect(*rpc_address_of(self.conf, other))
                try:
                    await c.call(NAMENODE.upload_image, timeout_ms=self.upload_timeout_ms, txid=txid,
                                 data=data, crc=crc)
                finally:
                    await c.close()
                self.uploads += 1
                log.info("uploaded checkpoint", extra={"txid": txid, "to": other})
            except QJournalError as e:
                log.info("checkpoint upload to %s not accepted: %s", other, e)
                continue
            if self.after_upload is not None:
                await self.after_upload()


def save_needed(image_age_ms: int | None, image_txid: int, last_txid: int, time_window_s: int,
                tx_gap: int) -> bool:
    """Does ``saveNamespace`` write an image (HDFS's ``FSImage.saveNamespace(timeWindow, txGap)``)?

    Args:
        image_age_ms: age of the newest image file (None: there is none).
        image_txid: its txid.
        last_txid: the NameNode's last applied (or written) txid.
        time_window_s / tx_gap: ``-beforeShutdown``'s window: the checkpoint period and txn
            count times ``dfs.namenode.missing.checkpoint.periods.before.shutdown``; both 0
            without ``-beforeShutdown``.

    Returns:
        True unless a window is given and the newest image is both younger than it and at
        most ``tx_gap`` txns behind.
    """
    if time_window_s <= 0 and tx_gap <= 0:
        return True
    if image_age_ms is None:
        return True
    return not (image_age_ms <= time_window_s * 1000 and image_txid >= last_txid - tx_gap)


__all__ = ["Checkpointer", "CheckpointSource", "save_needed"]
