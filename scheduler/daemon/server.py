"""The gRPC server: services, auth and decoding guards, health checking, reflection, TLS, ports.

It is a grpc.aio server on an event loop of its own thread. The synchronous server hands
every call from its polling thread to a worker thread and back; under a thousand renewals
a second those hand-offs, all contending for the GIL, were most of the latency. On one
loop a call costs its handler and the (de)serialisation, nothing more.

Auth and strict decoding wrap each method's handler once, at registration (`Guard`), rather
than as grpc.aio interceptors: an interceptor runs a coroutine chain and builds a handler on
every call, about 7% of the daemon's CPU under a thousand renewals a second.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, TypeVar

import grpc
import uvloop
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from synergy.scheduler.daemon.config import DaemonConfig
from synergy.v1 import admin_pb2, admin_pb2_grpc, job_pb2, job_pb2_grpc, node_pb2, node_pb2_grpc

SERVICE_NAMES = tuple(
    m.DESCRIPTOR.services_by_name[n].full_name
    for m, n in ((admin_pb2, "AdminService"), (job_pb2, "JobService"), (node_pb2, "NodeService"))
)
T = TypeVar("T")
#: Calls admitted at once beside the renewal streams (heartbeats, unary renewals, admin).
CALL_HEADROOM = 8192
#: Wraps one method's handler (full method name "/package.Service/Method") at registration.
Guard = Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]


class BindError(RuntimeError):
    pass


class LoopThread:
    """An asyncio event loop running on a daemon thread; `run` executes a coroutine on it.

    The loop is uvloop's (libuv): grpc.aio supports it, and its scheduling costs less CPU
    per call than asyncio's selector loop (about 5% of the daemon's CPU under load).
    Its default executor is one thread: a handler that finds the state lock taken waits
    for it there, so that waiting for the lock never stalls the loop (servicers/base.py).
    """

    def __init__(self) -> None:
        self.loop = uvloop.new_event_loop()
        self._handlers = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rpc-handlers")
        self.loop.set_default_executor(self._handlers)
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
        self._handlers.shutdown(wait=False)


class _Guarded:
    """Stands in for the server while a generated `add_*Servicer_to_server` registers its
    service: each method handler goes to the server wrapped by the guards (first = outermost)."""

    def __init__(self, server: grpc.aio.Server, guards: Sequence[Guard]) -> None:
        self._server = server
        self._guards = guards

    def add_generic_rpc_handlers(self, handlers: Sequence[grpc.GenericRpcHandler]) -> None:
        """Ignored: `add_registered_method_handlers` registers the guarded handlers both ways."""

    def add_registered_method_handlers(self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]) -> None:
        guarded = {}
        for name, handler in handlers.items():
            for guard in reversed(self._guards):
                handler = guard(f"/{service}/{name}", handler)
            guarded[name] = handler
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, guarded),))
        self._server.add_registered_method_handlers(service, guarded)


@dataclass
class Servers:
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    agent_port: int | None
    #: Plaintext loopback port the Unix socket relays to (unixsocket.py); None without a socket.
    local_port: int | None = None

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, status)


async def build(
    config: DaemonConfig,
    guards: Sequence[Guard],
    admin: admin_pb2_grpc.AdminServiceServicer,
    jobs: job_pb2_grpc.JobServiceServicer,
    nodes: node_pb2_grpc.NodeServiceServicer,
    previous_ports: tuple[int, int] = (0, 0),
    local_port: bool = False,
) -> Servers:
    """Create and bind (not start) the server; must run on the loop that will serve it.

    `local_port`: also listen on a plaintext 127.0.0.1 port, where the Unix socket relays
    its connections (unixsocket.py).

    `previous_ports` (port, agent port) are the ones an earlier run with the same state dir
    picked for `--port 0` / `--agent-port 0`: tried first, so agents and jobs that read the
    address once find the restarted daemon where it was (a new port only when that one is taken).
    """
    limit = int(config.max_message_mb * 1024 * 1024)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", 64 * 1024 * 1024),
            ("grpc.so_reuseport", 0),  # a second daemon must fail to bind, not share the port
        ],
        # Every running job rank holds a renewal stream open (one concurrent call each):
        # sized from them, with room for the rest, or at 8,192 ranks the heartbeats were refused.
        maximum_concurrent_rpcs=config.max_renewal_streams + CALL_HEADROOM,
    )
    guarded: Any = _Guarded(server, guards)
    admin_pb2_grpc.add_AdminServiceServicer_to_server(admin, guarded)
    job_pb2_grpc.add_JobServiceServicer_to_server(jobs, guarded)
    node_pb2_grpc.add_NodeServiceServicer_to_server(nodes, guarded)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    port = _bind(server, config.host, config.port, _credentials(config, client_auth=False), previous_ports[0])
    agent_port = None
    if config.tls_client_ca is not None:
        agent_port = _bind(server, config.host, config.agent_port, _credentials(config, client_auth=True),
                           previous_ports[1])
    local = _bind(server, "127.0.0.1", 0, None) if local_port else None
    return Servers(server, health_servicer, port, agent_port, local)


def _credentials(config: DaemonConfig, client_auth: bool) -> grpc.ServerCredentials | None:
    if config.tls_cert is None or config.tls_key is None:
        return None
    pair = [(config.tls_key.read_bytes(), config.tls_cert.read_bytes())]
    if not client_auth:
        return grpc.ssl_server_credentials(pair)
    assert config.tls_client_ca is not None
    return grpc.ssl_server_credentials(
        pair, root_certificates=config.tls_client_ca.read_bytes(), require_client_auth=True
    )


def _bind(server: grpc.aio.Server, host: str, port: int, creds: grpc.ServerCredentials | None,
          previous: int = 0) -> int:
    if port == 0 and previous:  # --port 0 again: the port of the last run, when it is free
        try:
            return _bind(server, host, previous, creds)
        except BindError:
            pass
    address = f"{host}:{port}"
    try:
        bound = server.add_secure_port(address, creds) if creds is not None else server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise BindError(f"cannot listen on {address} (port in use or address not local)")
    return bound
