"""Node commands: nodes (and nodes loan / reclaim, Lyra's capacity loaning), cordon, drain, resume."""
from __future__ import annotations

import argparse
from typing import Callable

from rich.text import Text

from synergy.scheduler.cli.connection import Client
from synergy.scheduler.cli.errors import CliError, ExitCode
from synergy.scheduler.cli.output import (Result, enum_word, fmt_age, fmt_bandwidth, fmt_bytes, fmt_num,
                                          fmt_pressure, state_text, table, to_plain)
from synergy.v1 import admin_pb2, common_pb2

Connect = Callable[[], Client]

#: command -> (RPC, request type, help, what it does)
ACTIONS = {
    "cordon": ("CordonNode", admin_pb2.CordonNodeRequest, "stop placing new jobs on a node",
               "Stop placing new jobs on NODE; jobs already running there keep their allocation."),
    "drain": ("DrainNode", admin_pb2.DrainNodeRequest, "move every job off a node",
              "Cordon NODE and ask its jobs to checkpoint and leave; they are requeued and placed "
              "elsewhere by the next rounds."),
    "resume": ("ResumeNode", admin_pb2.ResumeNodeRequest, "make a cordoned or drained node schedulable",
               "Make NODE schedulable again after cordon or drain."),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nodes", help="list nodes",
                       description="List registered nodes: state, GPU type, free/allocatable resources, "
                                   "jobs, last heartbeat.")
    p.add_argument("--wide", action="store_true",
                   help="more telemetry: RSS, I/O, pressure (PSI), GPU use, cgroup mode, "
                        "tasks the contention eliminator throttles")
    p.set_defaults(func=list_nodes)
    verbs = p.add_subparsers(dest="nodes_verb", metavar="{loan,reclaim}")
    q = verbs.add_parser("loan", help="loan inference nodes to training",
                         description="Put NODEs in the loaned pool: only loanable jobs (elastic or short) run "
                                     "there, and `synergy nodes reclaim` hands them back (Lyra's capacity loaning).")
    q.add_argument("node_ids", nargs="+", metavar="NODE", help="node id (see `synergy nodes`)")
    q.set_defaults(func=loan_nodes)
    q = verbs.add_parser("reclaim", help="hand loaned nodes back to inference",
                         description="Return N loaned nodes to inference, chosen to preempt the fewest jobs; "
                                     "their jobs checkpoint, stop and are requeued (elastic jobs that keep their "
                                     "minimum elsewhere are relaunched smaller there instead), or are preempted "
                                     "at the deadline.")
    q.add_argument("count", type=int, metavar="N", help="how many loaned nodes to hand back")
    q.add_argument("--deadline-s", type=float, default=0.0, metavar="S",
                   help="seconds the jobs there have to checkpoint and exit (default: the daemon's stop timeout)")
    q.add_argument("--reason", default="", help="why (kept in the preempted jobs' history)")
    q.set_defaults(func=reclaim_nodes)
    for name, (_, _, short, long) in ACTIONS.items():
        p = sub.add_parser(name, help=short, description=long)
        p.add_argument("node", metavar="NODE", help="node id (see `synergy nodes`)")
        p.add_argument("--reason", required=name != "resume", default="",
                       help="why (shown by `synergy nodes` and kept in moved jobs' history)"
                       + ("" if name == "resume" else "; required"))
        p.set_defaults(func=change_node, action=name)


def list_nodes(args: argparse.Namespace, connect: Connect) -> Result:
    with connect() as client:
        nodes = list(client.call("ListNodes", admin_pb2.ListNodesRequest()).nodes)
    wide = getattr(args, "wide", False)
    rows = [
        (n.node_id, state_text(_state(n)), n.gpu_type or "-", n.pool or "-",
         f"{fmt_num(n.free.gpus)}/{fmt_num(n.allocatable.gpus)}",
         f"{fmt_num(n.free.cpus)}/{fmt_num(n.allocatable.cpus)}",
         f"{fmt_num(n.free.mem_gb)}/{fmt_num(n.allocatable.mem_gb)}",
         f"{fmt_num(n.telemetry.cpu_util_pct)}%" if n.HasField("telemetry") else "-",
         _bandwidth(n),
         *(_wide(n) if wide else ()),
         _jobs(n),
         fmt_age(n.last_heartbeat_unix_s) + " ago" if n.last_heartbeat_unix_s else "-",
         "; ".join(x for x in (MEMORY_NOT_ENFORCED if memory_unenforced(n) else "", n.state_reason) if x))
        for n in nodes
    ]
    columns = ["NODE", "STATE", "TYPE", "POOL", "FREE GPUS", "FREE CPUS", "FREE GB", "CPU", "MEM BW/PEAK",
               *(WIDE_COLUMNS if wide else ()), "JOBS", "HEARTBEAT", "REASON"]
    view = table(None, columns, rows) if rows else Text("no nodes registered")
    return Result({"nodes": [to_plain(n) for n in nodes]}, view)


def change_node(args: argparse.Namespace, connect: Connect) -> Result:
    method, request_type, _, _ = ACTIONS[args.action]
    with connect() as client:
        node = client.call(method, request_type(node_id=args.node, reason=args.reason)).node
    line = Text.assemble("node ", (node.node_id, "bold"), ": ", state_text(_state(node)))
    if node.state_reason:
        line.append(f" ({node.state_reason})")
    return Result(to_plain(node), line)


def loan_nodes(args: argparse.Namespace, connect: Connect) -> Result:
    with connect() as client:
        nodes = list(client.call("LoanNodes", admin_pb2.LoanNodesRequest(node_ids=args.node_ids)).nodes)
    text = Text("loaned: " + ", ".join(n.node_id for n in nodes))
    return Result({"nodes": [to_plain(n) for n in nodes]}, text)


def reclaim_nodes(args: argparse.Namespace, connect: Connect) -> Result:
    if not 1 <= args.count < 2**32:  # uint32 on the wire: a negative count would not even be sent
        raise CliError(f"N must be a positive number of nodes, got {args.count}", ExitCode.USAGE)
    request = admin_pb2.ReclaimNodesRequest(count=args.count, deadline_s=args.deadline_s, reason=args.reason)
    with connect() as client:
        reply = client.call("ReclaimNodes", request)
    jobs = ", ".join(str(j) for j in reply.preempted_job_ids) or "none"
    shrunk = ", ".join(f"{s.job_id} to {s.gpus} GPUs" for s in reply.shrunk) or "none"
    text = Text(f"reclaimed: {', '.join(n.node_id for n in reply.nodes)}; jobs preempted: {jobs}; "
                f"jobs scaled in: {shrunk}")
    return Result({"nodes": [to_plain(n) for n in reply.nodes], "preempted_job_ids": list(reply.preempted_job_ids),
                   "shrunk": [to_plain(s) for s in reply.shrunk]}, text)


MEMORY_NOT_ENFORCED = "memory not enforced"
WIDE_COLUMNS = ("RSS", "IO R/W", "PSI some/full %", "GPU UTIL", "CGROUPS", "THROTTLED")


def memory_unenforced(n: admin_pb2.NodeInfo) -> bool:
    """An agent that reported its cgroup mode and cannot enforce memory limits ("" = old agent)."""
    return bool(n.cgroup_mode) and not n.memory_enforced


def _bandwidth(n: admin_pb2.NodeInfo) -> str:
    t = n.telemetry
    if not (n.HasField("telemetry") and t.HasField("usage") and t.usage.HasField("mem_bandwidth")):
        return "-"
    return fmt_bandwidth(t.usage.mem_bandwidth, t.peak_mem_bandwidth if t.HasField("peak_mem_bandwidth") else None)


def _wide(n: admin_pb2.NodeInfo) -> tuple[str, ...]:
    u = n.telemetry.usage
    if not (n.HasField("telemetry") and n.telemetry.HasField("usage")):
        return ("-", "-", "-", "-", n.cgroup_mode or "-", str(n.throttled_tasks))
    gpus = n.telemetry.gpus
    gpu = f"{fmt_num(sum(g.utilization_pct for g in gpus) / len(gpus))}%" if gpus else "-"
    return (fmt_bytes(u.rss_bytes), f"{fmt_bytes(u.io_read_bytes)}/{fmt_bytes(u.io_write_bytes)}",
            fmt_pressure(u), gpu, n.cgroup_mode or "-", str(n.throttled_tasks))


def _jobs(n: admin_pb2.NodeInfo) -> str:
    """The node's jobs, each with its backend's job where one runs it: `7 (slurm 1234)`."""
    backend = dict(b.split("=", 1) for b in n.backend_jobs if "=" in b)
    return ",".join(f"{j} ({backend[str(j)]})" if str(j) in backend else str(j) for j in n.job_ids) or "-"


def _state(node: admin_pb2.NodeInfo) -> str:
    return enum_word(common_pb2.NodeState.DESCRIPTOR, node.state)
