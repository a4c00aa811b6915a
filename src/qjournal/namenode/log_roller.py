"""The standby asks the active to roll its edit log: HDFS's ``EditLogTailer.triggerActiveLogRoll``.

Why: the active finalizes a segment only when asked (``roll_edit_log``, ``dfsadmin -rollEdits``) or when the
segment reaches ``dfs.namenode.edit.log.autoroll.multiplier.threshold`` x ``dfs.namenode.checkpoint.txns`` txns.
On a quiet cluster nothing would be finalized for hours: a standby tailing finalized segments only would fall behind,
a JournalNode left out of sync would stay out until the next segment, and no segment could be purged. In HDFS the
standby's tailer asks the active to roll every ``dfs.ha.log-roll.period`` (seed 003, mark/roll), so that the
segment boundary is decided by the reader that needs it; qjournal does the same (the active has no timer of its own).

Theory of operation:

* Every ``dfs.ha.log-roll.period`` (0: never) a standby (not an observer, not an active) that has applied edits
  since its last request asks the other NameNodes, in configured order, to ``roll_edit_log``: the active rolls a
  segment holding at least one txn and answers the new segment's first txid; a standby or observer answers
  ``StandbyError`` and the next one is asked. Each call is bounded by ``dfs.ha.tail-edits.rolledits.timeout``. A
  failed round is logged and retried at the next period (the roll is an optimisation: nothing waits for it).
* With in-progress tailing (HDFS-14317) the standby reads edits before they are finalized, so "applied something
  since the last request", not "loaded nothing for a period", decides whether to ask: the roll still bounds the
  open segment and lets segments be finalized, copied by the JournalNodeSyncer and purged.
* :meth:`ActiveLogRoller.trigger` is also what the checkpointer calls after handing an image to the active, so
  the edits after the image start a new segment and the older segments can be purged whole.

Invariants:

1. Only a NameNode in the standby state asks; the request never makes any NameNode roll an empty segment.
2. A request never blocks the tailer, the checkpointer or the RPC server: it runs as its own task, each call with
   a deadline.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

from qjournal.errors import QJournalError, StandbyError
from qjournal.namenode.addresses import namenode_ids, rpc_address_of
from qjournal.protocol.protocols import NAMENODE
from qjournal.transport import RpcConnector
from qjournal.util.tasks import cancel_and_wait, spawn

__all__ = ["ActiveLogRoller"]

log = logging.getLogger(__name__)


class ActiveLogRoller:
    """The standby's periodic log-roll request (module docstring).

    Args:
        conf: the configuration (the other NameNodes' addresses, the period and the call's deadline).
        nn_id: this NameNode's id (it never asks itself).
        connect: reaches another NameNode's RPC server.
        is_standby: whether this NameNode is a standby now (invariant 1).
        last_applied_txid: this NameNode's last applied txid.
        on_crash: told if the loop dies of an unexpected error (the NameNode fails).
    """

    def __init__(self, conf, nn_id: str | None, connect: RpcConnector, *, is_standby: Callable[[], bool],
                 last_applied_txid: Callable[[], int],
                 on_crash: Callable[[BaseException], None] | None = None) -> None:
        self.conf = conf
        self.nn_id = nn_id
        self.connect = connect
        self.is_standby = is_standby
        self.last_applied_txid = last_applied_txid
        self.on_crash = on_crash
        self.period_ms = int(conf.get_duration_ms("dfs.ha.log-roll.period") or 0)
        self.timeout_ms = int(conf.get_duration_ms("dfs.ha.tail-edits.rolledits.timeout") or 60000)
        #: the last applied txid when the last request succeeded (the next asks only after more was applied)
        self.last_trigger_txid = -1
        self.requests = 0
        self.rolls = 0
        self.last_error = ""
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Start the periodic requests (nothing with a period of 0)."""
        if self.period_ms > 0 and (self._task is None or self._task.done()):
            self._task = spawn(self._run(), name=f"log-roller-{self.nn_id}", on_crash=self.on_crash)

    async def stop(self) -> None:
        t, self._task = self._task, None
        await cancel_and_wait(t)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period_ms / 1000.0)
            if self.is_standby() and self.last_applied_txid() > self.last_trigger_txid:
                await self.trigger()

    async def trigger(self) -> int | None:
        """Ask the active to roll (invariant 1: only from a standby).

        Returns:
            The first txid of the active's new segment, or None when no NameNode rolled (none active, nothing
            to roll, every call failed: logged, never raised).
        """
        if not self.is_standby():
            return None
        applied = self.last_applied_txid()
        self.requests += 1
        errors = []
        for other in namenode_ids(self.conf):
            if other == self.nn_id:
                continue
            try:
                client = await self.connect(*rpc_address_of(self.conf, other))
                try:
                    new_segment = await client.call(NAMENODE.roll_edit_log, timeout_ms=self.timeout_ms)
                finally:
                    await client.close()
            except StandbyError:
                continue
            except QJournalError as e:
                errors.append(f"{other}: {e}")
                continue
            self.last_trigger_txid = applied
            self.last_error = ""
            if new_segment is not None:
                self.rolls += 1
                log.info("asked %s to roll its edit log: new segment at txid %d", other, new_segment)
            return new_segment
        self.last_error = "; ".join(errors) or "no active NameNode answered"
        if errors:
            log.warning("log roll request failed (retried in %d ms): %s", self.period_ms, self.last_error)
        return None
