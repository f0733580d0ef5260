"""Cluster commands: status, and policy show/set."""
from __future__ import annotations

import argparse
from typing import Callable

from rich.text import Text

from synergy.scheduler.arrays import settings as array_settings
from synergy.scheduler.cli.connection import Client
from synergy.scheduler.cli.errors import CliError, ExitCode
from synergy.scheduler.cli.output import Result, enum_word, fmt_num, fmt_resources, fmt_time, kv_table, to_plain
from synergy.scheduler.registry import MECHANISMS, POLICIES
from synergy.v1 import admin_pb2, common_pb2

Connect = Callable[[], Client]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="cluster summary",
                       description="Cluster summary: policy and mechanism in force, round, capacity "
                                   "vs allocation, nodes, job counts per state, and per user what their "
                                   "jobs hold and how many wait.")
    p.set_defaults(func=status)

    p = sub.add_parser("policy", help="show or change the scheduling policy",
                       description="Show the policy and mechanism in force, or change them at runtime "
                                   "(from the next round on; persisted across restarts).")
    actions = p.add_subparsers(dest="policy_action", metavar="{show,set}", required=True)
    show = actions.add_parser("show", help="policy and mechanism in force")
    show.set_defaults(func=policy_show)
    change = actions.add_parser("set", help="change policy and/or mechanism",
                                description="Change the policy and/or the mechanism from the next round on.")
    change.add_argument("--policy", help=f"one of: {', '.join(POLICIES)}")
    change.add_argument("--mechanism", help=f"one of: {', '.join(MECHANISMS)}")
    change.set_defaults(func=policy_set)


def status(args: argparse.Namespace, connect: Connect) -> Result:
    with connect() as client:
        st = client.call("GetClusterStatus", admin_pb2.GetClusterStatusRequest())
        nodes = list(client.call("ListNodes", admin_pb2.ListNodesRequest()).nodes)
    counts = {enum_word(common_pb2.JobState.DESCRIPTOR, c.state): c.count for c in st.job_counts}
    data = to_plain(st)
    data["job_counts"] = counts
    summary = kv_table([
        ("policy", f"{st.policy} / {st.mechanism}"),
        ("round", f"#{st.round_index} every {fmt_num(st.round_s)} s, next at {fmt_time(st.next_round_at_unix_s)}"
                  f" (last decision {fmt_num(st.last_decision_ms)} ms)"),
        ("nodes", f"{st.nodes_ready} ready of {st.nodes_total}"),
        ("capacity", fmt_resources(st.capacity.gpus, st.capacity.cpus, st.capacity.mem_gb)),
        ("allocated", fmt_resources(st.allocated.gpus, st.allocated.cpus, st.allocated.mem_gb)),
        ("free", fmt_resources(st.free.gpus, st.free.cpus, st.free.mem_gb) + _free_by_pool(nodes)),
        ("jobs", ", ".join(f"{n} {s}" for s, n in counts.items()) or "none"),
        ("users", "; ".join(_user_line(u) for u in st.users) or "none with live jobs"),
        ("max job size", f"{st.max_job_gpus} GPUs"),
        ("cpu array", array_settings.describe(st.cpu_array.borrow_fraction, st.cpu_array.trim_training)
         if st.HasField("cpu_array") else "-"),
        ("daemon", f"{st.daemon_version or '?'} up since {fmt_time(st.started_at_unix_s)}"),
    ])
    return Result(data, summary)


def _user_line(u: admin_pb2.UserUsage) -> str:
    """`alice: 2 running (2 GPU, 8 CPU, 32 GB), 1 waiting` (what fair shares go by)."""
    held = f" ({fmt_resources(u.allocated.gpus, u.allocated.cpus, u.allocated.mem_gb)})" if u.running_jobs else ""
    return f"{u.user or '(none)'}: {u.running_jobs} running{held}, {u.waiting_jobs} waiting"


def _free_by_pool(nodes: list[admin_pb2.NodeInfo]) -> str:
    """" (training 0 GPU, inference 4 GPU)" when any node is outside the training pool: a job
    waits "0 left" while GPUs are free in a pool it may not use (issue 15)."""
    free: dict[str, float] = {}
    for n in nodes:
        free[n.pool or "training"] = free.get(n.pool or "training", 0.0) + n.free.gpus
    if set(free) <= {"training"}:
        return ""
    return " (" + ", ".join(f"{pool} {fmt_num(gpus)} GPU" for pool, gpus in sorted(free.items())) + ")"


def policy_show(args: argparse.Namespace, connect: Connect) -> Result:
    with connect() as client:
        st = client.call("GetClusterStatus", admin_pb2.GetClusterStatusRequest())
    return Result({"policy": st.policy, "mechanism": st.mechanism},
                  Text(f"policy {st.policy}, mechanism {st.mechanism}"))


def policy_set(args: argparse.Namespace, connect: Connect) -> Result:
    if not args.policy and not args.mechanism:
        raise CliError("policy set needs --policy, --mechanism or both", ExitCode.USAGE)
    req = admin_pb2.SetPolicyRequest(policy=args.policy or "", mechanism=args.mechanism or "")
    with connect() as client:
        res = client.call("SetPolicy", req)
    return Result(to_plain(res), Text(f"policy {res.policy}, mechanism {res.mechanism} from the next round"))
