"""The agent's side of NodeService: the channel, the messages it sends, and reconnect back-off.

Agents only dial out (docs/daemon.md, "Why instructions ride on heartbeat replies"): every
heartbeat carries the full task list, and the reply says what to change.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

import grpc

from synergy.agent.report import Hold, task_usage
from synergy.agent.tasks import Phase, Task
from synergy.agent.telemetry import NodeSample
from synergy.v1 import common_pb2, node_pb2, node_pb2_grpc

RPC_TIMEOUT_S = 5.0
#: Reconnect quickly after a daemon restart (gRPC's default back-off grows to two minutes).
CHANNEL_OPTIONS = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 2000),
]
_PHASES = {
    Phase.STARTING: node_pb2.TASK_STATE_STARTING,
    Phase.RUNNING: node_pb2.TASK_STATE_RUNNING,
    Phase.STOPPING: node_pb2.TASK_STATE_STOPPING,
    Phase.EXITED: node_pb2.TASK_STATE_EXITED,
}


@dataclass
class Backoff:
    """Jittered exponential back-off while the daemon is unreachable (agents never stampede)."""

    initial_s: float = 0.2
    max_s: float = 5.0
    attempt: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def next(self) -> float:
        delay = min(self.max_s, self.initial_s * 2**self.attempt)
        self.attempt += 1
        return delay * self.rng.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.attempt = 0


def open_channel(address: str, tls_ca: str = "", tls_cert: str = "", tls_key: str = "") -> grpc.Channel:
    if tls_ca or tls_cert:
        creds = grpc.ssl_channel_credentials(
            root_certificates=Path(tls_ca).read_bytes() if tls_ca else None,
            private_key=Path(tls_key).read_bytes() if tls_key else None,
            certificate_chain=Path(tls_cert).read_bytes() if tls_cert else None,
        )
        return grpc.secure_channel(address, creds, options=CHANNEL_OPTIONS)
    return grpc.insecure_channel(address, options=CHANNEL_OPTIONS)


def task_status(task: Task, node_id: str, latest: NodeSample | None = None,
                hold: Hold | None = None) -> node_pb2.TaskStatus:
    """The task as the daemon sees it, with its latest usage sample and throttle (when any)."""
    k = task.key
    msg = node_pb2.TaskStatus(
        ref=node_pb2.TaskRef(job_id=k.job_id, attempt=k.attempt, rank=k.rank),
        state=_PHASES[task.phase],
        exit_code=task.exit_code,
        pid=task.pid,
        gpu_indices=list(task.gpu_indices),
        message=task.message,
        placement=common_pb2.Placement(
            node_id=node_id, gpus=task.share.gpus, cpus=task.share.cpus, mem_gb=task.share.mem_gb
        ),
        oom_killed=task.oom_killed,
        cores=sorted(task.grant.cores) if task.alive else [],
    )
    sample = latest.tasks.get(str(k)) if latest is not None and task.alive else None
    if sample is not None:
        msg.usage.CopyFrom(task_usage(sample))
    if hold is not None and task.alive:
        msg.throttle.CopyFrom(hold.to_msg())
    return msg


class NodeClient:
    """NodeService with the cluster token; raises grpc.RpcError for the caller to classify."""

    def __init__(self, address: str, token: str, tls_ca: str = "", tls_cert: str = "", tls_key: str = "") -> None:
        self.address = address
        self.channel = open_channel(address, tls_ca, tls_cert, tls_key)
        self.stub = node_pb2_grpc.NodeServiceStub(self.channel)
        self.metadata = (("authorization", f"Bearer {token}"),)

    def register(self, request: node_pb2.RegisterNodeRequest) -> node_pb2.RegisterNodeResponse:
        return self.stub.RegisterNode(request, metadata=self.metadata, timeout=RPC_TIMEOUT_S)

    def heartbeat(self, request: node_pb2.HeartbeatRequest) -> node_pb2.HeartbeatResponse:
        return self.stub.Heartbeat(request, metadata=self.metadata, timeout=RPC_TIMEOUT_S)

    def close(self) -> None:
        self.channel.close()


def statuses(tasks: Iterable[Task], node_id: str, latest: NodeSample | None = None,
             holds: Mapping[str, Hold] | None = None) -> list[node_pb2.TaskStatus]:
    holds = holds or {}
    return [task_status(t, node_id, latest, holds.get(str(t.key))) for t in tasks]
