"""The quorum client's limits and timeouts, read once from the configuration.

Why a dataclass: every limit of the client (per-operation timeouts, the
per-JournalNode queue bound, the output buffer) has a configuration key
(reference §4.7) and a unit in its name (STYLE.md principle 6). Reading them
in one place means the rest of the client never touches key strings, and
tests can build a ``QJMSettings`` directly with small values.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from qjournal.config.keys import KEYS
from qjournal.protocol.journal_uri import DEFAULT_PORT

__all__ = ["QJMSettings", "DEFAULT_PORT"]

# attribute -> (configuration key, getter kind, default)
_KEYS: dict[str, tuple[str, str, int]] = {
    "start_segment_timeout_ms": ("dfs.qjournal.start-segment.timeout.ms", "duration", 20000),
    "prepare_recovery_timeout_ms": ("dfs.qjournal.prepare-recovery.timeout.ms", "duration", 120000),
    "accept_recovery_timeout_ms": ("dfs.qjournal.accept-recovery.timeout.ms", "duration", 120000),
    "finalize_segment_timeout_ms": ("dfs.qjournal.finalize-segment.timeout.ms", "duration", 120000),
    "select_input_streams_timeout_ms": ("dfs.qjournal.select-input-streams.timeout.ms", "duration", 20000),
    "get_journal_state_timeout_ms": ("dfs.qjournal.get-journal-state.timeout.ms", "duration", 120000),
    "new_epoch_timeout_ms": ("dfs.qjournal.new-epoch.timeout.ms", "duration", 120000),
    "write_txns_timeout_ms": ("dfs.qjournal.write-txns.timeout.ms", "duration", 20000),
    "operations_timeout_ms": ("dfs.qjm.operations.timeout", "duration", 60000),
    "queued_edits_limit_mb": ("dfs.qjournal.queued-edits.limit.mb", "int", 10),
    "http_open_timeout_ms": ("dfs.qjournal.http.open.timeout.ms", "duration", 60000),
    "http_read_timeout_ms": ("dfs.qjournal.http.read.timeout.ms", "duration", 60000),
    "max_frame_bytes": ("ipc.maximum.data.length", "bytes", 64 * 1024 * 1024),
    "connect_timeout_ms": ("ipc.client.connect.timeout", "duration", 20000),
    "out_of_sync_heartbeat_interval_ms": ("qjournal.qjm.out-of-sync.heartbeat.interval.ms", "duration", 1000),
    "coalesce_max_bytes": ("qjournal.qjm.coalesce.max.bytes", "bytes", 8 * 1024 * 1024),
    "catch_up_buffer_bytes": ("qjournal.qjm.catch-up.buffer.bytes", "bytes", 16 * 1024 * 1024),
    "committed_notify_delay_ms": ("qjournal.qjm.committed-txid.notify.delay.ms", "duration", 5),
    "tail_rpc_max_txns": ("dfs.ha.tail-edits.qjm.rpc.max-txns", "int", 5000),
    "tail_in_progress": ("dfs.ha.tail-edits.in-progress", "bool", 1),
    "transfer_chunk_bytes": ("qjournal.segment-transfer.chunk.bytes", "bytes", 1024 * 1024),
    "max_record_bytes": ("dfs.namenode.max.op.size", "bytes", 50 * 1024 * 1024),
}

#: configuration key -> attribute
_FIELD_OF_KEY = {key: name for name, (key, _kind, _default) in _KEYS.items()}


@dataclass(frozen=True, slots=True)
class QJMSettings:
    """Timeouts (ms) and limits of the quorum client; see ``_KEYS`` for each key."""

    start_segment_timeout_ms: int = 20000
    prepare_recovery_timeout_ms: int = 120000
    accept_recovery_timeout_ms: int = 120000
    finalize_segment_timeout_ms: int = 120000
    select_input_streams_timeout_ms: int = 20000
    get_journal_state_timeout_ms: int = 120000
    new_epoch_timeout_ms: int = 120000
    write_txns_timeout_ms: int = 20000
    operations_timeout_ms: int = 60000
    queued_edits_limit_mb: int = 10
    http_open_timeout_ms: int = 60000
    http_read_timeout_ms: int = 60000
    max_frame_bytes: int = 64 * 1024 * 1024
    connect_timeout_ms: int = 20000
    out_of_sync_heartbeat_interval_ms: int = 1000
    coalesce_max_bytes: int = 8 * 1024 * 1024
    catch_up_buffer_bytes: int = 16 * 1024 * 1024
    committed_notify_delay_ms: int = 5
    tail_rpc_max_txns: int = 5000
    tail_in_progress: int = 1  # a bool (1/0): every setting here is an int
    transfer_chunk_bytes: int = 1024 * 1024
    max_record_bytes: int = 50 * 1024 * 1024

    def timeout_ms(self, key: str) -> int:
        """The deadline of a call whose protocol row names ``key`` (``RpcMethod.timeout_key``).

        Raises:
            KeyError: no setting reads ``key``.
        """
        return getattr(self, _FIELD_OF_KEY[key])

    @property
    def queue_size_limit_bytes(self) -> int:
        """The per-JournalNode queue bound in bytes."""
        return self.queued_edits_limit_mb * 1024 * 1024

    @classmethod
    def from_conf(cls, conf: Any = None) -> "QJMSettings":
        """Read every setting from a :class:`qjournal.config.Configuration`.

        Args:
            conf: a Configuration, a plain ``{key: value}`` dict, or None for defaults.

        Returns:
            The settings.

        Raises:
            ConfigError: a malformed value (raised by the Configuration, naming key and file).
        """
        values: dict[str, int] = {}
        for f in fields(cls):
            key, kind, default = _KEYS[f.name]
            values[f.name] = _read(conf, key, kind, default)
        return cls(**values)

    def with_overrides(self, **kw: int) -> "QJMSettings":
        """A copy with some settings replaced (tests)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d.update(kw)
        return QJMSettings(**d)


def _read(conf: Any, key: str, kind: str, default: int) -> int:
    if conf is None:
        return default
    if isinstance(conf, dict):
        v = conf.get(key)
        if v is None:
            return default
        if kind == "bool":
            return int(v if isinstance(v, bool) else str(v).strip().lower() == "true")
        return int(v)
    if key not in KEYS:
        return default
    if kind == "bool":
        b = conf.get_bool(key)
        return default if b is None else int(b)
    if kind == "duration":
        v = conf.get_duration_ms(key)
    elif kind == "bytes":
        v = conf.get_bytes(key)
    else:
        v = conf.get_int(key)
    return default if v is None else int(v)
