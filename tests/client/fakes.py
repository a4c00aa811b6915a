"""Fake RPC clients for testing the quorum client without JournalNodes."""

from __future__ import annotations

import asyncio
from typing import Any, Callable



class FakeRpc:
    """Records every call; ``behaviour(method, kw)`` returns a result, raises, or returns an
    awaitable (to block a call until the test releases it)."""

    def __init__(self, behaviour: Callable[[str, dict], Any] | None = None) -> None:
        self.calls: list[tuple[str, dict]] = []
        self.behaviour = behaviour or (lambda m, kw: None)
        self.is_closed = False
        self.in_flight = 0
        self.max_in_flight = 0
        self.connects = 0

    async def call(self, method: str, timeout_ms: int | None = None, **kw: Any) -> Any:
        self.calls.append((method, kw))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            r = self.behaviour(method, kw)
            if asyncio.isfuture(r) or asyncio.iscoroutine(r):
                r = await r
            return r
        finally:
            self.in_flight -= 1

    async def close(self) -> None:
        self.is_closed = True


def connector_for(rpc: FakeRpc):
    async def connect():
        rpc.is_closed = False  # a reconnect reaches the same fake node
        rpc.connects += 1
        return rpc
    return connect
