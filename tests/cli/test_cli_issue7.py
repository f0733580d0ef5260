"""The CLI side of issue 7 against a real synergyd: CPU-only jobs (`--kind cpu`), node
telemetry and "memory not enforced" in `synergy nodes`, per-rank usage in `describe`."""
from __future__ import annotations

import json

import pytest

from synergy.scheduler.jobspec import JobSpec, SpecError, validate


def test_cpu_kind_rules() -> None:
    base = JobSpec(name="c", command=("x",), gpus=0, kind="cpu", cpus_hint=2, mem_gb_hint=4)
    assert validate(base) is base
    for change, field in (({"gpus": 1}, "spec.gpus"), ({"cpus_hint": 0}, "spec.cpus_hint"),
                          ({"mem_gb_hint": 0}, "spec.mem_gb_hint"), ({"kind": "gpu"}, "spec.kind")):
        with pytest.raises(SpecError) as exc:
            validate(JobSpec(**{**base.__dict__, **change}))
        assert exc.value.field == field


def test_submit_kind_cpu_and_describe(cli) -> None:
    r = cli("submit", "--name", "cpu7", "--kind", "cpu", "--cpus", "2", "--memory-gb", "1",
            "--", "python", "-c", "pass")
    assert r.code == 0, r.err
    r = cli("describe", "cpu7")
    assert r.code == 0 and "cpu" in r.out and "request" in r.out
    r = cli("submit", "--name", "cpu8", "--kind", "cpu", "--", "python", "-c", "pass")
    assert r.code != 0 and "spec.cpus_hint" in r.err and "Traceback" not in r.err
    r = cli("submit", "--name", "cpu9", "--kind", "cpu", "--gpus", "1", "--cpus", "1", "--memory-gb", "1",
            "--", "python", "-c", "pass")
    assert r.code != 0 and "spec.gpus" in r.err
    info = json.loads(cli("--json", "describe", "cpu7").out)
    assert info["spec"]["kind"] == "cpu" and info["spec"].get("gpus", 0) == 0
