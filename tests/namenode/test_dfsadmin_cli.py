"""``cli/dfsadmin.py`` without processes: the argument table and the ``-report`` layout (a failed journal,
a NameNode that did not answer)."""

from __future__ import annotations

import pytest

from qjournal.cli.dfsadmin import COMMANDS, args_ok, format_namenode, format_summary
from qjournal.errors import TransportError


@pytest.mark.parametrize("cmd,args,ok", [
    ("-report", [], True), ("-report", ["-live"], False),
    ("-safemode", [], False), ("-safemode", ["enter"], True), ("-safemode", ["forceExit"], True),
    ("-safemode", ["wait"], True), ("-safemode", ["on"], False), ("-safemode", ["get", "get"], False),
    ("-saveNamespace", [], True), ("-saveNamespace", ["-beforeShutdown"], True),
    ("-saveNamespace", ["-now"], False), ("-saveNamespace", ["-beforeShutdown", "x"], False),
    ("-rollEdits", [], True), ("-rollEdits", ["1"], False),
])
def test_arguments(cmd, args, ok):
    assert args_ok(COMMANDS[cmd], args) is ok


def test_report_layout():
    r = {"nn_id": "nn1", "state": "active", "safe_mode": True, "namespace_id": 7, "cluster_id": "CID",
         "files": 2, "directories": 3, "last_txid": 40, "last_checkpoint_txid": 30, "last_checkpoint_time_ms": 0,
         "journals": [{"manager": "file:///a", "stream": "failed: boom", "disabled": "true", "required": "false"},
                      {"manager": "qjournal://h:1/ns1", "stream": "", "disabled": "false", "required": "true"}]}
    assert format_summary(r) == [
        "Safe mode is ON", "Namespace ID: 7", "Cluster ID: CID", "Files and directories: 5 (2 files, 3 directories)",
        "Last transaction ID: 40", "Last checkpoint: txid 30", "Journals (2):",
        "    file:///a [FAILED] failed: boom", "    qjournal://h:1/ns1 [OK, required]"]
    assert format_namenode("nn1", "h:1", r) == ["Name: h:1 (nn1)", "HA state: active", "Safe mode: ON",
                                                "Last transaction ID: 40", "Last checkpoint txid: 30"]
    assert format_namenode("nn2", "h:2", TransportError("connection refused")) == [
        "Name: h:2 (nn2)", "Error: TransportError: connection refused"]
