"""The validated job spec translated into the admin protocol's messages."""
from __future__ import annotations

from synergy.scheduler.cli.spec import JobSpec
from synergy.scheduler.daemon.servicers.convert import profile_to_msg
from synergy.v1 import admin_pb2


def spec_to_proto(spec: JobSpec) -> admin_pb2.JobSpec:
    """The wire form of a spec.

    The elastic range is validated by the CLI but not sent: the daemon of this release
    schedules fixed-size jobs only and rejects a non-zero range (admin.proto), so sending
    it would turn "reserved for later" into a refusal. `submit` says so on stderr.
    """
    msg = admin_pb2.JobSpec(
        name=spec.name,
        command=list(spec.command),
        working_dir=spec.working_dir,
        env=dict(spec.env),
        gpus=spec.gpus,
        cpus_hint=spec.cpus or 0.0,
        mem_gb_hint=spec.memory_gb or 0.0,
        model=spec.model,
        task=spec.task,
        checkpoint_dir=spec.checkpoint_dir,
        priority=spec.priority,
        iterations=spec.iterations,
    )
    if spec.profile is not None:
        msg.profile.CopyFrom(profile_to_msg(spec.profile.model, spec.profile.to_dict()))
    return msg
