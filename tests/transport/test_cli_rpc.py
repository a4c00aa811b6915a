"""``qjournal rpc``: argument parsing and one real call against a server in a
thread (the CLI runs its own event loop)."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from qjournal.cli.main import main
from qjournal.cli.rpc import parse_call_args
from qjournal.errors import FencedError
from qjournal.transport import RpcServer


def test_parse_call_args():
    assert parse_call_args(["jid=mycluster", "since_txid=0", "in_progress_ok=true", 'req={"epoch": 3}',
                            "name=a=b"]) == {"jid": "mycluster", "since_txid": 0, "in_progress_ok": True,
                                             "req": {"epoch": 3}, "name": "a=b"}
    for bad in (["novalue"], ["=3"]):
        with pytest.raises(ValueError, match="NAME=VALUE"):
            parse_call_args(bad)


class Service:
    async def rpc_state(self, jid, verbose=False):
        return {"jid": jid, "epoch": 7, "blob": b"\x01\x02", "verbose": verbose}

    async def rpc_fenced(self):
        raise FencedError("fenced by epoch 9", epoch=9)


@pytest.fixture()
def server_address():
    ready = threading.Event()
    stop: dict = {}
    address: dict = {}

    def serve():
        async def run():
            server = RpcServer(Service())
            address["hp"] = await server.start_tcp("127.0.0.1", 0)
            stop["event"] = asyncio.Event()
            stop["loop"] = asyncio.get_running_loop()
            ready.set()
            await stop["event"].wait()
            await server.stop()
        asyncio.run(run())

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    assert ready.wait(30), "server thread did not start"
    try:
        yield "%s:%d" % address["hp"]
    finally:
        stop["loop"].call_soon_threadsafe(stop["event"].set)
        t.join(30)


def test_rpc_prints_the_result_as_json(server_address, capsys):
    assert main(["rpc", server_address, "state", "jid=j1", "verbose=true"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"jid": "j1", "epoch": 7, "blob": {"$bytes": "0102"}, "verbose": True}


def test_rpc_prints_typed_errors_and_fails(server_address, capsys):
    assert main(["rpc", server_address, "fenced"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("FencedError: fenced by epoch 9") and '"epoch": 9' in err
    assert main(["rpc", server_address, "nope"]) == 1
    assert "InvalidRequestError" in capsys.readouterr().err
    assert main(["rpc", "no-port", "state"]) == 2
