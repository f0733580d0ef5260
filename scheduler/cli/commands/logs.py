"""`synergy logs JOB [--rank R] [-f] [--lines N]`: a task's output, wherever it runs.

The daemon relays it from the task's agent on heartbeats (TailLogs; docs/daemon.md, "Task
logs ride on heartbeats"), so the CLI needs no route to the GPU node.
"""
from __future__ import annotations

import argparse
import sys
from typing import Callable

import grpc

from synergy.scheduler.cli.connection import Client
from synergy.scheduler.cli.errors import CliError, ExitCode, from_rpc_error
from synergy.scheduler.cli.output import Result
from synergy.scheduler.jobspec import SpecError, parse_job_ref
from synergy.v1 import admin_pb2

Connect = Callable[[], Client]
#: The daemon's limit on --lines (TailLogs).
MAX_LINES = 10_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("logs", help="show a job's output",
                       description="Show the last lines of one task (node rank) of a job's current attempt, "
                                   "relayed by synergyd from the node's agent; -f keeps following until it exits.")
    p.add_argument("job", metavar="JOB", help="job id or name")
    p.add_argument("--rank", type=int, default=0, help="node rank (default 0)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output until the task exits")
    p.add_argument("-n", "--lines", type=int, default=10, help=f"last lines to show first (default 10, at most {MAX_LINES})")
    p.set_defaults(func=logs_cmd)


def logs_cmd(args: argparse.Namespace, connect: Connect) -> Result:
    try:
        parse_job_ref(args.job)
    except SpecError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    if args.rank < 0:
        raise CliError(f"--rank must be >= 0, got {args.rank}", ExitCode.USAGE)
    if not 1 <= args.lines <= MAX_LINES:
        raise CliError(f"--lines must be from 1 to {MAX_LINES}, got {args.lines}", ExitCode.USAGE)
    request = admin_pb2.TailLogsRequest(job=args.job, rank=args.rank, lines=args.lines, follow=args.follow)
    out: list[str] = []
    node = ""
    with connect() as client:
        try:
            for msg in client.call("TailLogs", request, deadline=not args.follow):
                node = node or msg.node_id
                text = msg.data.decode("utf-8", errors="replace")
                out.append(text)
                if args.follow and not args.json:
                    sys.stdout.write(text)
                    sys.stdout.flush()
        except grpc.RpcError as err:  # a stream fails while it is read, not when it is called
            raise from_rpc_error(err, client.target.address, client.timeout_s) from None
    data = {"job": args.job, "rank": args.rank, "node_id": node, "output": "".join(out)}
    if args.follow:
        return Result(data, "")
    return Result(data, "".join(out).rstrip("\n") or "(no output yet)")
