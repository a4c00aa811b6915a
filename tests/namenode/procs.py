"""Helpers for the real-process NameNode tests: start/stop daemons, run CLI commands."""

from __future__ import annotations

import os
import subprocess
import sys

from qjournal.util.proc import Daemon, qjournal_argv, start_daemon


def file_ha_conf(t: str) -> dict[str, str]:
    """Keys of an HA pair ``nn1,nn2`` of nameservice ``ns1`` over the file:// shared edits dir ``<t>/shared``,
    superuser ``hdfs``; the rpc addresses are placeholders until the NameNodes report theirs."""
    return {"dfs.nameservices": "ns1", "dfs.ha.namenodes.ns1": "nn1,nn2",
            "dfs.namenode.shared.edits.dir": f"file://{t}/shared",
            "dfs.ha.tail-edits.period": "100ms", "qjournal.namenode.superuser": "hdfs",
            "dfs.client.failover.sleep.base.millis": "10",
            "dfs.namenode.rpc-address.ns1.nn1": "127.0.0.1:1", "dfs.namenode.rpc-address.ns1.nn2": "127.0.0.1:1"}


class Cluster:
    """Daemons and -D options of one test; ``close()`` kills whatever is still running."""

    def __init__(self, tmp):
        self.tmp = str(tmp)
        self.daemons: list[Daemon] = []
        self.common: dict[str, str] = {"qjournal.log.json": "false"}

    def opts(self, extra: dict | None = None) -> list[str]:
        out = []
        for k, v in sorted({**self.common, **(extra or {})}.items()):
            out += ["-D", f"{k}={v}"]
        return out

    def run(self, *args: str, extra: dict | None = None, check: bool = True,
            timeout_s: float = 60.0) -> subprocess.CompletedProcess:
        argv = qjournal_argv(*self.opts(extra), *args)
        r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def start(self, name: str, *args: str, extra: dict | None = None) -> Daemon:
        log = os.path.join(self.tmp, f"{name}.log")
        d = start_daemon(name, qjournal_argv(*self.opts(extra), *args), log_path=log,
                         ready_timeout_s=60.0)
        self.daemons.append(d)
        return d

    def close(self) -> None:
        for d in self.daemons:
            try:
                d.kill()
            except Exception as e:  # keep killing the others
                print(f"could not kill {d.name}: {e}", file=sys.stderr)
