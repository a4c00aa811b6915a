"""The public surface of qjournal.transport: what other parts import, and
docstrings on every public call (house rule)."""

from __future__ import annotations

import inspect

import qjournal.transport as transport
from qjournal.transport import alloc, client, frames, memory, pki, server, tls, wire


def test_package_exports():
    assert transport.__all__ == [
        "DEFAULT_CONNECT_TIMEOUT_MS", "DEFAULT_MAX_FRAME_BYTES", "DEFAULT_MAX_QUEUED_REQUESTS", "MemoryNetwork",
        "PeerInfo", "RpcClient", "RpcConnector", "RpcHandlers", "RpcServer", "client_options_from_conf",
        "current_peer", "error_payload", "memory_connector", "server_options_from_conf", "tcp_connector",
    ]
    for name in transport.__all__:
        assert getattr(transport, name) is not None


def test_every_public_call_has_a_docstring():
    missing = []
    for module in (alloc, client, frames, memory, pki, server, tls, wire):
        assert module.__doc__ and "why" in module.__doc__.lower(), module.__name__
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                if not inspect.getdoc(obj):
                    missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj) and obj.__module__ == module.__name__:
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or not callable(member) and not isinstance(member, (classmethod,
                                                                                              property)):
                        continue
                    if isinstance(member, (classmethod, staticmethod)):
                        member = member.__func__
                    if isinstance(member, property):
                        member = member.fget
                    if not inspect.getdoc(member):
                        missing.append(f"{module.__name__}.{name}.{attr}")
    # MemoryTransport implements asyncio.Transport: its methods inherit that documentation
    assert missing == [], missing


def test_allocator_tuning_is_applied_once_and_can_be_disabled(monkeypatch):
    from qjournal.transport import alloc
    monkeypatch.setattr(alloc, "_done", False)
    monkeypatch.setattr(alloc, "_applied", False)
    monkeypatch.setenv("QJOURNAL_MALLOC_TUNING", "0")
    assert alloc.tune_allocator() is False
    monkeypatch.setattr(alloc, "_done", False)
    monkeypatch.delenv("QJOURNAL_MALLOC_TUNING")
    first = alloc.tune_allocator()
    assert alloc.tune_allocator() is first  # once per process: the second call only reports
    import platform
    if platform.libc_ver()[0] == "glibc":
        assert first is True


def test_a_typo_in_rpc_concurrent_is_reported(caplog):
    class Handler:
        rpc_concurrent = ("get_manifest", "ping")

        async def rpc_ping(self):
            return "pong"

    server.RpcServer(Handler(), name="jn-test")
    assert [r.getMessage() for r in caplog.records if r.name == "qjournal.transport.server"] == [
        "jn-test: rpc_concurrent names 'get_manifest' but the handler has no coroutine rpc_get_manifest"
    ]
