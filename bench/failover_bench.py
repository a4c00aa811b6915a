"""Failover benchmark: time from SIGKILL of the active NameNode to the first write accepted by the new active.

Why: automatic failover is the product's promise; this measures it on real
processes (a local cluster from :mod:`qjournal.localcluster.launcher`) and breaks
each failover into its phases using the daemons' structured (JSON-lines) logs
and the ZKFC event timeline:

* detection  : SIGKILL -> the surviving ZKFC sees the lock free (the dead NN's ZKFC
               noticed it was not responding and quit, or its session expired);
* election   : lock free -> lock acquired by the survivor;
* fencing    : fencing of the old active (graceful attempt + methods), 0 if not needed;
* recovery   : transition_to_active start -> the QJM's last recovery log line
               (new epoch + recovery of the unfinalized segment);
* catch-up   : -> the NameNode logs "transitioned to active" (tail the rest, open a segment);
* first write: -> the first ``create`` accepted by the new active (a probe retrying every few ms).

Modes: ``nn`` kills only the NameNode (its ZKFC survives and reports it dead);
``node`` kills the NameNode and its ZKFC together (a machine crash: only the
ZooKeeper session timeout can reveal it). Session timeouts 2 s and 5 s.

The floors measured in the same run: a NameNode RPC round trip, a ZooKeeper
ephemeral create+delete, and the configured detection bound (health-check
interval in ``nn`` mode, the session timeout in ``node`` mode). Ratios are
printed against the detection bound.

Usage: .venv/bin/python bench/failover_bench.py [--rounds 20] [--timeouts 2000,5000] [--modes nn,node]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import getpass
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from qjournal.localcluster.launcher import LocalCluster  # noqa: E402
from qjournal.errors import RpcTimeoutError, StandbyError, TransportError  # noqa: E402
from qjournal.transport import RpcClient  # noqa: E402

USER = getpass.getuser()
HEALTH_CHECK_INTERVAL_MS = 500  # what the launcher configures


def _ts(iso: str) -> float:
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def _read_json_log(path: str, since: float) -> list[dict]:
    out = []
    try:
        with open(path, "rb") as f:
            for raw in f:
                try:
                    rec = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(rec, dict) and "ts" in rec and _ts(rec["ts"]) >= since:
                    rec["_t"] = _ts(rec["ts"])
                    out.append(rec)
    except OSError:
        pass
    return out


async def _probe_first_write(host: str, port: int, path: str, deadline_s: float) -> float:
    """Retry ``create`` on the survivor until accepted; returns the wall time of the acceptance."""
    client_id = os.urandom(16)
    call_id = 0
    end = time.monotonic() + deadline_s
    c = None
    while time.monotonic() < end:
        try:
            if c is None:
                c = await RpcClient.connect_tcp(host, port, connect_timeout_ms=1000)
            await c.call("create", timeout_ms=5000, path=path, user=USER, groups=[USER],
                         client_id=client_id, call_id=call_id)
            t = time.time()
            await c.close()
            return t
        except (StandbyError, TransportError, RpcTimeoutError, OSError) as e:
            if isinstance(e, (TransportError, RpcTimeoutError, OSError)) and c is not None:
                await c.close()
                c = None
            await asyncio.sleep(0.003)  # probe period
    raise RuntimeError(f"no write accepted by {host}:{port} within {deadline_s}s")


async def _background_writer(conf, stop: asyncio.Event, counter: list) -> None:
    """A light steady workload so each failover has an in-progress segment to recover."""
    from qjournal.namenode.dfs_client import DFSClient

    async with DFSClient(conf) as client:
        await client.mkdirs("/bench")
        i = 0
        while not stop.is_set():
            try:
                await client.create(f"/bench/bg{os.getpid()}-{i}")
                counter[0] += 1
            except Exception:
                await asyncio.sleep(0.01)
            i += 1


def _event_time(events: list, name: str, after: float, **match) -> float | None:
    for t, ev, details in events:
        if ev == name and t >= after and all(details.get(k) == v for k, v in match.items()):
            return t
    return None


async def _floors(cluster: LocalCluster) -> dict:
    from kazoo.client import KazooClient

    act = cluster.active_namenode()
    host, _, port = cluster.procs[act].address.rpartition(":")
    c = await RpcClient.connect_tcp(host, int(port))
    rtts = []
    for _ in range(200):
        t = time.perf_counter()
        await c.call("get_service_status", timeout_ms=5000)
        rtts.append(time.perf_counter() - t)
    await c.close()
    zk = KazooClient(hosts=cluster.zk.connect_string)

    def zk_rtt() -> list[float]:
        zk.start(timeout=10)
        out = []
        for i in range(50):
            t = time.perf_counter()
            zk.create(f"/bench-floor-{i}", b"x", ephemeral=True)
            zk.delete(f"/bench-floor-{i}")
            out.append(time.perf_counter() - t)
        zk.stop()
        zk.close()
        return out
    zks = await asyncio.to_thread(zk_rtt)
    return {"nn_rpc_ms": statistics.median(rtts) * 1000, "zk_create_delete_ms": statistics.median(zks) * 1000}


async def run_config(session_timeout_ms: int, mode: str, rounds: int, keep: bool) -> dict:
    from qjournal.config.conf import Configuration

    run_dir = tempfile.mkdtemp(prefix=f"qj-failover-{mode}-{session_timeout_ms}-")
    cluster = LocalCluster(run_dir, session_timeout_ms=session_timeout_ms, out=lambda s: None)
    results = []
    try:
        await asyncio.to_thread(cluster.up)
        floors = await _floors(cluster)
        conf = Configuration.load(cluster.conf_dir)
        stop, counter = asyncio.Event(), [0]
        bg = asyncio.create_task(_background_writer(conf, stop, counter))
        try:
            for r in range(rounds):
                victim = await asyncio.to_thread(cluster.active_namenode)
                assert victim is not None, "no active NameNode"
                survivor = "nn2" if victim == "nn1" else "nn1"
                await asyncio.sleep(0.3)  # let the background workload fill the open segment
                t_kill = time.time()
                await asyncio.to_thread(cluster.kill, victim, signal.SIGKILL)
                if mode == "node":
                    await asyncio.to_thread(cluster.kill, f"zkfc-{victim}", signal.SIGKILL)
                host, _, port = cluster.procs[survivor].address.rpartition(":")
                t_write = await _probe_first_write(host, int(port), f"/bench/probe-{session_timeout_ms}-{mode}-{r}",
                                                   60.0)
                zst = (await asyncio.to_thread(cluster.zkfc_states, True)).get(f"zkfc-{survivor}") or {}
                events = [(e[0], e[1], e[2]) for e in zst.get("events", [])]
                t_free = _event_time(events, "lock_free", t_kill)
                t_acq = _event_time(events, "lock_acquired", t_kill)
                t_fs = _event_time(events, "fence_old_active_start", t_kill)
                t_fd = _event_time(events, "fence_old_active_done", t_kill)
                t_ts = _event_time(events, "transition_to_active_start", t_kill)
                t_td = _event_time(events, "transition_to_active_done", t_kill)
                nnlog = _read_json_log(cluster.procs[survivor].log, t_kill)
                t_active = next((x["_t"] for x in nnlog if x.get("msg") == "transitioned to active"), None)
                qjm = [x["_t"] for x in nnlog if x.get("logger", "").startswith("qjournal.client")
                       and t_ts is not None and x["_t"] >= t_ts - 0.002 and (t_active is None or x["_t"] <= t_active)]
                t_rec_end = max(qjm) if qjm else t_ts
                row = {"round": r, "victim": victim, "total_s": t_write - t_kill}
                if None not in (t_free, t_acq, t_ts, t_td, t_active):
                    row.update({
                        "detection_s": t_free - t_kill,
                        "election_s": t_acq - t_free,
                        "fencing_s": (t_fd - t_fs) if (t_fs and t_fd) else 0.0,
                        "recovery_s": t_rec_end - t_ts,
                        "catchup_s": t_active - t_rec_end,
                        "first_write_s": t_write - t_active,
                    })
                results.append(row)
                print(f"  [{mode} {session_timeout_ms} ms] round {r + 1:2d}/{rounds}: {victim} killed, "
                      f"{survivor} accepted a write after {row['total_s']:.2f}s", flush=True)
                # bring the victim back as the new standby for the next round
                await asyncio.to_thread(cluster.restart, victim)
                if mode == "node":
                    await asyncio.to_thread(cluster.restart, f"zkfc-{victim}")
                deadline = time.monotonic() + 60
                while True:
                    st = await asyncio.to_thread(cluster.zkfc_states)
                    z = st.get(f"zkfc-{victim}") or {}
                    if z.get("elector_state") == "STANDBY" and z.get("health") == "SERVICE_HEALTHY":
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{victim} did not come back as standby: {st}")
                    await asyncio.sleep(0.05)  # status poll period
        finally:
            stop.set()
            await asyncio.gather(bg, return_exceptions=True)
    finally:
        await asyncio.to_thread(cluster.down)
        if keep:
            print(f"  logs kept in {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)
    return {"session_timeout_ms": session_timeout_ms, "mode": mode, "rounds": results, "floors": floors,
            "background_writes": counter[0]}


def _pct(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def report(res: dict) -> list[str]:
    rows = res["rounds"]
    tot = [r["total_s"] for r in rows]
    bound_ms = HEALTH_CHECK_INTERVAL_MS if res["mode"] == "nn" else res["session_timeout_ms"]
    lines = [f"mode={res['mode']} session_timeout={res['session_timeout_ms']} ms rounds={len(rows)}  "
             f"floors: NN RPC {res['floors']['nn_rpc_ms']:.2f} ms, ZK create+delete "
             f"{res['floors']['zk_create_delete_ms']:.2f} ms, detection bound {bound_ms} ms",
             f"  total (kill -> first write): p50 {statistics.median(tot):.2f}s  max {max(tot):.2f}s  "
             f"p50/bound {statistics.median(tot) * 1000 / bound_ms:.2f}x"]
    phases = ["detection_s", "election_s", "fencing_s", "recovery_s", "catchup_s", "first_write_s"]
    full = [r for r in rows if "detection_s" in r]
    if full:
        lines.append("  " + "  ".join(f"{p[:-2]} p50 {statistics.median([r[p] for r in full]) * 1000:.0f} ms "
                                      f"max {max(r[p] for r in full) * 1000:.0f}" for p in phases))
    return lines


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--timeouts", default="2000,5000", help="ZooKeeper session timeouts in ms")
    ap.add_argument("--modes", default="nn", help="nn (kill the NameNode) and/or node (NameNode + its ZKFC)")
    ap.add_argument("--node-rounds", type=int, default=5, help="rounds for the node mode")
    ap.add_argument("--json", help="write all rounds here")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (logs)")
    args = ap.parse_args()
    all_res = []
    for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
        for tmo in [int(x) for x in args.timeouts.split(",")]:
            rounds = args.rounds if mode == "nn" else args.node_rounds
            print(f"== mode {mode}, session timeout {tmo} ms, {rounds} rounds", flush=True)
            all_res.append(await run_config(tmo, mode, rounds, args.keep))
    print()
    for res in all_res:
        for line in report(res):
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(all_res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
