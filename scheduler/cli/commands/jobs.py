"""Job commands: submit, jobs, describe, cancel."""
from __future__ import annotations

import argparse
import shlex
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Group
from rich.table import Table
from rich.text import Text

from synergy.scheduler.cli.connection import Client
from synergy.scheduler.cli.errors import CliError, ExitCode
from synergy.scheduler.cli.output import (
    Result, enum_word, fmt_age, fmt_bandwidth, fmt_bytes, fmt_num, fmt_time, kv_table, state_text, table, to_plain,
)
from synergy.scheduler.cli.spec import JobSpec, SpecError, load_spec, parse_spec, spec_document
from synergy.scheduler.jobspec import parse_job_ref
from synergy.scheduler.jobspec.proto import spec_to_msg
from synergy.v1 import admin_pb2, common_pb2

Connect = Callable[[], Client]

#: Spec fields that `submit` flags can set, and the flag named in error messages.
SPEC_FLAGS: dict[str, str] = {
    "name": "--name", "kind": "--kind", "gpus": "--gpus", "working_dir": "--working-dir", "cpus": "--cpus",
    "memory_gb": "--memory-gb", "model": "--model", "task": "--task", "profile": "--profile",
    "iterations": "--iterations", "checkpoint_dir": "--checkpoint-dir", "priority": "--priority",
    "profiler": "--profiler", "gpu_types": "--gpu-type", "loanable": "--loanable/--no-loanable",
    "user": "--user", "no_share": "--no-share",
    "checkpoint_every_s": "--checkpoint-every",
}
STATES = [enum_word(common_pb2.JobState.DESCRIPTOR, v.number)
          for v in common_pb2.JobState.DESCRIPTOR.values if v.number]
TERMINAL = ("succeeded", "failed", "cancelled")
#: Exit codes of the job contract (job.proto, iterator) worth a word in describe.
EXIT_MEANING = {75: " (checkpointed and exited to be restarted)", 143: " (terminated by SIGTERM)",
                -9: " (killed by SIGKILL)", -15: " (killed by SIGTERM)"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "submit", help="submit a job from a YAML spec or from flags",
        description="Submit a job. Give a YAML spec (docs/cli.md), flags, or both (flags override "
                    "the file). The command runs without a shell: pass it as --command \"python "
                    "train.py --lr 0.1\" (split like a shell would, but never run by one) or after "
                    "'--' as separate arguments.",
        epilog="examples:\n  synergy submit examples/jobs/resnet18.yaml\n"
               "  synergy submit --name r18 --gpus 2 --model resnet18 -- python train.py --epochs 90",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", nargs="?", metavar="SPEC.yaml", help="job spec file (YAML)")
    p.add_argument("--name", help="job name: 1-63 letters, digits, '.', '_', '-', starting with a letter")
    p.add_argument("--gpus", type=int, help="GPUs the job needs (fixed for the whole run)")
    p.add_argument("--kind", choices=("training", "cpu"),
                   help="'cpu': a CPU-only job (no GPU; --cpus and --memory-gb are then its request)")
    p.add_argument("--command", dest="command_str", metavar="CMD",
                   help="the command, as one string split into arguments shell-style (no shell runs it)")
    p.add_argument("--working-dir", help="working directory on the node (default: the current directory)")
    p.add_argument("--env", action="append", default=[], metavar="K=V",
                   help="extra environment variable for the job (repeatable)")
    p.add_argument("--cpus", type=float, help="hint: CPU cores the whole job expects to need")
    p.add_argument("--memory-gb", type=float, help="hint: host memory in GB the whole job expects to need")
    p.add_argument("--model", help="model name, picks a sensitivity profile from the zoo (e.g. resnet18)")
    p.add_argument("--task", help="task class when the model is not in the zoo: image, language or speech")
    p.add_argument("--profile", metavar="FILE",
                   help="profile file (synergy-profile/v1 JSON) measured beforehand; entry picked by --model")
    p.add_argument("--profiler", metavar="HOW",
                   help="how the job's profile is found: auto (default: profile live when no profile is "
                        "known), synergy or coda (always profile live with that search), none (never)")
    p.add_argument("--user", metavar="NAME",
                   help="admins only: submit on behalf of this user (default: you, as synergyd knows you; "
                        "see 'synergy whoami'). The job's user is what fair shares between users go by")
    p.add_argument("--no-share", action="store_const", const=True,
                   help="never share a GPU with another job (packing pairs at most two jobs per GPU)")
    p.add_argument("--iterations", type=int, help="total training steps (lets SRTF/FTF estimate remaining time)")
    p.add_argument("--checkpoint-dir", help="where the job writes checkpoints (relative: to the working dir)")
    p.add_argument("--checkpoint-every", dest="checkpoint_every_s", type=float, metavar="SECONDS",
                   help="write a checkpoint every SECONDS while the job runs, in the background without "
                        "stalling training (needs --checkpoint-dir; default: the cluster's, synergyd "
                        "--checkpoint-every-s; the last 2 are kept)")
    p.add_argument("--priority", type=int, help="reserved: stored, ignored by the paper's policies (-1000..1000)")
    p.add_argument("--min-gpus", type=int,
                   help="elastic: the fewest GPUs the job runs with (with --max-gpus; --gpus lies between)")
    p.add_argument("--max-gpus", type=int,
                   help="elastic: the most GPUs the job runs with; each round picks a size in the range")
    p.add_argument("--gpu-type", dest="gpu_types", action="append", metavar="TYPE",
                   help="a GPU type the job accepts, e.g. T4 (repeatable; default: any type; see "
                        "`synergy nodes` for the types registered)")
    p.add_argument("--loanable", action=argparse.BooleanOptionalAction, default=None,
                   help="may (or may not) run on nodes loaned from inference, which a reclaim preempts "
                        "(default: elastic and short jobs may)")
    p.add_argument("--dry-run", action="store_true",
                   help="validate and print the spec that would be sent; do not contact synergyd")
    p.set_defaults(func=submit, argv_command=None)

    p = sub.add_parser("jobs", help="list jobs",
                       description="List jobs, oldest first, with why each queued job waits.")
    p.add_argument("--state", action="append", choices=STATES, default=[],
                   help="only jobs in this state (repeatable)")
    p.add_argument("--active", action="store_true", help="only jobs that have not ended")
    p.add_argument("--limit", type=int, default=0, help="at most this many, the most recent (0: all)")
    p.add_argument("--all", dest="all_users", action="store_true",
                   help="every user's jobs (admins only; default: your own)")
    p.set_defaults(func=list_jobs)

    p = sub.add_parser("describe", help="show one job with its state history",
                       description="Show one job: spec, allocation, progress, why it waits, and every "
                                   "state transition with its reason.")
    p.add_argument("job", metavar="JOB", help="job id or name")
    p.set_defaults(func=describe)

    p = sub.add_parser("cancel", help="cancel a job",
                       description="Cancel a job: a queued job ends at once, a running job is told "
                                   "to terminate and its resources are released.")
    p.add_argument("job", metavar="JOB", help="job id or name")
    p.add_argument("--reason", default="", help="kept in the job's history, with who cancelled it")
    p.set_defaults(func=cancel)


# -- submit ------------------------------------------------------------------------------------
def build_spec(args: argparse.Namespace) -> JobSpec:
    """Merge the spec file and the flags (flags win) and validate the result."""
    overrides: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for key, flag in SPEC_FLAGS.items():
        value = getattr(args, key)
        if value is None:
            continue
        if key in ("working_dir", "profile"):
            # Paths typed on the command line are relative to where they were typed (a
            # relative --checkpoint-dir stays relative: to the working directory).
            value = str(Path(value).expanduser().absolute())
        overrides[key], labels[key] = value, flag
    if args.command_str is not None and args.argv_command:
        raise CliError("give the command either with --command or after '--', not both", ExitCode.USAGE)
    if args.command_str is not None:
        overrides["command"], labels["command"] = args.command_str, "--command"
    elif args.argv_command:
        overrides["command"], labels["command"] = list(args.argv_command), "the command after '--'"
    elastic = {k: v for k, v in (("min_gpus", args.min_gpus), ("max_gpus", args.max_gpus)) if v is not None}
    if elastic:
        overrides["elastic"] = elastic
        labels.update({"elastic": "--min-gpus/--max-gpus", "elastic.min_gpus": "--min-gpus",
                       "elastic.max_gpus": "--max-gpus"})
    flag_env = _parse_env_flags(args.env)
    if flag_env:
        overrides["env"] = flag_env
        labels.update({f"env.{k}": f"--env {k}" for k in flag_env})
    # No `user`: synergyd makes the job the caller's (who the socket, token or certificate says).
    return _spec_from(args, overrides, labels, flag_env)


def _spec_from(args: argparse.Namespace, overrides: dict[str, Any], labels: dict[str, str],
               flag_env: dict[str, str]) -> JobSpec:
    try:
        if args.spec:
            return load_spec(args.spec, overrides=overrides, labels=labels)
        if flag_env:
            labels["env"] = "--env"
        for key, flag in SPEC_FLAGS.items():  # a field missing from the command line: name its flag
            labels.setdefault(key, flag)
        needed = ("name", "command") if overrides.get("kind") == "cpu" else ("name", "gpus", "command")
        missing = [f for f in needed if f not in overrides]
        if missing:
            need = ", ".join("--command (or '-- CMD...')" if f == "command" else f"--{f}" for f in missing)
            raise CliError(f"submit needs a spec file or at least {need}", ExitCode.USAGE)
        return parse_spec(overrides, origin="command line", labels=labels)
    except SpecError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None


def _parse_env_flags(items: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--env {item!r} must look like NAME=value", ExitCode.USAGE)
        out[key] = value
    return out


def submit(args: argparse.Namespace, connect: Connect) -> Result:
    spec = build_spec(args)
    if args.dry_run:
        return Result({"spec": spec_document(spec)}, _spec_view(spec))
    with connect() as client:
        job = client.call("SubmitJob", admin_pb2.SubmitJobRequest(spec=spec_to_msg(spec))).job
    line = Text.assemble("submitted job ", (str(job.id), "bold"), f" ({job.name}): ", state_text(_state(job)))
    if job.waiting_reason:
        line.append(f"; waiting: {job.waiting_reason}")
    return Result(to_plain(job), line)


def _spec_view(spec: JobSpec) -> Table:
    d = spec_document(spec)
    if spec.profile is not None:
        d["profile"] = f"{spec.profile.get('source') or 'from file'}"
    return kv_table([(k, _show(v)) for k, v in d.items() if v not in (None, "", {}, [])])


# -- jobs / describe / cancel ------------------------------------------------------------------
def list_jobs(args: argparse.Namespace, connect: Connect) -> Result:
    if args.limit < 0:
        raise CliError("--limit must be 0 (no limit) or a positive integer", ExitCode.USAGE)
    states = list(args.state)
    if args.active:
        states = [s for s in (states or STATES) if s not in TERMINAL]
        if not states:
            return Result({"jobs": []}, Text("no jobs"))
    req = admin_pb2.ListJobsRequest(states=[_state_number(s) for s in states], limit=args.limit,
                                    all_users=args.all_users)
    with connect() as client:
        jobs = all_jobs(client, req)
    rows = [
        (j.id, j.name, j.spec.user or "-", state_text(_state(j)), _gpus(j.spec),
         j.spec.model or "-", _where(j), j.steps_done or "-", fmt_age(j.submitted_at_unix_s),
         j.waiting_reason if _state(j) == "queued" and j.waiting_reason else j.state_reason)
        for j in jobs
    ]
    view = table(None, ["ID", "NAME", "USER", "STATE", "GPUS", "MODEL", "ALLOCATION", "STEPS", "AGE", "REASON"],
                 rows) if rows else Text("no jobs")
    return Result({"jobs": [to_plain(j) for j in jobs]}, view)


def _gpus(spec: admin_pb2.JobSpec) -> int | str:
    """An elastic job's range ("1-8"; ALLOCATION shows what it holds now), else its GPUs."""
    return f"{spec.min_gpus}-{spec.max_gpus}" if spec.min_gpus or spec.max_gpus else spec.gpus


def all_jobs(client: Client, req: admin_pb2.ListJobsRequest) -> list[admin_pb2.JobInfo]:
    """Every page of ListJobs: one reply of all jobs would outgrow gRPC's message limit."""
    jobs: list[admin_pb2.JobInfo] = []
    seen: set[str] = set()
    while True:
        reply = client.call("ListJobs", req)
        jobs.extend(reply.jobs)
        token = reply.next_page_token
        if not token:
            return jobs
        if token in seen:  # a daemon that repeats itself would otherwise page forever
            raise CliError(f"synergyd at {client.target.address} repeated a ListJobs page token; "
                           "the listing is incomplete")
        seen.add(token)
        req.page_token = token


def _job_ref(text: str) -> str:
    """The same rule as the daemon's (ASCII digits are an id, else a name), checked before dialing."""
    try:
        parse_job_ref(text, "JOB")
    except SpecError as exc:
        raise CliError(str(exc), ExitCode.USAGE) from None
    return text


def describe(args: argparse.Namespace, connect: Connect) -> Result:
    ref = _job_ref(args.job)
    with connect() as client:
        job = client.call("DescribeJob", admin_pb2.DescribeJobRequest(job=ref)).job
    return Result(to_plain(job), _describe_view(job))


def cancel(args: argparse.Namespace, connect: Connect) -> Result:
    ref = _job_ref(args.job)
    with connect() as client:
        job = client.call("CancelJob", admin_pb2.CancelJobRequest(job=ref, reason=args.reason)).job
    return Result(to_plain(job), Text.assemble("job ", (str(job.id), "bold"), f" ({job.name}): ",
                                               state_text(_state(job))))


# -- views --------------------------------------------------------------------------------------
def _state(job: admin_pb2.JobInfo) -> str:
    return enum_word(common_pb2.JobState.DESCRIPTOR, job.state)


def _state_number(word: str) -> int:
    return common_pb2.JobState.Value("JOB_STATE_" + word.upper())


def _where(job: admin_pb2.JobInfo) -> str:
    if not job.placements:
        return "-"
    where = ", ".join(f"{p.node_id}:{p.gpus}g/{fmt_num(p.cpus)}c/{fmt_num(p.mem_gb)}G" for p in job.placements)
    return f"{where} (packed with {job.packed_with_job_id})" if job.packed_with_job_id else where


def _describe_view(job: admin_pb2.JobInfo) -> Group:
    s = job.spec
    state = _state(job)
    rows: list[tuple[str, Any]] = [
        ("id", job.id), ("name", job.name),
        ("state", state_text(state)),
        ("reason", job.state_reason),
    ]
    if job.waiting_reason:
        rows.append(("waiting", Text(job.waiting_reason, style="yellow")))
    rows += [
        ("command", shlex.join(s.command)),
        ("working dir", s.working_dir or "(agent default)"),
        ("kind", s.kind or "training"),
        ("user", s.user or "-"),
        ("gpus", s.gpus),
        ("gpu types", ", ".join(s.gpu_types) or "any"),
        ("loanable", ("yes" if s.loanable else "no") if s.HasField("loanable") else "default (elastic or short)"),
        ("gpu sharing", "never (no_share)" if s.no_share else "allowed"),
        ("request" if s.kind == "cpu" else "hints", ", ".join(x for x in (s.cpus_hint and f"{fmt_num(s.cpus_hint)} CPU",
                                         s.mem_gb_hint and f"{fmt_num(s.mem_gb_hint)} GB") if x) or "-"),
        ("model", " / ".join(x for x in (s.model, s.task) if x) or "-"),
        ("profile", job.profile_source or "-"),
        ("proportional share", f"{fmt_num(job.proportional_share.cpus)} CPU, {fmt_num(job.proportional_share.mem_gb)} GB"
         if job.HasField("proportional_share") else "-"),
        ("iterations", s.iterations or "-"),
        ("checkpoint dir", s.checkpoint_dir or "-"),
        ("priority", s.priority),
        ("env", ", ".join(f"{k}={v}" for k, v in sorted(s.env.items())) or "-"),
        ("submitted", fmt_time(job.submitted_at_unix_s)),
        ("started", fmt_time(job.started_at_unix_s)),
        ("finished", fmt_time(job.finished_at_unix_s)),
        ("attempt", job.attempt), ("preemptions", job.preemptions),
        ("progress", f"{job.steps_done} steps, {fmt_num(job.samples_per_s)} samples/s, "
                     f"{fmt_num(job.attained_gpu_s)} GPU-s"),
    ]
    if job.HasField("cache"):
        c = job.cache
        reads = c.hits + c.misses
        rows.append(("cache", f"{c.hits} hits, {c.misses} misses ({100 * c.hits / reads if reads else 0:.0f}% hit), "
                              f"{c.items} items, {c.used_bytes / 1e6:.1f} of {c.capacity_bytes / 1e6:.1f} MB"))
    if s.checkpoint_every_s:
        rows.append(("checkpoint every", f"{fmt_num(s.checkpoint_every_s)} s"))
    if job.last_checkpoint_path:
        age = (f", {fmt_num(max(0.0, time.time() - job.last_checkpoint_unix_s))} s ago"
               if job.last_checkpoint_unix_s else "")
        rows.append(("checkpoint", f"{job.last_checkpoint_path} (step {job.last_checkpoint_step}{age})"))
    if job.last_checkpoint_error:
        rows.append(("checkpoint failed", Text(job.last_checkpoint_error, style="red")))
    if job.lease_expires_at_unix_s:
        rows.append(("lease until", fmt_time(job.lease_expires_at_unix_s)))
    if job.stop_at_step:
        rows.append(("stopping at", f"step {job.stop_at_step}"))
    if job.exit_code:
        rows.append(("exit code", f"{job.exit_code}{EXIT_MEANING.get(job.exit_code, '')}"))
    if job.packed_with_job_id:
        rows.append(("packed with", f"job {job.packed_with_job_id} (runs on its GPUs, two jobs per GPU)"))
    parts: list[Any] = [kv_table(rows)]
    if job.tasks:
        parts += [Text(""), table("Tasks", ["RANK", "NODE", "STATE", "PID", "CPU", "RSS", "MEM BW"], [
            (t.rank, t.node_id, t.state, t.pid or t.backend_job or "-",
             fmt_num(t.usage.cpu_cores) + (f" ({t.usage.sampled_by})" if t.usage.sampled_by else "")
             if t.HasField("usage") else "-",
             fmt_bytes(t.usage.rss_bytes) if t.HasField("usage") else "-",
             fmt_bandwidth(t.usage.mem_bandwidth if t.usage.HasField("mem_bandwidth") else None))
            for t in job.tasks])]
        held = [t for t in job.tasks if t.HasField("throttle")]
        if held:  # CODA's contention eliminator holds these back (agent side, live)
            parts += [Text(""), table("Throttled (contention eliminator)", ["RANK", "LEVEL", "ACTION", "SINCE", "REASON"],
                                      [(t.rank, t.throttle.level, t.throttle.action,
                                        fmt_time(t.throttle.since_unix_s) if t.throttle.since_unix_s else "-",
                                        t.throttle.reason) for t in held])]
    if job.placements:
        parts += [Text(""), table("Allocation", ["NODE", "GPUS", "CPUS", "MEM GB"],
                                  [(p.node_id, p.gpus, fmt_num(p.cpus), fmt_num(p.mem_gb))
                                   for p in job.placements])]
    parts += [Text(""), table("History", ["TIME", "FROM", "TO", "REASON"], [
        (fmt_time(t.at_unix_s), enum_word(common_pb2.JobState.DESCRIPTOR, t.from_state) if t.from_state else "-",
         enum_word(common_pb2.JobState.DESCRIPTOR, t.to_state), t.reason) for t in job.history])]
    return Group(*parts)


def _show(value: Any) -> str:
    if isinstance(value, list):
        return shlex.join(str(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return str(value)
