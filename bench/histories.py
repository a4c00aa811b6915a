"""Generated edit-log histories for the pipeline and decoder benchmarks, made once and kept.

Why a module: ``bench/pipeline_bench.py`` and ``bench/decode_bench.py`` measure the same kind of
history (``qjournal.pipeline.generate``, one JournalNode copy, segments of ``roll`` txids); ten
million edits take a quarter of an hour to generate, so both keep them under their ``--work``
directory, named by seed, size and roll, and list the finalized segments the same way.
"""

from __future__ import annotations

import os
import shutil
import sys
import time

from qjournal.pipeline.generate import GenOptions, generate
from qjournal.protocol.segment import parse_segment_file_name

#: the journal id and node the histories are written under
JID, NODE = "qjournal", "jn1"


def history(work: str, seed: int, txns: int, roll: int) -> str:
    """The directory of the history (generated on first use; ``generator.json`` marks it complete)."""
    out = os.path.join(work, f"hist-{seed}-{txns}-{roll}")
    if not os.path.exists(os.path.join(out, "generator.json")):
        shutil.rmtree(out, ignore_errors=True)
        t = time.monotonic()
        generate(GenOptions(seed=seed, txns=txns, out=out, nodes=1, roll_every_txns=roll))
        print(f"  generated {txns} txids in {time.monotonic() - t:.1f} s", file=sys.stderr)
    return out


def journal_dir(hist: str) -> str:
    """The node's journal directory (``<node>/<jid>``, a ``file://`` journal)."""
    return os.path.join(hist, NODE, JID)


def segments(hist: str) -> list[tuple[str, int, int]]:
    """``(path, start txid, end txid)`` of every finalized segment, in txid order."""
    cur = os.path.join(journal_dir(hist), "current")
    out = []
    for name in os.listdir(cur):
        parsed = parse_segment_file_name(name)
        if parsed is not None and parsed.end_txid is not None:
            out.append((os.path.join(cur, name), parsed.start_txid, parsed.end_txid))
    return sorted(out, key=lambda s: s[1])
