"""The one job spec: its rules, its wire form, and the same sentence on both sides."""

from __future__ import annotations

from dataclasses import replace

import pytest

from synergy.scheduler.jobspec import JobSpec, SpecError, parse_job_ref, validate
from synergy.scheduler.jobspec.proto import spec_from_msg, spec_to_msg
from synergy.scheduler.profiles.zoo import default_profiles

OK = JobSpec(name="r18", command=("python", "train.py"), gpus=2, working_dir="/w", env=(("A", "1"),),
             cpus_hint=6, mem_gb_hint=100, model="resnet18", task="image", checkpoint_dir="/w/c",
             priority=-3, iterations=1000, profile=default_profiles()["resnet18"].to_dict(), user="_ci.bot-1")


def test_round_trip_through_the_wire() -> None:
    assert spec_from_msg(spec_to_msg(validate(OK))) == OK
    shy = replace(OK, no_share=True)
    assert spec_from_msg(spec_to_msg(validate(shy))) == shy


def test_no_share_is_for_gpu_jobs() -> None:
    cpu = JobSpec(name="prep", command=("python", "p.py"), gpus=0, kind="cpu", cpus_hint=1, mem_gb_hint=1,
                  no_share=True)
    with pytest.raises(SpecError) as err:
        validate(cpu)
    assert err.value.field == "spec.no_share"


@pytest.mark.parametrize("change, field", [
    ({"working_dir": "/a\x00"}, "spec.working_dir"),
    ({"checkpoint_dir": "c\x00"}, "spec.checkpoint_dir"),
    ({"command": ("python", "a\x00")}, "spec.command[1]"),
    ({"env": (("A", "x\x00"),)}, "spec.env[A]"),
    ({"env": (("A\x00", "x"),)}, "spec.env"),
    ({"gpus": 0}, "spec.gpus"),
    ({"min_gpus": 4, "max_gpus": 8}, "spec.gpus"),
    ({"cpus_hint": float("inf")}, "spec.cpus_hint"),
    ({"user": "alice smith"}, "spec.user"),
    ({"user": "1alice"}, "spec.user"),
    ({"user": "a" * 64}, "spec.user"),
])
def test_every_os_bound_string_and_range_is_checked(change: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        validate(replace(OK, **change))
    assert err.value.field == field and str(err.value).startswith(field + ": ")


def test_cluster_limit_and_size() -> None:
    with pytest.raises(SpecError, match=r"^spec.gpus: must be at most 1 \(this cluster's maximum job size\)"):
        validate(OK, max_job_gpus=1)
    with pytest.raises(SpecError, match=r"^spec: is 300000 bytes, at most 262144 allowed"):
        validate(OK, encoded_bytes=300_000)


@pytest.mark.parametrize("ref, parsed", [("17", 17), ("r18", "r18"), ("0", 0)])
def test_job_refs(ref: str, parsed: int | str) -> None:
    assert parse_job_ref(ref) == parsed


@pytest.mark.parametrize("ref", ["", "²", "１２", "٣", "-1", "a b", "9" * 20, "x" * 200])
def test_bad_job_refs(ref: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_job_ref(ref)
    assert err.value.field == "job"
