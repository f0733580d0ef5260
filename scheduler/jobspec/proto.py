"""The job spec's wire form (`synergy.v1.JobSpec`), and the profile message inside it.

The only translation between the dataclass and the message: the CLI sends with
`spec_to_msg`, the daemon reads with `spec_from_msg` and answers DescribeJob with
`spec_to_msg` again. No rules here (see `rules`).
"""
from __future__ import annotations

from typing import Any, Mapping

from synergy.scheduler.jobspec.spec import JobSpec
from synergy.v1 import admin_pb2, common_pb2


def spec_from_msg(m: admin_pb2.JobSpec) -> JobSpec:
    return JobSpec(
        name=m.name,
        command=tuple(m.command),
        gpus=m.gpus,
        working_dir=m.working_dir,
        env=tuple(sorted(m.env.items())),
        cpus_hint=m.cpus_hint,
        mem_gb_hint=m.mem_gb_hint,
        model=m.model,
        task=m.task,
        checkpoint_dir=m.checkpoint_dir,
        priority=m.priority,
        iterations=m.iterations,
        min_gpus=m.min_gpus,
        max_gpus=m.max_gpus,
        profile=profile_from_msg(m.profile) if m.HasField("profile") else None,
        kind=m.kind,
        profiler=m.profiler,
        gpu_types=tuple(m.gpu_types),
        loanable=m.loanable if m.HasField("loanable") else None,
        user=m.user,
        no_share=m.no_share,
        checkpoint_every_s=m.checkpoint_every_s,
    )


def spec_to_msg(s: JobSpec) -> admin_pb2.JobSpec:
    """The wire form; raises ValueError for values the wire cannot carry (validate first)."""
    m = admin_pb2.JobSpec(
        name=s.name,
        command=list(s.command),
        working_dir=s.working_dir,
        env=dict(s.env),
        gpus=s.gpus,
        cpus_hint=s.cpus_hint,
        mem_gb_hint=s.mem_gb_hint,
        model=s.model,
        task=s.task,
        checkpoint_dir=s.checkpoint_dir,
        priority=s.priority,
        iterations=s.iterations,
        min_gpus=s.min_gpus,
        max_gpus=s.max_gpus,
        kind=s.kind,
        profiler=s.profiler,
        gpu_types=list(s.gpu_types),
        loanable=s.loanable,
        user=s.user,
        no_share=s.no_share,
        checkpoint_every_s=s.checkpoint_every_s,
    )
    if s.profile is not None:
        m.profile.CopyFrom(profile_to_msg(s.model or s.name, s.profile))
    return m


def spec_summary_msg(s: JobSpec) -> admin_pb2.JobSpec:
    """The bounded part of a spec, for list replies: no command, env, paths or profile,
    which can reach hundreds of KiB per job (DescribeJob carries the whole spec)."""
    return admin_pb2.JobSpec(
        name=s.name, gpus=s.gpus, cpus_hint=s.cpus_hint, mem_gb_hint=s.mem_gb_hint, model=s.model,
        task=s.task, priority=s.priority, iterations=s.iterations, min_gpus=s.min_gpus, max_gpus=s.max_gpus,
        kind=s.kind, profiler=s.profiler, gpu_types=list(s.gpu_types), loanable=s.loanable, no_share=s.no_share,
        user=s.user,
    )


def profile_from_msg(m: common_pb2.SensitivityProfile) -> dict[str, Any]:
    """The per-model form of the JSON profile format (validated by the caller)."""
    return {
        "task": m.task,
        "cpus_per_gpu": list(m.cpus_per_gpu),
        "mem_gb_per_gpu": list(m.mem_gb_per_gpu),
        "throughput": [list(row.throughput) for row in m.throughput],
        "reference": {"cpus_per_gpu": m.reference_cpus_per_gpu, "mem_gb_per_gpu": m.reference_mem_gb_per_gpu},
        "iter_time_s": m.iter_time_s,
        "source": m.source,
    }


def profile_to_msg(model: str, d: Mapping[str, Any]) -> common_pb2.SensitivityProfile:
    return common_pb2.SensitivityProfile(
        model=model,
        task=d["task"],
        cpus_per_gpu=d["cpus_per_gpu"],
        mem_gb_per_gpu=d["mem_gb_per_gpu"],
        throughput=[common_pb2.ProfileRow(throughput=row) for row in d["throughput"]],
        reference_cpus_per_gpu=d["reference"]["cpus_per_gpu"],
        reference_mem_gb_per_gpu=d["reference"]["mem_gb_per_gpu"],
        iter_time_s=d["iter_time_s"],
        source=d.get("source", ""),
    )
