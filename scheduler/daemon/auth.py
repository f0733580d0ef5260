"""Authentication and authorisation, a guard on every method handler: who may call what.

* AdminService: a user (users.py), known from a user token (the state dir's admin.token is
  the built-in admin's), from the Unix socket's peer credentials (unixsocket.py), or from a
  client certificate's CN on the mutual-TLS port; a plain `user` may call only
  USER_METHODS (their own jobs are checked by the servicer), an `admin` everything;
* NodeService: the cluster token (agents), plus a verified client certificate when the
  daemon runs with --tls-client-ca;
* JobService: any job's own token (the servicer then checks the job_id matches);
* health checking and reflection: open, so standard tools work.

No credential, or one nobody knows (revoked included) -> UNAUTHENTICATED; a valid one that
may not call the method -> PERMISSION_DENIED. Tokens are compared in constant time and never
logged. Every AdminService call that changes something is logged as an `audit` event
naming who made it, how they were authenticated, and how it ended.
"""

from __future__ import annotations

import hmac
import logging
import os
from typing import Any, AsyncIterator, Callable, Mapping, Sequence

import grpc

from synergy.scheduler.daemon.context import token_digest
from synergy.scheduler.daemon.logs import event
from synergy.scheduler.daemon.metrics import Metrics
from synergy.scheduler.daemon.unixsocket import LocalPeer
from synergy.scheduler.daemon.users import ADMIN as ADMIN_ROLE
from synergy.scheduler.daemon.users import USER as USER_ROLE
from synergy.scheduler.daemon.users import Caller, UserBook
from synergy.scheduler.jobspec.rules import USER_RE

ADMIN, CLUSTER, JOB = "admin", "cluster", "job"
ROLES = {
    "synergy.v1.AdminService": ADMIN,
    "synergy.v1.NodeService": CLUSTER,
    "synergy.v1.JobService": JOB,
}
WHO = {ADMIN: "a user token", CLUSTER: "the cluster token", JOB: "a job token"}
#: What a plain user may call (the servicer checks that a job is theirs); the rest is the
#: admins' (a method added later is admin-only until it is listed here).
USER_METHODS = frozenset(
    {"SubmitJob", "ListJobs", "DescribeJob", "TailLogs", "CancelJob", "ListNodes", "GetClusterStatus", "WhoAmI"}
)
#: AdminService methods that change nothing (and hand out no database): not audited.
READ_ONLY = frozenset(
    {"ListJobs", "DescribeJob", "TailLogs", "ListNodes", "GetClusterStatus", "WhoAmI", "ListUsers"}
)
NO_CREDENTIALS = (
    "no credentials: send 'authorization: Bearer <token>' metadata (a user token), connect over "
    "synergyd's Unix socket, or present a client certificate on its mutual-TLS port"
)


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


class Refused(Exception):
    """A call the guard turns away, with its status code and message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


class AuthedContext:
    """The call's context with its authenticated caller (`caller`) and what the servicer
    adds to the call's audit event (`audit`); everything else is the real context's."""

    def __init__(self, context: grpc.aio.ServicerContext, caller: Caller) -> None:
        self._context = context
        self.caller = caller
        self.audit: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


def caller_of(context: Any) -> Caller:
    """The caller of an AdminService call (the guard wrapped its context)."""
    return context.caller


def audit_note(context: Any, **fields: Any) -> None:
    """Add what the call acted on (job, node, user) to its audit event."""
    notes = getattr(context, "audit", None)
    if notes is not None:
        notes.update(fields)


class AuthGuard:
    """Wraps each method handler of the three services, once, when the server registers it
    (server.Guard): a per-call interceptor cost a coroutine chain and a fresh handler on
    every one of a thousand renewals a second."""

    def __init__(
        self,
        users: UserBook,
        cluster_token: str,
        job_tokens: Mapping[str, int],
        metrics: Metrics,
        log: logging.Logger,
        agent_mtls: bool = False,
        local_peers: Mapping[str, LocalPeer] | None = None,
        admin_uids: Sequence[int] = (),
    ) -> None:
        self.users = users
        self._cluster = cluster_token.encode()
        self._jobs = job_tokens
        self._metrics = metrics
        self._log = log
        self._agent_mtls = agent_mtls
        #: Relay connections of the Unix socket (unixsocket.UnixFront.peers); empty without one.
        self.local_peers: Mapping[str, LocalPeer] = local_peers if local_peers is not None else {}
        #: Unix uids that are admins on the socket whatever the user table says: root, and the
        #: daemon's own user (who can read admin.token anyway).
        self._admin_uids = frozenset(admin_uids or {0, os.geteuid()})

    def identify(self, token: str) -> str | None:
        """Which kind of credential a token is (ADMIN: any active user's token)."""
        raw = token.encode()
        if hmac.compare_digest(raw, self._cluster):
            return CLUSTER
        if token_digest(token) in self._jobs:
            return JOB
        if self.users.by_token(token) is not None:
            return ADMIN
        return None

    def caller(self, context: grpc.aio.ServicerContext) -> Caller:
        """The user behind an AdminService call, or Refused. A token wins over the socket and
        the certificate (it is what the caller chose to present)."""
        token = bearer_token(context.invocation_metadata())
        if token:
            user = self.users.by_token(token)
            if user is not None:
                return Caller(user.name, user.role, "token")
            kind = self.identify(token)
            if kind is None:
                raise Refused(grpc.StatusCode.UNAUTHENTICATED, "invalid or revoked token")
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"{WHO[kind]} may not call AdminService (it needs a user token)")
        local = self.local_peers.get(context.peer())
        if local is not None:
            return self._local_caller(local)
        names = context.auth_context().get("x509_common_name") or ()
        if names:
            name = names[0].decode(errors="replace") if isinstance(names[0], bytes) else str(names[0])
            user = self.users.get(name)
            if user is None or not user.active:
                why = ("was revoked" if user is not None
                       else "is no synergy user (an admin adds it: synergy admin users add)")
                raise Refused(grpc.StatusCode.UNAUTHENTICATED, f"client certificate CN {name!r} {why}")
            return Caller(user.name, user.role, "client certificate")
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, NO_CREDENTIALS)

    def _local_caller(self, local: LocalPeer) -> Caller:
        via = f"unix socket (uid {local.uid})"
        if not local.name or not USER_RE.fullmatch(local.name):
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"uid {local.uid} has no Unix user name synergy can use ({local.name or 'none'!r})")
        user = self.users.get(local.name)
        if user is not None and not user.active:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, f"user {local.name!r} was revoked by {user.revoked_by}")
        role = ADMIN_ROLE if local.uid in self._admin_uids else user.role if user is not None else USER_ROLE
        return Caller(local.name, role, via)

    def _deny(self, name: str, code: grpc.StatusCode, presented: str) -> None:
        self._metrics.rpc_errors.labels(name, code.name).inc()
        event(self._log, "rpc.denied", logging.WARNING, method=name, code=code.name, presented=presented)

    def __call__(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        service, _, name = method.lstrip("/").partition("/")
        role = ROLES.get(service)
        if role is None:
            return handler
        if role == ADMIN:
            return self._guard_admin(name, handler)
        peer_cert = role == CLUSTER and self._agent_mtls

        async def check(context: grpc.aio.ServicerContext) -> grpc.aio.ServicerContext:
            token = bearer_token(context.invocation_metadata())
            who = self.identify(token) if token else None
            if who != role:
                if who is None:
                    code = grpc.StatusCode.UNAUTHENTICATED
                    message = "missing 'authorization: Bearer <token>' metadata" if not token else "invalid token"
                else:
                    code = grpc.StatusCode.PERMISSION_DENIED
                    message = f"{WHO[who]} may not call {service.split('.')[-1]} (it needs {WHO[role]})"
                self._deny(name, code, who or "none")
                await context.abort(code, message)
            if peer_cert and not context.auth_context().get("x509_pem_cert"):
                await context.abort(
                    grpc.StatusCode.UNAUTHENTICATED,
                    "agents must connect with a client certificate (mutual TLS, the agent port)",
                )
            return context

        return _wrap(handler, method, check)

    def _guard_admin(self, name: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        audited = name not in READ_ONLY
        admin_only = name not in USER_METHODS

        async def check(context: grpc.aio.ServicerContext) -> grpc.aio.ServicerContext:
            caller: Caller | None = None
            try:
                caller = self.caller(context)
                if admin_only and not caller.admin:
                    raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                                  f"{name} is for admins; {caller.name} has the role {caller.role}")
            except Refused as refused:
                self._deny(name, refused.code, "none" if caller is None else caller.role)
                if audited:
                    who = {} if caller is None else {"user": caller.name, "role": caller.role, "via": caller.via}
                    event(self._log, "audit", logging.WARNING, method=name, outcome=refused.code.name,
                          reason=refused.message, **who)
                await context.abort(refused.code, refused.message)
                raise  # never reached: abort raises
            return AuthedContext(context, caller)

        def done(context: Any, outcome: str) -> None:
            if audited:
                caller = context.caller
                level = logging.INFO if outcome == "OK" else logging.WARNING
                event(self._log, "audit", level, method=name, user=caller.name, role=caller.role, via=caller.via,
                      outcome=outcome, **context.audit)

        return _wrap(handler, "/" + name, check, done)


Check = Callable[[grpc.aio.ServicerContext], Any]
Done = Callable[[Any, str], None]


def _outcome(context: Any) -> str:
    try:
        code = context.code()
    except Exception:  # noqa: BLE001 (a context that cannot say: the call failed somehow)
        code = None
    if isinstance(code, grpc.StatusCode):
        return code.name
    return "OK" if code in (None, 0) else str(code)


def _wrap(handler: grpc.RpcMethodHandler, method: str, check: Check, done: Done | None = None) -> grpc.RpcMethodHandler:
    """`handler` with `check` first (it aborts, or returns the context the handler gets) and
    `done(context, outcome)` after."""
    if handler.unary_stream is not None:
        stream = handler.unary_stream

        async def checked_stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            ctx = await check(context)
            try:
                async for item in stream(request, ctx):
                    yield item
            finally:
                if done is not None:
                    done(ctx, _outcome(context))

        return grpc.unary_stream_rpc_method_handler(
            checked_stream,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    if handler.stream_stream is not None:
        both = handler.stream_stream

        async def checked_both(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            ctx = await check(context)  # once, when the stream opens
            try:
                async for item in both(requests, ctx):
                    yield item
            finally:
                if done is not None:
                    done(ctx, _outcome(context))

        return grpc.stream_stream_rpc_method_handler(
            checked_both,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
    inner = handler.unary_unary
    if inner is None:
        raise TypeError(f"{method}: only unary-unary, unary-stream and stream-stream methods are guarded")

    async def checked(request: Any, context: grpc.aio.ServicerContext) -> Any:
        ctx = await check(context)
        try:
            return await inner(request, ctx)
        finally:
            if done is not None:
                done(ctx, _outcome(context))

    return grpc.unary_unary_rpc_method_handler(
        checked, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )
