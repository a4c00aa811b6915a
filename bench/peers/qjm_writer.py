"""The quorum writer of the ``qjm-log`` cells, in a process of its own on the product's event loop.

Why: in qjournal the quorum writer (``QuorumJournalManager``) runs inside the NameNode, a process of its own on the
loop ``qjournal.event-loop`` chooses (uvloop when it is installed, the default ``auto``). The peers benchmark's load
generators share one process on asyncio's own loop, which suits clients of a server (every system's client pays
the same), but measured the writer on a loop the product does not run it on and beside the other systems' idle
clients. This process is the writer as deployed: the peers benchmark (and ``commit_cpu.py --shape log``) sends it
commands and reads back each commit's latency and the process's CPU.

Protocol: JSON lines. ``{"cmd": "run", "seconds": S, "value": N}`` opens a segment, commits one N-byte record per
sync with one in flight for S seconds, finalizes the segment, and answers ``{"lat": [seconds, ...], "cpu_s": CPU
seconds of this process during the commits, "loop": module of the event loop}``; end of input closes the writer.

Usage: ``python bench/peers/qjm_writer.py QJOURNAL_URI`` (formats the journal first).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from qjournal.cli._daemon import event_loop_factory
from qjournal.client.qjm import QuorumJournalManager
from qjournal.client.settings import QJMSettings
from qjournal.config import Configuration
from qjournal.protocol.messages import NamespaceInfo
from qjournal.protocol.segment import OP_DATA, encode_record


async def serve(uri: str) -> int:
    loop = asyncio.get_running_loop()
    qjm = QuorumJournalManager(uri, settings=QJMSettings().with_overrides(write_txns_timeout_ms=20000))
    await qjm.format(NamespaceInfo(777, "peers"))
    await qjm.recover_unfinalized_segments()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    txid = 1
    print(json.dumps({"ready": True, "loop": type(loop).__module__.split(".")[0]}), flush=True)
    try:
        while line := await reader.readline():
            req = json.loads(line)
            if req.get("cmd") != "run":
                raise SystemExit(f"qjm_writer: unknown command {line!r}")
            value = b"v" * int(req["value"])
            first = txid
            stream = await qjm.start_log_segment(first)
            lat: list[float] = []
            cpu0 = time.process_time()
            stop_at = time.perf_counter() + float(req["seconds"])
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                stream.write_raw(encode_record(txid, OP_DATA, value), txid, 1)
                stream.mark()
                txid += 1
                await stream.sync()
                lat.append(time.perf_counter() - t0)
            cpu = time.process_time() - cpu0
            await qjm.finalize_log_segment(first, txid - 1)
            print(json.dumps({"lat": lat, "cpu_s": cpu}), flush=True)
    finally:
        await qjm.close(drain_timeout_ms=0)
    return 0


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with asyncio.Runner(loop_factory=event_loop_factory(Configuration())) as runner:
        return runner.run(serve(sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
