"""NodeService: what agents call (messages <-> NodeBook); instructions ride on the replies."""

from __future__ import annotations

import grpc

from synergy.scheduler.daemon import validation
from synergy.scheduler.daemon.context import DaemonContext
from synergy.scheduler.daemon.live import ObservedTask
from synergy.scheduler.daemon.nodes import NodeBook, NodeReply
from synergy.scheduler.daemon.servicers import convert
from synergy.scheduler.daemon.servicers.admin_servicer import VERSION
from synergy.scheduler.daemon.servicers.base import Servicer, rpc
from synergy.v1 import node_pb2, node_pb2_grpc


class NodeServicer(Servicer, node_pb2_grpc.NodeServiceServicer):
    def __init__(self, ctx: DaemonContext, nodes: NodeBook) -> None:
        super().__init__(ctx)
        self.nodes = nodes

    @staticmethod
    def _tasks(tasks: list[node_pb2.TaskStatus], node_id: str) -> list[ObservedTask]:
        validation.count(tasks, "tasks", validation.MAX_TASKS_PER_NODE)
        out = []
        for i, t in enumerate(tasks):
            validation.task_status(t, i)
            task = convert.task_from_msg(t, node_id)
            if task is None:
                continue
            validation.observed_task(task.key.job_id, task.key.attempt, task.placement, i)
            out.append(task)
        return out

    def _reply(self, reply: NodeReply) -> tuple[list[node_pb2.Instruction], list[node_pb2.TaskRef]]:
        return (
            [convert.instruction_to_msg(i) for i in reply.instructions],
            [convert.task_ref(k) for k in reply.forget],
        )

    @rpc
    def RegisterNode(
        self, request: node_pb2.RegisterNodeRequest, context: grpc.ServicerContext
    ) -> node_pb2.RegisterNodeResponse:
        validation.node_id(request.node_id)
        validation.text(request.hostname, "hostname", 256)
        validation.text(request.agent_version, "agent_version", 64)
        validation.text(request.instance_id, "instance_id", 128)
        validation.count(request.gpus, "gpus", validation.MAX_GPUS_PER_NODE)
        validation.cgroup_mode(request.cgroup_mode)
        validation.gpu_type(request.gpu_type)
        record = convert.node_from_register(request)
        validation.node_resources(record.capacity, record.reserved)
        reply = self.nodes.register(record, self._tasks(list(request.tasks), request.node_id))
        instructions, _ = self._reply(reply)
        return node_pb2.RegisterNodeResponse(
            heartbeat_interval_s=self.ctx.heartbeat_interval_s,
            state=convert.node_state_to_msg(reply.state),
            state_reason=reply.reason,
            instructions=instructions,
            daemon_version=VERSION,
        )

    @rpc
    def Heartbeat(
        self, request: node_pb2.HeartbeatRequest, context: grpc.ServicerContext
    ) -> node_pb2.HeartbeatResponse:
        validation.node_id(request.node_id)
        validation.text(request.instance_id, "instance_id", 128)
        validation.count(request.telemetry.gpus, "telemetry.gpus", validation.MAX_GPUS_PER_NODE)
        validation.measurements(request.telemetry, "telemetry")
        validation.log_chunks(request.log_chunks)
        reply = self.nodes.heartbeat(
            request.node_id,
            convert.telemetry_from_msg(request.telemetry),
            self._tasks(list(request.tasks), request.node_id),
            request.instance_id,
            [convert.log_chunk_from_msg(c) for c in request.log_chunks],
            validation.text(request.not_ready_reason, "not_ready_reason"),
        )
        instructions, forget = self._reply(reply)
        return node_pb2.HeartbeatResponse(
            heartbeat_interval_s=self.ctx.heartbeat_interval_s,
            instructions=instructions,
            forget=forget,
            state=convert.node_state_to_msg(reply.state),
            state_reason=reply.reason,
            log_requests=[convert.log_request_to_msg(r) for r in reply.log_requests],
            progress=[convert.progress_to_msg(p) for p in reply.progress],
        )
