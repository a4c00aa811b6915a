"""qjournal.transport: msgpack RPC frames over asyncio TCP/TLS and an in-memory network; the HTTP pieces.

Why a package: every process talks through the same small API (see
``docs/architecture.md``, "Transport"): :class:`RpcServer` (:mod:`.server`) serves a handler's
protocols, :class:`RpcClient` (:mod:`.client`) calls them with pipelining and deadlines, both
speaking the frames of :mod:`.frames` and sharing :mod:`.wire` (the peer, the error wire format,
coalesced writes); :class:`MemoryNetwork` replaces sockets in tests and in the deterministic
simulator. :mod:`.http` holds what every daemon's HTTP server shares (TLS policy, listening,
``/jmx``, ``/metrics``); :mod:`.tls` the TLS contexts of both.
"""

from qjournal.transport.client import (DEFAULT_CONNECT_TIMEOUT_MS, RpcClient, RpcConnector, client_options_from_conf,
                                       memory_connector, tcp_connector)
from qjournal.transport.frames import DEFAULT_MAX_FRAME_BYTES
from qjournal.transport.memory import MemoryNetwork
from qjournal.transport.server import DEFAULT_MAX_QUEUED_REQUESTS, RpcHandlers, RpcServer, server_options_from_conf
from qjournal.transport.wire import PeerInfo, current_peer, error_payload

__all__ = ["DEFAULT_CONNECT_TIMEOUT_MS", "DEFAULT_MAX_FRAME_BYTES", "DEFAULT_MAX_QUEUED_REQUESTS", "MemoryNetwork",
           "PeerInfo", "RpcClient", "RpcConnector", "RpcHandlers", "RpcServer", "client_options_from_conf",
           "current_peer", "error_payload", "memory_connector", "server_options_from_conf", "tcp_connector"]
