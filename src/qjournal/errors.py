"""The typed exception tree of qjournal.

Why one module: expected failures (a fenced writer, a journal out of sync, a
lost quorum, a timeout, a corrupt record) must reach callers as the *same* types
whether they were raised in-process or by a remote JournalNode/NameNode. The
transport serialises an error as ``(type name, message, fields)`` and rebuilds
it on the other side through :data:`REMOTE_ERRORS`.

Two kinds of error, never mixed (STYLE.md principle 5):

* :class:`QJournalError` and its subclasses: expected failures. Messages carry
  the journal id, epoch and txids involved.
* :class:`InvariantViolation`: a broken protocol invariant (a programmer error
  or corrupted consensus state). Nothing catches it; the quorum layer re-raises
  it even when a quorum of other nodes succeeded.
"""

from __future__ import annotations

from typing import Any


class QJournalError(Exception):
    """Root of every expected qjournal failure.

    Subclasses may carry structured ``fields`` that survive the wire.
    """

    def __init__(self, message: str = "", **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields

    def __reduce__(self):  # keep picklable for multiprocessing / sim snapshots
        return (_rebuild, (type(self).__name__, self.message, self.fields))


def _rebuild(name: str, message: str, fields: dict) -> "QJournalError":
    return make_error(name, message, fields)


class InvariantViolation(BaseException):
    """A protocol invariant is broken: a programmer error or corrupted consensus state.

    It derives from ``BaseException``, outside the ``Exception`` tree, so that no
    ``except Exception`` handler can swallow it; the few handlers that see every
    exception pass it on (``tests/test_architecture.py`` checks), and a daemon that
    meets one ends (:func:`qjournal.util.tasks.fatal`).
    """


# --- input / format ------------------------------------------------------------

class ConfigError(QJournalError):
    """A configuration key is unknown or has a malformed value (names key and file)."""


class CorruptRecordError(QJournalError):
    """A record failed its checksum or framing checks (names file/offset/txid)."""


class CorruptSegmentError(QJournalError):
    """A segment's header or layout is unusable."""


class RecordTooLargeError(QJournalError):
    """A record exceeds the configured maximum record size."""


# --- journal interface (HDFS-1580) --------------------------------------------

class JournalError(QJournalError):
    """Generic failure of a journal back end."""


class JournalNotFormattedError(JournalError):
    """The journal storage has not been formatted."""


class JournalAlreadyFormattedError(JournalError):
    """Format refused: the journal holds data and force was not given."""


class JournalLockedError(JournalError):
    """Another writer holds the journal (single-writer rule)."""


class JournalRejoiningError(JournalError):
    """A JournalNode formatted from its peers refuses to vote in a writer's election or recovery
    until it holds again every committed txid it may have lost with its disk."""


class CacheMissError(JournalError):
    """``get_journaled_edits`` cannot answer from the JournalNode's edit cache (disabled, empty,
    or the asked txid is older than what it holds); the reader falls back to streaming
    segments. ``fields`` carry ``since_txid`` and the cache's ``lowest_txid``."""


class GapInTransactionsError(JournalError):
    """A requested txid range crosses a hole in the log."""


class NoJournalsAvailableError(JournalError):
    """A JournalSet has no journal (or lost a required one) that can take the write."""


class UnknownSchemeError(JournalError):
    """No journal back end is registered for a URI scheme."""


# --- JournalNode protocol ------------------------------------------------------

class EpochError(QJournalError):
    """A request carried an epoch older than the node's promise (the writer is fenced)."""


class FencedError(EpochError):
    """This writer was fenced by a newer epoch; it must stop writing."""


class JournalOutOfSyncError(QJournalError):
    """Writer and JournalNode disagree on segment or txid."""


class LoggerTooFarBehindError(QJournalError):
    """A per-node client queue exceeded its byte limit."""


class NamespaceMismatchError(QJournalError):
    """The namespace/cluster id of a request does not match the journal's."""


class InvalidRequestError(QJournalError):
    """A request was malformed: bad journal id, bad arguments, unknown call."""


class SegmentNotFoundError(QJournalError):
    """No segment starts at the requested txid."""


# --- quorum / transport --------------------------------------------------------

class QuorumError(QJournalError):
    """Too many nodes failed for a quorum; ``fields['errors']`` maps node -> message."""


class RpcTimeoutError(QJournalError):
    """A call did not complete before its deadline."""


class TransportError(QJournalError):
    """A connection failed or was closed."""


class FrameTooLargeError(TransportError):
    """A frame exceeded the maximum frame size."""


class ProtocolError(TransportError):
    """The peer sent bytes that are not a valid frame."""


class RemoteError(QJournalError):
    """An error raised remotely whose type is not known locally."""


# --- NameNode / HA -------------------------------------------------------------

class StandbyError(QJournalError):
    """Operation not allowed in this HA state; the client should try the other NameNode."""


class ObserverRetryOnActiveError(StandbyError):
    """An observer has not applied the client's state id within its bounded wait
    (``dfs.namenode.observer.read.wait.ms``); retriable: the client reads from another
    observer or from the active (HDFS's ``ObserverRetryOnActiveException``). Fields:
    ``state_id`` (the observer's), ``client_state_id``, ``waited_ms``."""


class SafeModeError(QJournalError):
    """The NameNode's safe mode forbids the call (HDFS's ``SafeModeException``): a namespace write
    or an edit-log roll while safe mode is on (``dfsadmin -safemode enter``), or ``saveNamespace``
    while it is off. Safe mode belongs to one NameNode, so this is not a failover error: the
    client gets it at once. Fields: ``nn`` (the NameNode), ``method``, ``path``, ``safe_mode``."""


class ServiceFailedError(QJournalError):
    """A HA service call failed (transition refused, unhealthy)."""


class HealthCheckFailedError(QJournalError):
    """monitor-health reported the service unhealthy."""


class FileNotFoundError_(QJournalError):
    """No such file or directory (named with a trailing underscore to avoid the builtin)."""


class FileAlreadyExistsError(QJournalError):
    """File exists."""


class NotADirectoryError_(QJournalError):
    """A path component is not a directory."""


class DirectoryNotEmptyError(QJournalError):
    """Directory is not empty."""


class PermissionDeniedError(QJournalError):
    """Permission denied."""


class AuthenticationError(QJournalError):
    """The peer's identity cannot be established: its certificate names no principal, or no
    ``hadoop.security.auth_to_local`` rule maps the principal to a short user name (Hadoop's
    ``NoMatchingRule``). Fields: ``principal`` when one was found."""


class AuthorizationError(QJournalError):
    """Service-level authorization (``hadoop.security.authorization``) refused the call, or a caller
    claimed to be another user than its certificate's (Hadoop's ``AuthorizationException``). The
    message names the user, its principal and the protocol; fields: ``user``, ``principal``,
    ``protocol``, ``method``."""


class FencingError(QJournalError):
    """No fencing method succeeded."""


class ElectorError(QJournalError):
    """The elector could not do its job on ZooKeeper (names the znode and the session)."""


# --- ZooKeeper client (qjournal.ha.zk_client) ------------------------------------
# The ZooKeeper client interface raises these, whichever implementation (kazoo or the
# simulator's ZooKeeper) is behind it, so the elector's decisions never depend on kazoo.

class ZkError(QJournalError):
    """A ZooKeeper operation failed; ``fields`` name the path and the session."""


class ZkNoNodeError(ZkError):
    """The znode does not exist."""


class ZkNodeExistsError(ZkError):
    """The znode already exists."""


class ZkBadVersionError(ZkError):
    """The znode's version is not the expected one (a conditional set or delete lost a race)."""


class ZkNotEmptyError(ZkError):
    """The znode has children."""


class ZkNoAuthError(ZkError):
    """The session's credentials do not allow the operation on this znode (ACL)."""


class ZkConnectionLossError(ZkError):
    """The connection dropped before the answer came: the operation may or may not have happened."""


class ZkSessionExpiredError(ZkError):
    """The session expired: its ephemeral znodes are gone and its watches will not fire."""


class ZkOperationTimeoutError(ZkError):
    """No answer within the operation timeout."""


def _collect() -> dict[str, type[BaseException]]:
    out: dict[str, type[BaseException]] = {}
    stack: list[type[BaseException]] = [QJournalError]
    while stack:
        cls = stack.pop()
        out[cls.__name__] = cls
        stack.extend(cls.__subclasses__())
    out[InvariantViolation.__name__] = InvariantViolation
    return out


#: type name -> class, for rebuilding errors that crossed the wire.
REMOTE_ERRORS: dict[str, type[BaseException]] = _collect()


def register_error(cls: type[QJournalError]) -> type[QJournalError]:
    """Class decorator for error types defined outside this module."""
    REMOTE_ERRORS[cls.__name__] = cls
    return cls


def make_error(name: str, message: str, fields: dict | None = None) -> BaseException:
    """Rebuild an error from its wire form; unknown names become :class:`RemoteError`."""
    cls = REMOTE_ERRORS.get(name)
    if cls is None:
        return RemoteError(f"{name}: {message}", remote_type=name, **(fields or {}))
    if cls is InvariantViolation:
        return InvariantViolation(message)
    err = cls(message, **(fields or {}))
    return err
