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
   (no ``await`` in between, so no op can be applied between them),
2. writes ``fsimage_<txid>`` + ``.crc`` in a worker thread (commit point: the
   rename, ``image.py``),
3. HA: sends the bytes and the ``.crc`` line to every other NameNode that
   accepts them (the active; a standby refuses with ``StandbyError``) through
   ``upload_image``; non-HA: the NameNode checkpoints itself,
4. purges old images (and, on the active, old edits) by the retention keys.

Upload is an RPC carrying the bytes (bounded by ``ipc.maximum.data.length``);
a failed upload is retried at the next checkpoint.

Invariants:

1. An image written at txid *t* holds exactly the ops up to *t* (step 1).
2. A checkpoint never blocks the RPC server's event loop on disk I/O (step 2
   runs in a thread).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from qjournal.errors import QJournalError
from qjournal.namenode import image as img
from qjournal.namenode.ha_state import HAState
from qjournal.util.tasks import cancel_and_wait

if TYPE_CHECKING:
    from qjournal.namenode.server import NameNode

log = logging.getLogger(__name__)


class Checkpointer:
    """Periodic checkpoints for one NameNode (module docstring)."""

    def __init__(self, nn: "NameNode") -> None:
        self.nn = nn
        conf = nn.conf
        self.check_period_ms = int(conf.get_duration_ms("dfs.namenode.checkpoint.check.period") or 60000)
        self.period_ms = int(conf.get_duration_ms("dfs.namenode.checkpoint.period") or 0)
        self.txns = int(conf.get_int("dfs.namenode.checkpoint.txns") or 0)
        self.upload_timeout_ms = int(conf.get_duration_ms("qjournal.namenode.checkpoint.upload.timeout.ms")
                                     or 60000)
        self._task: asyncio.Task | None = None
        self._last_time_ms = nn.clock_ms()
        self.checkpoints = 0
        self.uploads = 0
        self.last_error = ""

    def start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())

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
        return bool(self.period_ms) and nn.clock_ms() - self._last_time_ms >= self.period_ms

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.check_period_ms / 1000.0)
            nn = self.nn
            eligible = (nn.state == HAState.STANDBY) if nn.ha_enabled else (nn.state == HAState.ACTIVE)
            if not eligible or not self.due():
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
        """
        nn = self.nn
        assert nn.namespace is not None and nn.ns_info is not None
        # step 1: one synchronous snapshot (invariant 1)
        txid = nn.last_applied_txid
        cols = nn.namespace.to_image_columns()
        info = img.ImageInfo(txid, nn.ns_info.layout_version, nn.ns_info.namespace_id,
                             nn.ns_info.cluster_id, nn.namespace.last_inode_id)
        path = await asyncio.to_thread(img.save_image, nn.name_dir, cols, info)
        nn.last_checkpoint_txid = max(nn.last_checkpoint_txid, txid)
        self._last_time_ms = nn.clock_ms()
        self.checkpoints += 1
        log.info("saved checkpoint", extra={"txid": txid, "path": path})
        if nn.ha_enabled:
            await self._upload(path, txid)
        await nn.purge_old_storage()
        return txid

    async def _upload(self, path: str, txid: int) -> None:
        from qjournal.namenode.addresses import namenode_ids, rpc_address_of
        from qjournal.transport.rpc import RpcClient

        data, crc = await asyncio.to_thread(img.read_image_bytes, path)
        for other in namenode_ids(self.nn.conf):
            if other == self.nn.nn_id:
                continue
            try:
                host, port = rpc_address_of(self.nn.conf, other)
                from qjournal.transport.tls import client_context_from_conf
                c = await RpcClient.connect_tcp(host, port, connect_timeout_ms=5000,
                                                ssl=client_context_from_conf(self.nn.conf))
                try:
                    await c.call("upload_image", timeout_ms=self.upload_timeout_ms, txid=txid,
                                 data=data, crc=crc)
                finally:
                    await c.close()
                self.uploads += 1
                log.info("uploaded checkpoint", extra={"txid": txid, "to": other})
            except QJournalError as e:
                log.info("checkpoint upload to %s not accepted: %s", other, e)


__all__ = ["Checkpointer"]
