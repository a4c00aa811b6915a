"""Structured logs for every qjournal daemon: one JSON object per line on stderr.

Why: a cluster run produces logs from JournalNodes, NameNodes and ZKFCs at
once; tests and the chaos harness grep them for events (``fenced``,
``journal failed``) and operators feed them to log pipelines. JSON lines with
stable fields (``ts``, ``level``, ``logger``, ``role``, ``msg`` plus any
``extra=`` fields) make that reliable, where free text does not.

Usage::

    setup_logging("journalnode", "INFO")
    log = logging.getLogger("qjournal.journalnode")
    log.info("segment started", extra={"jid": jid, "txid": txid, "epoch": epoch})
"""

from __future__ import annotations

import datetime as _dt
import json as _json
import logging
import sys
from typing import IO, Any

#: below DEBUG: one line per RPC call and answer (``qjournal.ipc.*``, seed 000's annotated log), Hadoop's TRACE
TRACE = 5
logging.addLevelName(TRACE, "TRACE")

#: attributes every LogRecord has; anything else came from ``extra=``
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message", "asctime", "taskName"}


class JsonLinesFormatter(logging.Formatter):
    """Formats a record as one JSON object: ts, level, logger, role, msg, extra fields, exc."""

    def __init__(self, role: str = "") -> None:
        super().__init__()
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _dt.datetime.fromtimestamp(record.created, _dt.timezone.utc)
                  .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
        }
        if self.role:
            out["role"] = self.role
        out["msg"] = record.getMessage()
        for name in sorted(vars(record)):
            if name not in _STANDARD_ATTRS and not name.startswith("_"):
                out[name] = _jsonable(getattr(record, name))
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _json.dumps(out, ensure_ascii=False, default=str)


class PlainFormatter(logging.Formatter):
    """Human-readable single-line logs with the extra fields appended as key=value."""

    def __init__(self, role: str = "") -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.role = role

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        extras = [f"{n}={getattr(record, n)!r}" for n in sorted(vars(record))
                  if n not in _STANDARD_ATTRS and not n.startswith("_")]
        prefix = f"[{self.role}] " if self.role else ""
        return prefix + base + (" " + " ".join(extras) if extras else "")


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (set, frozenset)):
        return sorted(map(str, v))
    return v


_HANDLER_MARK = "_qjournal_handler"


def level_number(level: str | int) -> int:
    """A level name (``TRACE``, ``DEBUG``, ``INFO``, ...) or number as a number.

    Raises:
        ValueError: unknown level name.
    """
    if isinstance(level, int):
        return level
    lv = logging.getLevelName(level.strip().upper())
    if not isinstance(lv, int):
        raise ValueError(f"unknown log level {level!r} (TRACE, DEBUG, INFO, WARNING, ERROR)")
    return lv


def parse_logger_levels(items: list[str]) -> dict[str, int]:
    """``qjournal.log.levels`` entries ``logger=LEVEL`` (log4j's ``log4j.logger.<name>=LEVEL``) as a table.

    Raises:
        ValueError: an entry without ``=``, an empty logger name, or an unknown level (the entry is named).
    """
    out: dict[str, int] = {}
    for item in items:
        name, sep, level = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{item!r}: expected logger=LEVEL, e.g. qjournal.ipc=TRACE")
        try:
            out[name.strip()] = level_number(level)
        except ValueError as e:
            raise ValueError(f"{item!r}: {e}") from None
    return out


def setup_logging(role: str, level: str | int = "INFO", json: bool = True,
                  stream: IO[str] | None = None, levels: dict[str, int] | None = None) -> logging.Handler:
    """Install the qjournal log handler on the root logger (idempotent).

    Args:
        role: daemon role written into every line (``journalnode``, ``namenode``, ...).
        level: a level name or number.
        json: JSON lines (default) or plain text.
        stream: where to write (default ``sys.stderr``).
        levels: levels of single loggers (:func:`parse_logger_levels`), e.g. ``{"qjournal.ipc": TRACE}``;
            a logger more verbose than ``level`` is heard (the handler passes everything).

    Returns:
        The installed handler (a previous qjournal handler is replaced).

    Raises:
        ValueError: unknown level name.
    """
    level = level_number(level)
    for name, lv in (levels or {}).items():
        logging.getLogger(name).setLevel(lv)
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, _HANDLER_MARK, False):
            root.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLinesFormatter(role) if json else PlainFormatter(role))
    setattr(handler, _HANDLER_MARK, True)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
