"""Client load on a host: the workload the cluster checker judges, as a process of its own.

Why a process (``python -m qjournal.hosts.load``): clients of a deployed cluster live on their own
hosts, with their own ``/etc/qjournal`` and address; the test process is on none of the hosts.
So each client host runs this module from the installed package, and the test merges what the
clients wrote (:func:`qjournal.sim.history.merge_histories`) and judges it with
:func:`qjournal.sim.checker.check`, the checker of the simulator and the chaos runs.

* ``run --name c1 --clients N --out FILE``: N :class:`~qjournal.sim.ha_workload.NamespaceClient`
  (each in its own directory ``/<name>x<i>``, with the retries of :class:`DFSClient`) until SIGTERM;
  every history event is a JSON line in FILE, written when it happens (``time`` is
  ``time.monotonic``: one clock for every process of the machine). Prints ``READY {json}`` once the
  clients run; on SIGTERM the clients finish their call in flight (bounded) and it exits 0.
* ``snapshot --out FILE``: a probe write (a ``Progress`` event, answered by the active), a roll of
  the active's edit log, then the whole namespace as the active holds it (``NamespaceState``), as
  JSON lines in FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sys
import time
from typing import Any

from qjournal.config import Configuration
from qjournal.errors import QJournalError
from qjournal.namenode.dfs_client import DFSClient
from qjournal.protocol.protocols import CLIENT, DFSADMIN
from qjournal.sim.ha_workload import NamespaceClient, namespace_paths
from qjournal.sim.history import Event, History, NamespaceState, Progress

__all__ = ["main", "StreamedHistory"]

#: how long stopping clients may take to finish their call in flight
STOP_TIMEOUT_S = 60.0


class StreamedHistory(History):
    """A history that also writes each event as a JSON line the moment it is added."""

    def __init__(self, out: Any) -> None:
        super().__init__(clock=time.monotonic)
        self.out = out

    def add(self, event: Event) -> Event:
        e = super().add(event)
        self.out.write(History.event_to_json(e) + "\n")
        self.out.flush()
        return e


async def _run(args: argparse.Namespace, conf: Any) -> int:
    counts: dict[str, int] = {}

    def stat(k: str) -> None:
        counts[k] = counts.get(k, 0) + 1

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    rng = random.Random(args.seed)
    recent: list[str] = []
    with open(args.out, "a") as out:
        history = StreamedHistory(out)
        clients = []
        for i in range(args.clients):
            name = f"{args.name}x{i}"
            dfs = DFSClient(conf, client_id=name.encode().ljust(16, b"\0")[:16])
            c = NamespaceClient(name, dfs, history, random.Random(rng.random()), recent, stat)
            c.task = asyncio.ensure_future(c.loop(call_mean_s=args.call_mean_ms / 1000.0))
            clients.append(c)
        print("READY " + json.dumps({"role": "load", "clients": [c.name for c in clients], "pid": os.getpid()}),
              flush=True)
        waiting = asyncio.ensure_future(stop.wait())
        tasks = [c.task for c in clients if c.task is not None]
        done, _ = await asyncio.wait([waiting, *tasks], return_when=asyncio.FIRST_COMPLETED)
        for c in clients:
            c.stop = True
        _, pending = await asyncio.wait(tasks, timeout=STOP_TIMEOUT_S)
        for t in pending:
            t.cancel()
        waiting.cancel()
        failed = [t for t in tasks if t.done() and not t.cancelled() and t.exception() is not None]
    print(json.dumps({"counts": dict(sorted(counts.items()))}), flush=True)
    for t in failed:
        print(f"load: a client failed: {t.exception()!r}", file=sys.stderr)
    return 1 if failed or pending else 0


async def _snapshot(args: argparse.Namespace, conf: Any) -> int:
    with open(args.out, "a") as out:
        history = StreamedHistory(out)
        client = DFSClient(conf)
        deadline = time.monotonic() + args.timeout_s
        k = 0
        while True:
            k += 1
            try:
                await client.call(CLIENT.mkdirs, path=f"/probe/p{os.getpid()}x{k}")
                break
            except QJournalError as e:
                if time.monotonic() > deadline:
                    print(f"load snapshot: no write acknowledged within {args.timeout_s}s: {e}", file=sys.stderr)
                    return 1
                await asyncio.sleep(0.2)
        active = client.last_answered_by or client.addresses[client.current][0]
        history.add(Progress(active))
        await client.call_on(active, DFSADMIN.roll_edits)
        paths = await namespace_paths(client)
        report = await client.call_on(active, DFSADMIN.get_report)
        history.add(NamespaceState(active, "active", int(report["last_txid"]), paths))
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m qjournal.hosts.load", description=__doc__.splitlines()[0])
    p.add_argument("--conf", help="configuration directory (default: $QJOURNAL_CONF_DIR)")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run clients until SIGTERM")
    r.add_argument("--name", required=True, help="this load's name (its clients' directories: /<name>x<i>)")
    r.add_argument("--clients", type=int, default=2)
    r.add_argument("--call-mean-ms", type=float, default=50.0, help="mean pause between a client's calls")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", required=True, help="the history file (JSON lines, appended)")
    s = sub.add_parser("snapshot", help="probe write, roll, the whole namespace of the active")
    s.add_argument("--out", required=True)
    s.add_argument("--timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    try:
        conf = Configuration.load(args.conf)
        return asyncio.run(_run(args, conf) if args.cmd == "run" else _snapshot(args, conf))
    except QJournalError as e:
        print(f"load {args.cmd}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
