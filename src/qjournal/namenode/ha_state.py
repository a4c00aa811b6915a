"""The NameNode's HA state machine: which transitions are allowed, which calls each state serves.

Why pure: the rules that keep a standby from answering writes and a stopping
NameNode from becoming active are small decisions, and a mistake in them is a
split brain. They live here as functions of (state, request) with table tests;
the HA service (``ha_service.py``) and the daemon's call gate ask them before doing anything.

States (HDFS ``HAServiceState``): ``initializing`` (loading image and edits),
``standby`` (tailing the shared journal, read-only at most), ``active``
(serving writes), ``observer`` (tailing like a standby and serving consistent
reads, HDFS-12943; never part of a failover), ``stopping`` (shutting down, or
fenced: terminal).

Invariants:

1. Allowed transitions: initializing -> standby | active | stopping;
   standby -> active | observer | stopping; active -> standby | stopping;
   observer -> standby | stopping. Nothing leaves ``stopping``. A transition to
   the current state is a no-op (HDFS answers success), except that
   ``initializing`` cannot be "re-entered". So an observer becomes active only
   through standby, and an active never becomes an observer directly (its
   open segment must be finalized and its ZKFC must leave the lock first).
2. Only ``active`` serves writes. Reads are served by ``active``, by
   ``observer`` (consistent: the observer read rule of ``observer_rules.py``
   decides whether it answers now, waits, or sends the client elsewhere), and by
   ``standby`` only when stale reads are allowed (``dfs.ha.allow.stale.reads``).
   ``msync`` (category ``MSYNC``: the writer's latest state id) is served by the
   active only. HA calls (status, health, transitions) are served in every state.
3. With automatic failover enabled, a transition requested by ``user`` to
   ``active``, or to ``standby`` from anything but ``observer``, is refused;
   ``zkfc`` and ``user_forced`` (``--forcemanual``) are accepted. Observer
   transitions need no ``--forcemanual``: the ZKFCs leave observers out of the
   election, so moving a NameNode between standby and observer cannot race one.
4. Safe mode (HDFS's manual safe mode, ``dfsadmin -safemode enter``) is a flag
   of one NameNode: in memory, never in the edit log nor replicated (entering
   it on the active leaves the standby as it was, as in HDFS), kept across
   HA transitions, gone after a restart. There is no start-up safe mode: the
   namespace holds metadata only, so there are no block reports to wait for.
   While it is on, the NameNode refuses every ``WRITE`` (namespace mutations and
   edit-log rolls) with ``SafeModeError``, after the HA gate of invariant 2 (a
   standby answers a write with ``StandbyError`` whatever its safe mode, so the
   client fails over); reads, ``msync``, HA calls and checkpoint uploads are
   served.
5. With ``dfs.ha.nn.not-become-active-in-safemode`` (HDFS-14201, HDFS-16547), a
   NameNode in safe mode refuses a transition to ``active`` or ``observer``
   (one already there stays: a no-op) and reports itself unhealthy to its ZKFC
   (``ha_service.py``), so it leaves the election.
"""

from __future__ import annotations

import enum

from qjournal.errors import SafeModeError, ServiceFailedError, StandbyError
from qjournal.protocol.protocols import CLIENT, NAMENODE


class HAState(str, enum.Enum):
    INITIALIZING = "initializing"
    STANDBY = "standby"
    ACTIVE = "active"
    OBSERVER = "observer"
    STOPPING = "stopping"


class OpCategory(str, enum.Enum):
    READ = "read"
    WRITE = "write"
    #: HA protocol calls: always served
    UNCHECKED = "unchecked"
    #: checkpoint image upload: the active only
    CHECKPOINT = "checkpoint"
    #: msync, the writer's latest state id: the active only
    MSYNC = "msync"


class Transition(str, enum.Enum):
    DO = "do"
    NOOP = "noop"


#: invariant 1
ALLOWED: dict[HAState, tuple[HAState, ...]] = {
    HAState.INITIALIZING: (HAState.STANDBY, HAState.ACTIVE, HAState.STOPPING),
    HAState.STANDBY: (HAState.ACTIVE, HAState.OBSERVER, HAState.STOPPING),
    HAState.ACTIVE: (HAState.STANDBY, HAState.STOPPING),
    HAState.OBSERVER: (HAState.STANDBY, HAState.STOPPING),
    HAState.STOPPING: (),
}

REQUEST_SOURCES = ("user", "zkfc", "user_forced")


def check_transition(current: HAState, target: HAState, request_source: str = "user",
                     automatic_failover: bool = False, safe_mode: bool = False,
                     not_active_in_safe_mode: bool = False) -> Transition:
    """Decide a transition request (invariants 1, 3 and 5).

    Args:
        current: the state now.
        target: the requested state.
        request_source: ``user``, ``zkfc`` or ``user_forced``.
        automatic_failover: ``dfs.ha.automatic-failover.enabled``.
        safe_mode: the NameNode is in safe mode.
        not_active_in_safe_mode: ``dfs.ha.nn.not-become-active-in-safemode``.

    Returns:
        ``Transition.DO`` or ``Transition.NOOP`` (already there).

    Raises:
        ServiceFailedError: the transition is not allowed, or manual control is
            refused under automatic failover, or the source is unknown, or the
            NameNode is in safe mode and configured not to become active then.
    """
    if request_source not in REQUEST_SOURCES:
        raise ServiceFailedError(f"unknown request source {request_source!r} "
                                 f"(expected one of {', '.join(REQUEST_SOURCES)})")
    if (automatic_failover and request_source == "user"
            and (target == HAState.ACTIVE or (target == HAState.STANDBY and current != HAState.OBSERVER))):
        raise ServiceFailedError(
            "Manual HA control for this NameNode is not allowed, because automatic HA is enabled "
            "(dfs.ha.automatic-failover.enabled); use --forcemanual to override")
    if current == target and current != HAState.INITIALIZING:
        if current == HAState.STOPPING:
            raise ServiceFailedError("the NameNode is stopping; no transition is possible")
        return Transition.NOOP
    if target not in ALLOWED[current]:
        if current == HAState.OBSERVER and target == HAState.ACTIVE:
            raise ServiceFailedError("transition from observer to active is not allowed: make the "
                                     "observer standby first (-transitionToStandby)")
        if current == HAState.ACTIVE and target == HAState.OBSERVER:
            raise ServiceFailedError("transition from active to observer is not allowed: an active "
                                     "NameNode cannot become an observer (make another NameNode active "
                                     "and this one standby first)")
        raise ServiceFailedError(f"transition from {current.value} to {target.value} is not allowed")
    if safe_mode and not_active_in_safe_mode and target in (HAState.ACTIVE, HAState.OBSERVER):
        raise ServiceFailedError(
            f"the NameNode is in safe mode and dfs.ha.nn.not-become-active-in-safemode is true: it does not "
            f"become {target.value} (leave safe mode first: dfsadmin -safemode leave)")
    return Transition.DO


def check_operation(state: HAState, category: OpCategory, allow_stale_reads: bool = False,
                    method: str = "") -> None:
    """Refuse a call the current state does not serve (invariant 2).

    Raises:
        StandbyError: ``Operation category <X> is not supported in state <s>``,
            telling the client to try the other NameNode (a write or msync sent to an
            observer gets it too: the client's proxy then goes to the active).
    """
    if category == OpCategory.UNCHECKED:
        return
    if state == HAState.ACTIVE:
        return
    if state == HAState.OBSERVER and category == OpCategory.READ:
        return
    if state == HAState.STANDBY and category == OpCategory.READ and allow_stale_reads:
        return
    what = f" ({method})" if method else ""
    raise StandbyError(f"Operation category {category.value.upper()}{what} is not supported in state "
                       f"{state.value}", state=state.value, category=category.value)


#: what a write refused in safe mode could not do, by method (HDFS's messages), invariant 4
SAFE_MODE_REFUSALS: dict[str, str] = {
    CLIENT.mkdirs: "Cannot create directory", CLIENT.create: "Cannot create file", CLIENT.delete: "Cannot delete",
    CLIENT.rename: "Cannot rename", CLIENT.set_permission: "Cannot set permission for",
    CLIENT.set_owner: "Cannot set owner for", CLIENT.set_times: "Cannot set times",
    CLIENT.set_replication: "Cannot set replication for", NAMENODE.roll_edit_log: "Log not rolled",
}

#: how an operator leaves safe mode (HDFS's "safe mode tip" for a manual safe mode)
SAFE_MODE_TIP = 'It was turned on manually. Use "qjournal dfsadmin -safemode leave" to turn safe mode off.'


def check_safe_mode(safe_mode: bool, category: OpCategory, method: str = "", target: str = "",
                    nn_label: str = "NameNode") -> None:
    """Refuse a write while the NameNode is in safe mode (invariant 4). The HA gate
    (:func:`check_operation`) comes first.

    Args:
        safe_mode: the NameNode is in safe mode.
        category: the call's category (only ``WRITE`` is refused).
        method: the call, for the message (:data:`SAFE_MODE_REFUSALS`).
        target: the path it names, if any.
        nn_label: "NameNode <id>", for the message.

    Raises:
        SafeModeError: ``Cannot create directory /x. Name node is in safe mode ...``, naming
            the NameNode and how to leave safe mode.
    """
    if not safe_mode or category != OpCategory.WRITE:
        return
    action = SAFE_MODE_REFUSALS.get(method, f"Cannot {method or 'write'}")
    subject = f"{action} {target}" if target else action
    raise SafeModeError(f"{subject}. Name node is in safe mode ({nn_label}).\n{SAFE_MODE_TIP}",
                        nn=nn_label, method=method, path=target, safe_mode=True)


__all__ = ["HAState", "OpCategory", "Transition", "ALLOWED", "REQUEST_SOURCES", "SAFE_MODE_REFUSALS",
           "SAFE_MODE_TIP", "check_transition", "check_operation", "check_safe_mode"]
