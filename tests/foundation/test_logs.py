"""Structured JSON-lines logging."""

from __future__ import annotations

import io
import json
import logging

import pytest

from qjournal.util.logs import setup_logging


def test_json_lines_have_fixed_and_extra_fields():
    buf = io.StringIO()
    h = setup_logging("journalnode", "DEBUG", stream=buf)
    try:
        logging.getLogger("qjournal.test").info("segment %s started", 7,
                                                 extra={"jid": "j1", "txid": 7, "raw": b"\x01"})
        try:
            raise ValueError("boom")
        except ValueError:
            logging.getLogger("qjournal.test").exception("failed")
    finally:
        logging.getLogger().removeHandler(h)
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    assert lines[0]["msg"] == "segment 7 started"
    assert lines[0]["level"] == "INFO" and lines[0]["logger"] == "qjournal.test"
    assert lines[0]["role"] == "journalnode" and lines[0]["jid"] == "j1" and lines[0]["txid"] == 7
    assert lines[0]["raw"] == "01" and lines[0]["ts"].endswith("Z")
    assert "ValueError: boom" in lines[1]["exc"]


def test_setup_is_idempotent_and_plain_mode():
    buf = io.StringIO()
    setup_logging("a", "INFO", stream=io.StringIO())
    h = setup_logging("b", "WARNING", json=False, stream=buf)
    try:
        marked = [x for x in logging.getLogger().handlers if getattr(x, "_qjournal_handler", False)]
        assert marked == [h]
        logging.getLogger("x").info("hidden")
        logging.getLogger("x").warning("shown", extra={"k": 1})
    finally:
        logging.getLogger().removeHandler(h)
    assert "hidden" not in buf.getvalue()
    assert "[b]" in buf.getvalue() and "shown" in buf.getvalue() and "k=1" in buf.getvalue()


def test_unknown_level():
    with pytest.raises(ValueError, match="unknown log level"):
        setup_logging("x", "LOUD")


def test_levels_of_single_loggers_and_trace():
    import logging

    import pytest

    from qjournal.cli._daemon import setup_daemon_logging
    from qjournal.config import Configuration
    from qjournal.errors import ConfigError
    from qjournal.util.logs import TRACE, parse_logger_levels

    assert logging.getLevelName(TRACE) == "TRACE"
    assert parse_logger_levels(["qjournal.ipc=TRACE", " qjournal.ha = debug "]) == {
        "qjournal.ipc": TRACE, "qjournal.ha": logging.DEBUG}
    for bad, why in (("qjournal.ipc", "expected logger=LEVEL"), ("=TRACE", "expected logger=LEVEL"),
                     ("qjournal.ipc=LOUD", "unknown log level 'LOUD'")):
        with pytest.raises(ValueError, match=why):
            parse_logger_levels([bad])
    with pytest.raises(ConfigError, match="qjournal.log.levels: 'qjournal.ipc=LOUD'"):
        setup_daemon_logging("t", Configuration({"qjournal.log.levels": "qjournal.ipc=LOUD"}))
    with pytest.raises(ConfigError, match="qjournal.log.level: unknown log level"):
        setup_daemon_logging("t", Configuration({"qjournal.log.level": "LOUD"}))
    try:
        setup_daemon_logging("t", Configuration({"qjournal.log.levels": "qjournal.ipc.client=TRACE"}))
        assert logging.getLogger("qjournal.ipc.client").isEnabledFor(TRACE)
        assert not logging.getLogger("qjournal.ipc.server").isEnabledFor(TRACE)
    finally:
        logging.getLogger("qjournal.ipc.client").setLevel(logging.NOTSET)
