"""qjournal.transport: msgpack RPC frames over asyncio TCP/TLS and an in-memory network; the HTTP pieces.

Why a package: every process talks through the same small API (see
``docs/architecture.md``, "Transport"): :class:`RpcServer` serves a handler's
``rpc_<method>`` coroutines, :class:`RpcClient` calls them with pipelining and
deadlines, and :class:`MemoryNetwork` replaces sockets in tests and in the
deterministic simulator. :mod:`.http` holds what every daemon's HTTP server shares (TLS
policy, listening, ``/jmx``, ``/metrics``); :mod:`.tls` the TLS contexts of both.
"""

from qjournal.transport.frames import DEFAULT_MAX_FRAME_BYTES
from qjournal.transport.memory import MemoryNetwork
from qjournal.transport.rpc import PeerInfo, RpcClient, RpcServer, current_peer

__all__ = ["DEFAULT_MAX_FRAME_BYTES", "MemoryNetwork", "PeerInfo", "RpcClient", "RpcServer", "current_peer"]
