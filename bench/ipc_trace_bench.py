"""IPC tracing's cost: CPU per RPC call with tracing off, against a tree without tracing, and with it on.

Why: the trace lines of ``qjournal.ipc`` (``transport/ipc_trace.py``) must cost nothing on the hot path while they
are off (the default). This measures the CPU of one process running an ``RpcServer`` and an ``RpcClient`` on the
in-memory network (no sockets: what remains is the RPC layer's own work, which is where the check sits), for
sequential calls and for 256 pipelined calls, in fresh processes alternating between the trees, and prints the
medians. CPU time (``time.process_time``), not wall time, so a busy neighbour moves it less.

Run: ``.venv/bin/python bench/ipc_trace_bench.py --base-src /tmp/base/src`` (``git archive <commit> src | tar -x -C
/tmp/base``: a tree before tracing), about a minute.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "src")

CHILD = r"""
import asyncio, json, logging, sys, time
from qjournal.transport import MemoryNetwork, RpcClient, RpcServer
if sys.argv[2] == "on":
    from qjournal.util.logs import TRACE
    logging.getLogger("qjournal.ipc").setLevel(TRACE)
    logging.getLogger("qjournal.ipc").addHandler(logging.NullHandler())
    logging.getLogger("qjournal.ipc").propagate = False

class Echo:
    async def rpc_echo(self, data):
        return data

async def main(calls):
    net = MemoryNetwork()
    server = RpcServer(Echo(), name="echo")
    await server.start_memory(net, "echo")
    client = await RpcClient.connect_memory(net, "echo")
    payload = b"x" * 1024
    for _ in range(500):
        await client.call("echo", data=payload)
    t0 = time.process_time()
    for _ in range(calls):
        await client.call("echo", data=payload)
    seq = (time.process_time() - t0) / calls
    t0 = time.process_time()
    for _ in range(calls // 256):
        await asyncio.gather(*(client.call("echo", data=payload) for _ in range(256)))
    pipe = (time.process_time() - t0) / (calls // 256 * 256)
    await client.close()
    await server.stop()
    print(json.dumps({"seq_us": seq * 1e6, "pipe_us": pipe * 1e6}))

asyncio.run(main(int(sys.argv[1])))
"""


def run(src: str, calls: int, trace: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(src))
    out = subprocess.run([sys.executable, "-c", CHILD, str(calls), trace], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-src", required=True, help="src/ of a tree without IPC tracing")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    cells = {"before (no tracing)": (args.base_src, "off"), "tracing off": (SRC, "off"),
             "tracing on (TRACE, lines dropped)": (SRC, "on")}
    got: dict[str, list[dict]] = {k: [] for k in cells}
    with open("/proc/loadavg") as f:
        print("load average at start:", f.read().split()[:3])
    for _ in range(args.reps):
        for name, (src, trace) in cells.items():
            got[name].append(run(src, args.calls, trace))
    with open("/proc/loadavg") as f:
        print("load average at end:", f.read().split()[:3])
    base = statistics.median(r["seq_us"] for r in got["before (no tracing)"])
    base_p = statistics.median(r["pipe_us"] for r in got["before (no tracing)"])
    print(f"{'cell':<36} {'sequential CPU/call':>20} {'pipelined CPU/call':>20}")
    for name, rows in got.items():
        seq = statistics.median(r["seq_us"] for r in rows)
        pipe = statistics.median(r["pipe_us"] for r in rows)
        print(f"{name:<36} {seq:>14.1f} us ({seq / base:4.2f}x) {pipe:>12.1f} us ({pipe / base_p:4.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
