"""GPU type names: NVML product names -> types, the one name rule, the agent's node type and
flag, and the job spec's `gpu_types` / `loanable` through rules, wire and store."""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from synergy.agent.config import ConfigError, from_args
from synergy.agent.gpus import Gpu, GpuTypeError, discover, node_gpu_type
from synergy.scheduler.daemon.records import (
    JobRecord, JobState, NodeRecord, job_from_dict, job_to_dict, node_from_dict, node_to_dict,
)
from synergy.scheduler.gpu_type_names import gpu_type_of, gpu_type_problem
from synergy.scheduler.jobspec import JobSpec, SpecError, rules
from synergy.scheduler.jobspec.proto import spec_from_msg, spec_summary_msg, spec_to_msg
from synergy.scheduler.model import Resources


@pytest.mark.parametrize("product, expected", [
    ("Tesla V100-SXM2-16GB", "V100"),
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("Tesla T4", "T4"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("Tesla K80", "K80"),
    ("NVIDIA A10G", "A10G"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA RTX A6000", "A6000"),
    ("NVIDIA GeForce RTX 3090", "RTX3090"),
    ("Quadro RTX 8000", "RTX8000"),
    ("nvidia h200", "H200"),
    ("FakeGPU", ""),
    ("", ""),
])
def test_gpu_type_of_an_nvml_product_name(product: str, expected: str) -> None:
    assert gpu_type_of(product) == expected
    assert expected == "" or gpu_type_problem(expected) is None, "every derived type is a valid name"


@pytest.mark.parametrize("name, ok", [
    ("T4", True), ("V100", True), ("A100-80GB", True), ("RTX3090", True), ("X" * 32, True),
    ("t4", False), ("", False), ("X" * 33, False), ("T 4", False), ("-T4", False), ("T4\x00", False),
])
def test_the_type_name_rule(name: str, ok: bool) -> None:
    assert (gpu_type_problem(name) is None) == ok


def _gpus(*names: str) -> list[Gpu]:
    return [Gpu(i, f"GPU-{i}", name, 16.0) for i, name in enumerate(names)]


def test_one_type_per_node() -> None:
    assert node_gpu_type(_gpus("Tesla T4", "Tesla T4")) == "T4"
    assert node_gpu_type(_gpus("Tesla T4"), override="V100") == "V100"
    assert node_gpu_type([]) == "" and node_gpu_type(_gpus("FakeGPU")) == ""
    with pytest.raises(GpuTypeError, match=r"2 types \(T4, V100; .*one type per node"):
        node_gpu_type(_gpus("Tesla T4", "Tesla V100-SXM2-16GB"))
    with pytest.raises(GpuTypeError):
        node_gpu_type(_gpus("Tesla T4", "Tesla V100-SXM2-16GB"), override="T4")


class FakeNvml:
    """Stands in for pynvml (the only thing mocked: the GPUs)."""

    class NVMLError(Exception):
        pass

    def __init__(self, names: list[str]) -> None:
        self.names, self.shut = names, False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.names[h]

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return type("Mem", (), {"total": 16 * 1024**3})()


def test_discover_reads_the_type_from_nvml_and_warns_on_an_override(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.gputypes")
    assert discover(log, "n", nvml=FakeNvml(["Tesla T4"] * 2)).gpu_type == "T4"
    with caplog.at_level(logging.WARNING, logger="test.gputypes"):
        assert discover(log, "n", gpu_type="V100", nvml=FakeNvml(["Tesla T4"])).gpu_type == "V100"
    assert [r.getMessage() for r in caplog.records] == ["gpus.type_override"]
    assert discover(log, "n", fake=2, gpu_type="T4").gpu_type == "T4"
    assert discover(log, "n", fake=2).gpu_type == ""
    mixed = FakeNvml(["Tesla T4", "NVIDIA A100-SXM4-40GB"])
    with pytest.raises(GpuTypeError):
        discover(log, "n", nvml=mixed)
    assert mixed.shut, "NVML is shut down before the agent stops"


def test_agent_gpu_type_flag(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("t")
    base = ["--daemon", "127.0.0.1:1", "--cluster-token-file", str(tmp_path / "token"),
            "--work-dir", str(tmp_path / "w"), "--fake-gpus", "2"]
    assert from_args([*base, "--gpu-type", "T4"]).gpu_type == "T4"
    assert from_args(base).gpu_type == ""
    for bad in ("t4", "T 4", "X" * 40):
        with pytest.raises(ConfigError, match=r"^--gpu-type: .*must be a GPU model name"):
            from_args([*base, "--gpu-type", bad])


# -- the job spec -----------------------------------------------------------------------------------
def _spec(**kw: Any) -> JobSpec:
    return JobSpec(name="j", command=("train",), gpus=1, **kw)


@pytest.mark.parametrize("kw, field, problem", [
    ({"gpu_types": ("T4", "t4")}, "spec.gpu_types[1]", "must be a GPU model name"),
    ({"gpu_types": ("",)}, "spec.gpu_types[0]", "must be a GPU model name"),
    ({"gpu_types": ("T4", "V100", "T4")}, "spec.gpu_types[2]", "listed twice"),
    ({"gpu_types": tuple(f"T{i}" for i in range(17))}, "spec.gpu_types", "at most 16"),
    ({"gpu_types": ("T4",), "kind": "cpu", "gpus": 0, "cpus_hint": 1, "mem_gb_hint": 1}, "spec.gpu_types",
     "kind 'cpu'"),
])
def test_bad_gpu_types_are_refused_by_field(kw: dict[str, Any], field: str, problem: str) -> None:
    spec = replace(_spec(), **kw)
    with pytest.raises(SpecError) as exc:
        rules.validate(spec)
    assert exc.value.field == field and problem in exc.value.problem


def test_gpu_types_and_loanable_round_trip_wire_and_store() -> None:
    for loanable in (None, True, False):
        spec = rules.validate(_spec(gpu_types=("T4", "V100"), loanable=loanable))
        assert spec_from_msg(spec_to_msg(spec)) == spec
        summary = spec_summary_msg(spec)
        assert list(summary.gpu_types) == ["T4", "V100"] and summary.HasField("loanable") == (loanable is not None)
        job = JobRecord(1, spec, "tok", 0.0, JobState.QUEUED)
        assert job_from_dict(job_to_dict(job)) == job
    old_body = job_to_dict(JobRecord(1, _spec(), "tok", 0.0, JobState.QUEUED))
    del old_body["spec"]["gpu_types"], old_body["spec"]["loanable"]
    assert job_from_dict(old_body).spec == _spec(), "a body stored before the fields reads back with defaults"


def test_node_type_round_trips_the_store_and_old_bodies_read_as_untyped() -> None:
    node = NodeRecord("n", "h", Resources(2, 4, 8), Resources(), gpu_type="T4")
    assert node_from_dict(node_to_dict(node)) == node
    body = node_to_dict(node)
    del body["gpu_type"]
    assert node_from_dict(body).gpu_type == ""


STAND_IN_PYNVML = '''
"""pynvml for a machine with a T4 and an A100 (the GPUs are the only thing faked)."""
class NVMLError(Exception):
    pass
NAMES = ["Tesla T4", "NVIDIA A100-SXM4-40GB"]
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return len(NAMES)
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetName(h): return NAMES[h]
def nvmlDeviceGetUUID(h): return "GPU-%d" % h
class _Mem:
    total = 16 * 1024 ** 3
def nvmlDeviceGetMemoryInfo(h): return _Mem()
'''


def test_the_agent_refuses_a_node_with_two_gpu_types_in_one_line(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    (tmp_path / "nvml").mkdir()
    (tmp_path / "nvml" / "pynvml.py").write_text(STAND_IN_PYNVML)
    (tmp_path / "token").write_text("t")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "nvml"), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "synergy.agent.main", "--daemon", "127.0.0.1:1", "--cluster-token-file",
         str(tmp_path / "token"), "--work-dir", str(tmp_path / "w"), "--no-cgroups", "--log-level", "error"],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("synergy-agent: this node has GPUs of 2 types (A100, T4;")
    assert "Traceback" not in proc.stderr
