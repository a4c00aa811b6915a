"""The recovery rules (protocol/recovery.py) told as scenarios: tests/testdata/recovery/*.txt.

Each file replays stories of seed 000 §2.10 (and the bugs they guard against):
what each JournalNode answers, and what the new writer decides. Commands:

* ``epoch`` -- input ``<node> promised=<epoch>``: the epoch the writer proposes.
* ``newest-segment`` -- input ``<node> last=<txid>|none``: the segment to recover.
* ``recover segment=<txid>`` -- input one ``prepare_recovery`` answer per line:
  ``<node> none|ip <s>-<e>|fin <s>-<e> [writer=<e>] [accepted=<e>] [committed=<txid>]
  [digest=<hex>]``; output the decision and the committed-txid check.

Regenerate the expected traces with ``pytest tests/protocol/test_recovery_scenarios_data.py --rewrite``.
"""

from __future__ import annotations

import pathlib

import pytest

from qjournal.errors import InvariantViolation, QuorumError
from qjournal.protocol import recovery
from qjournal.protocol.messages import PrepareRecoveryResponse, SegmentState

from datadriven import Case, run_file  # tests/datadriven.py (tests/ is on sys.path: tests/conftest.py)

DATA = pathlib.Path(__file__).resolve().parent.parent / "testdata" / "recovery"


def _answer(words: list[str], where: str) -> PrepareRecoveryResponse:
    kind, rest = words[0], words[1:]
    seg = None
    if kind in ("ip", "fin"):
        start, _, end = rest[0].partition("-")
        seg_args = [int(start), int(end), kind == "ip"]
        rest = rest[1:]
    elif kind != "none":
        raise ValueError(f"{where}: expected none|ip|fin, got {kind!r}")
    opts = dict(w.split("=", 1) for w in rest)
    if kind != "none":
        digest = int(opts["digest"], 16) if "digest" in opts else None
        seg = SegmentState(*seg_args, digest)
    return PrepareRecoveryResponse(
        seg, int(opts["accepted"]) if "accepted" in opts else None, int(opts.get("writer", 1)),
        int(opts["committed"]) if "committed" in opts else None)


def _nodes(case: Case) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in case.input}


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def handle(case: Case) -> list[str]:
    where = f"line {case.line}"
    if case.cmd == "epoch":
        promised = [int(dict(w.split("=", 1) for w in ws)["promised"]) for _, ws in sorted(_nodes(case).items())]
        try:
            return [f"new epoch {recovery.next_epoch(promised)}"]
        except (QuorumError, InvariantViolation) as e:
            return [_error(e)]
    if case.cmd == "newest-segment":
        lasts = []
        for _, ws in sorted(_nodes(case).items()):
            v = dict(w.split("=", 1) for w in ws)["last"]
            lasts.append(None if v == "none" else int(v))
        seg = recovery.segment_to_recover(lasts)
        return ["nothing to recover" if seg is None else f"recover segment {seg}"]
    if case.cmd == "recover":
        segment_txid = int(case.args["segment"])
        answers = {n: _answer(ws, where) for n, ws in _nodes(case).items()}
        try:
            d = recovery.choose_recovery_source(segment_txid, answers)
        except InvariantViolation as e:
            return [_error(e)]
        out = [f"decision: {d.reason}" + ("" if d.state is None else f" {d.state} from {', '.join(d.sources)}")]
        try:
            recovery.check_committed_not_lost(d, answers)
            out.append("committed txids: kept")
        except InvariantViolation as e:
            out.append(_error(e))
        return out
    raise ValueError(f"{where}: unknown command {case.cmd!r}")


@pytest.mark.parametrize("path", sorted(DATA.glob("*.txt")), ids=lambda p: p.name)
def test_recovery_scenario(path, rewrite):
    run_file(path, handle, rewrite)


def test_there_are_scenarios():
    assert len(list(DATA.glob("*.txt"))) >= 3
