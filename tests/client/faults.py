"""Send-side RPC fault injection for the quorum client (reference §6.4 "WrapEveryCall").

Every RPC a QuorumJournalManager sends to a node is counted per node (1, 2, 3, ...). A
``FaultPlan`` decides, per (node, call index, method), whether the call is dropped *instead of*
being sent: the JournalNode never sees it and the client gets ``TransportError``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable

from qjournal.errors import TransportError
from qjournal.transport import RpcClient


class FaultPlan:
    def __init__(self, should_fail: Callable[[str, int, str], bool] | None = None) -> None:
        self.should_fail = should_fail or (lambda node, i, method: False)
        self.counts: dict[str, int] = defaultdict(int)
        self.trace: list[tuple[str, int, str, bool]] = []

    def connector_factory(self, network: Any, src: str = "qjm"):
        def factory(name: str):
            async def connect():
                client = await RpcClient.connect_memory(network, name, src=src, connect_timeout_ms=1000)
                return FaultyClient(client, name, self)
            return connect
        return factory


class FaultyClient:
    def __init__(self, client: Any, name: str, plan: FaultPlan) -> None:
        self._c = client
        self.name = name
        self.plan = plan

    @property
    def is_closed(self) -> bool:
        return self._c.is_closed

    async def call(self, method: str, timeout_ms: int | None = None, **kw: Any) -> Any:
        self.plan.counts[self.name] += 1
        i = self.plan.counts[self.name]
        fail = self.plan.should_fail(self.name, i, method)
        self.plan.trace.append((self.name, i, method, fail))
        if fail:
            raise TransportError(f"injected failed IPC {i} ({method}) to {self.name}")
        return await self._c.call(method, timeout_ms=timeout_ms, **kw)

    async def close(self) -> None:
        await self._c.close()


def fail_calls(rules: dict[str, Callable[[int, str], bool]]) -> FaultPlan:
    """A plan from per-node predicates ``(call index, method) -> fail?``."""
    return FaultPlan(lambda node, i, m: node in rules and rules[node](i, m))
