"""Authentication, a guard on every method handler: which token may call which service.

* AdminService: the admin token (CLI);
* NodeService: the cluster token (agents), plus a verified client certificate when the
  daemon runs with --tls-client-ca;
* JobService: any job's own token (the servicer then checks the job_id matches);
* health checking and reflection: open, so standard tools work.

Missing or unknown token -> UNAUTHENTICATED; a valid token of the wrong kind ->
PERMISSION_DENIED. Tokens are compared in constant time and never logged.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any, AsyncIterator, Mapping, Sequence

import grpc

from synergy.scheduler.daemon.context import token_digest
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.metrics import Metrics

ADMIN, CLUSTER, JOB = "admin", "cluster", "job"
ROLES = {
    "synergy.v1.AdminService": ADMIN,
    "synergy.v1.NodeService": CLUSTER,
    "synergy.v1.JobService": JOB,
}
WHO = {ADMIN: "the admin token", CLUSTER: "the cluster token", JOB: "a job token"}


def bearer_token(metadata: Sequence[tuple[str, Any]] | None) -> str | None:
    for key, value in metadata or ():
        if key == "authorization":
            text = value.decode() if isinstance(value, bytes) else str(value)
            scheme, _, token = text.partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


def caller_job(context: grpc.ServicerContext, job_tokens: Mapping[str, int]) -> int:
    """The job id the (already authenticated) job token of this call belongs to."""
    token = bearer_token(context.invocation_metadata())
    return job_tokens[token_digest(token or "")]


class AuthGuard:
    """Wraps each method handler of the three services, once, when the server registers it
    (server.Guard): a per-call interceptor cost a coroutine chain and a fresh handler on
    every one of a thousand renewals a second."""

    def __init__(
        self,
        admin_token: str,
        cluster_token: str,
        job_tokens: Mapping[str, int],
        metrics: Metrics,
        log: logging.Logger,
        agent_mtls: bool = False,
    ) -> None:
        self._admin = admin_token.encode()
        self._cluster = cluster_token.encode()
        self._jobs = job_tokens
        self._metrics = metrics
        self._log = log
        self._agent_mtls = agent_mtls

    def identify(self, token: str) -> str | None:
        raw = token.encode()
        if hmac.compare_digest(raw, self._admin):
            return ADMIN
        if hmac.compare_digest(raw, self._cluster):
            return CLUSTER
        if token_digest(token) in self._jobs:
            return JOB
        return None

    def __call__(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, _, name = method.lstrip("/").partition("/")
        role = ROLES.get(service)
        if role is None:
            return handler
        peer_cert = role == CLUSTER and self._agent_mtls

        async def check(context: grpc.aio.ServicerContext) -> None:
            token = bearer_token(context.invocation_metadata())
            who = self.identify(token) if token else None
            if who != role:
                if who is None:
                    code = grpc.StatusCode.UNAUTHENTICATED
                    message = "missing 'authorization: Bearer <token>' metadata" if not token else "invalid token"
                else:
                    code = grpc.StatusCode.PERMISSION_DENIED
                    message = f"{WHO[who]} may not call {service.split('.')[-1]} (it needs {WHO[role]})"
                self._metrics.rpc_errors.labels(name, code.name).inc()
                event(self._log, "rpc.denied", logging.WARNING, method=name, code=code.name, presented=who or "none")
                await context.abort(code, message)
            if peer_cert and not context.auth_context().get("x509_pem_cert"):
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "agents must connect with a client certificate (mutual TLS, the agent port)",
                )

        if handler.unary_stream is not None:
            stream = handler.unary_stream

            async def checked_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
                await check(context)
                async for item in stream(request, context):
                    yield item

            return grpc.unary_stream_rpc_method_handler(
                checked_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        inner = handler.unary_unary
        if inner is None:
            raise TypeError(f"{method}: only unary-unary and unary-stream methods are guarded")

        async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
            await check(context)
            return await inner(request, context)

        return grpc.unary_unary_rpc_method_handler(
            checked, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
