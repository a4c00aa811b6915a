"""The decisions of the ActiveStandbyElector as pure functions.

Why a separate module: the elector's shell (``elector.py``) talks to kazoo threads,
futures and timers; what it *decides* on each wake-up depends only on a handful
of values: the connection state, whether it wants to be in the election, who owns
the lock znode, which session it holds the lock with, and its own state. Those
decisions are here, with no I/O, clock or threads, and are table-tested
(tests/ha/test_ha_elector_rules.py), as STYLE.md asks of protocol rules.

A wake-up is decided in two steps:

1. :func:`connection_step` (before reading ZooKeeper): ``SUSPENDED`` while active
   -> neutral mode; ``LOST`` (session expired) while holding the lock -> the lock
   is lost with the session; ``CONNECTED`` with a *new* session while we held the
   lock under the old one -> lost as well. Only when connected do we go on to read
   the lock.
2. :func:`lock_step` (after reading the lock's ``ephemeralOwner``): release our
   lock if we left the election; keep or take the active role if the lock is ours;
   become standby if someone else holds it; otherwise try to create it, unless we
   are held off (after a failure or a cede).

Invariants:

1. The elector never becomes (or stays) active unless the lock's owner is its
   current session (``lock_step`` returns ``BECOME_ACTIVE``/``RESTORE_ACTIVE``
   only when ``owner == session``).
2. A lock held under an old session is never trusted: it is forgotten as soon
   as the connection is ``LOST`` or comes back with another session id.
3. SUSPENDED is not LOST: a suspended active goes neutral, keeps its lock
   record, and is restored only if the same session still owns the lock.
"""

from __future__ import annotations

import enum

from qjournal.ha.zk_client import Conn

__all__ = ["ElectorState", "ConnAction", "LockAction", "connection_step", "lock_step"]


class ElectorState(str, enum.Enum):
    INIT = "INIT"          # not in the election (or not yet decided)
    STANDBY = "STANDBY"    # someone else holds the lock
    ACTIVE = "ACTIVE"      # we hold the lock and our service was made active
    NEUTRAL = "NEUTRAL"    # connection suspended: we do not know


class ConnAction(str, enum.Enum):
    NONE = "none"
    ENTER_NEUTRAL = "enter_neutral"    # state NEUTRAL, callback enter_neutral_mode
    LOSE_LOCK = "lose_lock"            # forget the lock, state STANDBY, callback become_standby
    FORGET_LOCK = "forget_lock"        # forget the lock record only (we were not active)


class LockAction(str, enum.Enum):
    NONE = "none"
    RELEASE = "release"                # delete our lock (we left the election)
    RESTORE_ACTIVE = "restore_active"  # neutral -> active: the same session still holds the lock
    BECOME_ACTIVE = "become_active"    # fence, breadcrumb, become active
    BECOME_STANDBY = "become_standby"  # someone else holds the lock
    WAIT = "wait"                      # lock free but we are held off
    TRY_CREATE = "try_create"          # lock free: try to take it


_ACTIVEISH = (ElectorState.ACTIVE, ElectorState.NEUTRAL)


def connection_step(conn: Conn, state: ElectorState, holder_session: int | None,
                    session: int | None) -> tuple[ConnAction, bool]:
    """Decide what the connection state means before looking at the lock.

    Args:
        conn: the connection state.
        state: the elector's state.
        holder_session: the session we created our lock with, or None if we hold none.
        session: the current session id (None when there is none).

    Returns:
        ``(action, read_lock)``: what to do, and whether to go on and read the lock
        (only when connected).
    """
    if conn is Conn.SUSPENDED:
        return (ConnAction.ENTER_NEUTRAL if state is ElectorState.ACTIVE else ConnAction.NONE), False
    if conn is Conn.LOST:
        if holder_session is not None or state in _ACTIVEISH:
            return ConnAction.LOSE_LOCK, False                    # invariant 2
        return ConnAction.NONE, False
    if holder_session is not None and holder_session != session:
        if state in _ACTIVEISH:
            return ConnAction.LOSE_LOCK, True                     # invariant 2
        return ConnAction.FORGET_LOCK, True
    return ConnAction.NONE, True


def lock_step(wants_election: bool, owner: int | None, session: int | None, state: ElectorState,
              held_off: bool) -> LockAction:
    """Decide what to do once the lock's owner is known.

    Args:
        wants_election: the controller wants this node in the election.
        owner: the lock's ``ephemeralOwner`` session id, or None if there is no lock.
        session: our current session id.
        state: the elector's state.
        held_off: we must not take a free lock yet (back-off after a failure, or a cede).

    Returns:
        The :class:`LockAction`.
    """
    ours = owner is not None and owner == session
    if not wants_election:
        return LockAction.RELEASE if ours else LockAction.NONE
    if ours:                                                       # invariant 1
        if state is ElectorState.NEUTRAL:
            return LockAction.RESTORE_ACTIVE                      # invariant 3
        if state is ElectorState.ACTIVE:
            return LockAction.NONE
        return LockAction.BECOME_ACTIVE
    if owner is not None:
        return LockAction.NONE if state is ElectorState.STANDBY else LockAction.BECOME_STANDBY
    return LockAction.WAIT if held_off else LockAction.TRY_CREATE
