"""The job spec: one definition, one set of rules, one wire form.

A user's request to run a job is the same thing in the CLI (parsed from YAML and flags),
in the daemon (validated at SubmitJob, stored with the job) and on the wire
(`synergy.v1.JobSpec`). `spec` holds the dataclass, `rules` every validation rule and
limit (names, env, paths, ranges, job references), `proto` the conversion to and from the
message. All three are free of daemon internals, so the CLI imports them without pulling
in the store, the reconciler or the metrics.
"""
from synergy.scheduler.jobspec.rules import parse_job_ref, validate
from synergy.scheduler.jobspec.spec import JobSpec, SpecError

__all__ = ["JobSpec", "SpecError", "parse_job_ref", "validate"]
