"""The ``dfsadmin`` calls on the NameNode: safe mode, saveNamespace, rollEdits and the report.

Why a module: these calls are the operator's, not a client's: they change the
NameNode's mode or storage rather than the namespace, each needs the
superuser, and each has a small rule of its own that is easier to check here
than in the daemon. HDFS's admin half of ``ClientProtocol`` (``setSafeMode``,
``saveNamespace``, ``rollEdits``, the ``getStats``/``getDatanodeReport`` of
``-report``) in ``NameNodeRpcServer``/``FSNamesystem``.

Theory of operation:

* The caller is identified as for the client calls (``nn.identify``: the
  certificate's user with TLS on, else the ``user`` and ``groups`` it sends) and,
  but for ``set_safe_mode("get")``, must be the superuser (``Namespace.check_superuser``;
  others get ``PermissionDeniedError``). Every call is served in every HA state
  (``OpCategory.UNCHECKED``): ``dfsadmin`` sends ``-safemode``,
  ``-saveNamespace`` and ``-report`` to each NameNode of the nameservice. The
  DFS client's ``state_id`` is accepted and unused: no answer here is a read of
  the namespace that a later read must not go behind.
* ``set_safe_mode(action)``: ``get``, ``enter``, ``leave``, ``force_exit``
  (the same as ``leave``: there are no blocks to force past). Safe mode belongs
  to this NameNode alone (``ha_state`` invariant 4). ``enter`` sets the flag,
  then the active syncs every edit written so far (HDFS's ``logSyncAll``).
* ``save_namespace(time_window_s, tx_gap)``: in safe mode only ("Safe mode
  should be turned ON in order to create namespace image."); with a window
  (``-beforeShutdown``), only when ``checkpointer.save_needed`` says the newest
  image is too old. The active first rolls its edit log (as HDFS: the old
  segment is finalized); then the checkpointer saves an image at the last txid
  (``Checkpointer.save_namespace_image``).
* ``roll_edits``: the active rolls its edit log even when the segment is empty
  (``namenode_protocol.roll_edit_log``; refused in safe mode) and answers the
  new segment's first txid.
* ``get_report``: what this NameNode knows of itself: HA state, safe mode, the
  namespace (files and directories), last txid, last checkpoint, its journals
  (``storage.journal_statuses``).

Invariants:

1. Once ``enter`` has answered, no write is applied until ``leave``
   (``client_protocol`` invariant 6) and every edit applied before is durable.
2. An image written by ``save_namespace`` holds exactly the log up to its txid
   (checkpointer invariant 1), and on the active the log up to it is in
   finalized segments.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

from qjournal.config import Configuration
from qjournal.errors import InvalidRequestError, SafeModeError, StandbyError
from qjournal.journalmanager.base import JournalManager
from qjournal.namenode import image as img
from qjournal.namenode.checkpointer import Checkpointer, save_needed
from qjournal.namenode.client_protocol import call_context
from qjournal.namenode.editlog import FSEditLog
from qjournal.namenode.ha_state import SAFE_MODE_TIP, HAState, OpCategory
from qjournal.namenode.namenode_protocol import roll_edit_log
from qjournal.protocol.protocols import DFSADMIN
from qjournal.namenode.namespace import CallContext, Namespace
from qjournal.namenode.storage import journal_statuses
from qjournal.protocol.messages import NamespaceInfo
from qjournal.security.identity import Caller

log = logging.getLogger(__name__)

#: ``set_safe_mode`` actions (HDFS's ``SafeModeAction``; ``dfsadmin -safemode wait`` polls ``get``)
SAFE_MODE_ACTIONS = ("get", "enter", "leave", "force_exit")


class AdminContext(Protocol):
    """What the dfsadmin calls need of their NameNode, and nothing more (the daemon implements it)."""

    conf: Configuration
    nn_id: str | None
    #: "NameNode <id>", for messages
    label: str
    state: HAState
    #: safe mode (``ha_state`` invariant 4); these calls set and clear it
    safe_mode: bool
    namespace: Namespace | None
    ns_info: NamespaceInfo | None
    name_dir: str
    #: the open edit log (the active only)
    editlog: FSEditLog | None
    #: the writer's journals (the active) and the shared journal tailed (a standby)
    journal_set: JournalManager | None
    shared_reader: JournalManager | None
    checkpointer: Checkpointer | None
    last_checkpoint_txid: int
    clock_ms: Callable[[], int]

    @property
    def last_applied_txid(self) -> int:
        """The txid of the namespace state (the active: last written)."""

    def check_operation(self, category: OpCategory, method: str) -> None:
        """The HA gate. Raises StandbyError when this NameNode does not serve ``category``."""

    async def identify(self, user: Any, groups: Any) -> Caller:
        """Who calls (``client_protocol``: Identity). Raises AuthenticationError, AuthorizationError."""


class AdminProtocolHandler:
    """The dfsadmin calls of one NameNode (module docstring).

    Args:
        nn: the NameNode, through the narrow :class:`AdminContext`.
    """

    #: the protocol this handler serves (calls run concurrently; arguments decoded by the RPC server)
    rpc_protocols = (DFSADMIN,)

    def __init__(self, nn: AdminContext) -> None:
        self.nn = nn

    async def _caller(self, method: str, user: Any, groups: Any, superuser: bool = True) -> CallContext:
        """The caller, the HA gate (every state, not after a journal failure) and the superuser check.
        Raises AuthorizationError, StandbyError, InvalidRequestError, PermissionDeniedError."""
        nn = self.nn
        caller = await nn.identify(user, groups)
        nn.check_operation(OpCategory.UNCHECKED, method)
        ctx = call_context(nn.clock_ms(), caller.user, caller.groups)
        if superuser:
            nn.namespace.check_superuser(ctx, method)  # type: ignore[union-attr]
        return ctx

    async def rpc_set_safe_mode(self, action: str = "get", user: str = "", groups: list = (),
                                state_id: int | None = None) -> bool:
        """HDFS setSafeMode (invariant 1).

        Args:
            action: one of :data:`SAFE_MODE_ACTIONS`.

        Returns:
            Whether this NameNode is in safe mode afterwards.

        Raises:
            InvalidRequestError: unknown action; PermissionDeniedError: not the superuser (all but ``get``);
            EditLogFatalError: entering, the active could not sync its edits (safe mode is on).
        """
        if action not in SAFE_MODE_ACTIONS:
            raise InvalidRequestError(f"unknown safe mode action {action!r} (expected one of "
                                      f"{', '.join(SAFE_MODE_ACTIONS)})")
        nn = self.nn
        ctx = await self._caller(DFSADMIN.set_safe_mode, user, groups, superuser=action != "get")
        if action == "enter":
            if not nn.safe_mode:
                nn.safe_mode = True  # no await since the check: every later write sees it
                log.info("STATE* Safe mode is ON. %s", SAFE_MODE_TIP, extra={"user": ctx.user})
            if nn.editlog is not None:
                await nn.editlog.log_sync()
        elif action in ("leave", "force_exit") and nn.safe_mode:
            nn.safe_mode = False
            log.info("STATE* Safe mode is OFF", extra={"user": ctx.user})
        return nn.safe_mode

    async def rpc_save_namespace(self, time_window_s: int = 0, tx_gap: int = 0, user: str = "",
                                 groups: list = (), state_id: int | None = None) -> dict:
        """HDFS saveNamespace (invariant 2).

        Args:
            time_window_s / tx_gap: ``-beforeShutdown``'s window (``checkpointer.save_needed``); 0 and 0:
                always save.

        Returns:
            ``{"saved": bool, "txid": <the image's txid, or the newest image's when not saved>}``.

        Raises:
            SafeModeError: not in safe mode; StandbyError: the namespace is not a prefix of the log now
            (a transition under way); PermissionDeniedError; InvalidRequestError.
        """
        nn = self.nn
        ctx = await self._caller(DFSADMIN.save_namespace, user, groups)
        for v, what in ((time_window_s, "time_window_s"), (tx_gap, "tx_gap")):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InvalidRequestError(f"save_namespace: {what} must be a non-negative int, got {v!r}")
        if not nn.safe_mode:
            raise SafeModeError(f"Safe mode should be turned ON in order to create namespace image ({nn.label}).",
                                nn=nn.label, method="save_namespace", safe_mode=False)
        newest = img.newest_image_time_ms(nn.name_dir)
        age_ms = nn.clock_ms() - newest[1] if newest is not None else None
        if not save_needed(age_ms, nn.last_checkpoint_txid, nn.last_applied_txid, time_window_s, tx_gap):
            return {"saved": False, "txid": nn.last_checkpoint_txid}
        if nn.checkpointer is None:
            raise StandbyError(f"{nn.label} is not serving yet", state=nn.state.value)
        if nn.state == HAState.ACTIVE and nn.editlog is not None:
            await nn.editlog.roll(0)  # safe mode: nothing else is written meanwhile
        txid = await nn.checkpointer.save_namespace_image()
        log.info("New namespace image has been created", extra={"txid": txid, "user": ctx.user})
        return {"saved": True, "txid": txid}

    async def rpc_roll_edits(self, user: str = "", groups: list = (), state_id: int | None = None) -> int:
        """HDFS rollEdits: the active finalizes its segment and starts the next.

        Returns:
            The new segment's first txid.

        Raises:
            StandbyError: not the active (the DFS client fails over); SafeModeError; PermissionDeniedError.
        """
        nn = self.nn
        await self._caller(DFSADMIN.roll_edits, user, groups)
        txid = await roll_edit_log(nn, min_txns=0)  # type: ignore[arg-type]
        if txid is None:
            raise StandbyError(f"{nn.label}: no edit log open for write", state=nn.state.value)
        return txid

    async def rpc_get_report(self, user: str = "", groups: list = (), state_id: int | None = None) -> dict:
        """This NameNode's part of ``dfsadmin -report`` (module docstring).

        Returns:
            ``{"nn_id", "state", "safe_mode", "namespace_id", "cluster_id", "files", "directories",
            "last_txid", "last_checkpoint_txid", "last_checkpoint_time_ms", "journals"}``.

        Raises:
            PermissionDeniedError, StandbyError (stopping after a journal failure).
        """
        nn = self.nn
        ctx = await self._caller(DFSADMIN.get_report, user, groups)
        cs = nn.namespace.get_content_summary(ctx, "/")  # type: ignore[union-attr]
        newest = img.newest_image_time_ms(nn.name_dir)
        ns = nn.ns_info
        return {"nn_id": nn.nn_id or "", "state": nn.state.value, "safe_mode": nn.safe_mode,
                "namespace_id": ns.namespace_id if ns else 0, "cluster_id": ns.cluster_id if ns else "",
                "files": cs["file_count"], "directories": cs["directory_count"],
                "last_txid": nn.last_applied_txid, "last_checkpoint_txid": nn.last_checkpoint_txid,
                "last_checkpoint_time_ms": newest[1] if newest is not None else 0,
                "journals": journal_statuses(nn.journal_set, nn.shared_reader, nn.conf)}


__all__ = ["AdminProtocolHandler", "AdminContext", "SAFE_MODE_ACTIONS"]
