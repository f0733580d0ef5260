"""`synergy-sim --cluster FILE`: clusters mixing GPU types, as users run them."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from synergy.scheduler.simulator.cluster_file import ServerGroup, build_servers, parse_groups
from synergy.scheduler.simulator.errors import SimInputError
from synergy.scheduler.simulator.experiment import RunSpec, prepare, simulate
from synergy.scheduler.simulator.workload import restrict_types
from test_sim_cli import one_line_error, sim

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "hetero" / "cluster.yaml"
PROFILES = ROOT / "examples" / "hetero" / "profiles_t4.json"
MIXED = [{"count": 1, "gpus": 8, "cpus": 24, "mem_gb": 500, "gpu_type": "V100"},
         {"count": 2, "gpus": 4, "cpus": 16, "mem_gb": 256, "gpu_type": "T4"}]


@pytest.fixture
def cluster_file(tmp_path: Path):
    def write(doc, suffix: str = ".json") -> Path:
        path = tmp_path / f"cluster{suffix}"
        path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
        return path
    return write


def test_groups_become_typed_servers() -> None:
    servers = build_servers(parse_groups(MIXED))
    assert [(s.id, s.gpu_type, s.capacity.gpus) for s in servers] == [
        ("V100-0", "V100", 8), ("T4-0", "T4", 4), ("T4-1", "T4", 4)]
    assert build_servers((ServerGroup(1, 0, 8, 32),))[0].pool.value == "cpu_only"


@pytest.mark.parametrize("doc,needles", [
    ("[{\"count\": 1", ["not valid JSON"]),
    ({"count": 1}, ["non-empty list"]),
    ([{"count": 1, "gpus": 8, "cpus": 24}], ["group 1", "missing field 'mem_gb'"]),
    ([MIXED[0], {**MIXED[1], "count": 0}], ["group 2", "field 'count'"]),
    ([{**MIXED[0], "gpus": 2.5}], ["group 1", "field 'gpus'"]),
    ([{**MIXED[0], "cpus": -1}], ["group 1", "field 'cpus'"]),
    ([{**MIXED[0], "gpu_type": 7}], ["group 1", "field 'gpu_type'"]),
    ([{**MIXED[0], "gpu": 8}], ["group 1", "unknown field 'gpu'"]),
    ([{"count": 1, "gpus": 0, "cpus": 8, "mem_gb": 32}], ["no group has GPUs"]),
])
def test_bad_cluster_files_are_one_line_errors(cluster_file, doc, needles) -> None:
    path = cluster_file(doc)
    line = one_line_error(sim("--cluster", str(path), "--jobs", "10"))
    assert str(path) in line
    for needle in needles:
        assert needle in line


def test_bad_yaml_and_missing_files_are_one_line_errors(cluster_file, tmp_path: Path) -> None:
    assert "not valid YAML" in one_line_error(sim("--cluster", str(cluster_file("- [a, b", ".yaml"))))
    assert "cannot read" in one_line_error(sim("--cluster", str(tmp_path / "none.json")))


def test_cluster_excludes_the_homogeneous_flags_and_typed_share_needs_types(cluster_file) -> None:
    path = str(cluster_file(MIXED))
    line = one_line_error(sim("--cluster", path, "--servers", "4", "--cpus-per-server", "32"))
    assert "drop --servers, --cpus-per-server" in line
    assert "--typed-share needs a cluster with GPU types" in one_line_error(sim("--typed-share", "0.5", "--jobs", "10"))
    assert "--typed-share" in one_line_error(sim("--cluster", path, "--typed-share", "1.5"))


def test_a_mixed_run_reports_utilisation_per_type() -> None:
    proc = sim("--cluster", str(EXAMPLE), "--profiles", str(PROFILES), "--jobs", "120", "--load", "12",
               "--typed-share", "0.3", "--json")
    assert proc.returncode == 0, proc.stderr
    m = json.loads(proc.stdout)
    assert set(m["gpu_util_by_type"]) == {"T4", "V100"}
    assert all(0 < u <= 1 for u in m["gpu_util_by_type"].values())
    table = sim("--cluster", str(EXAMPLE), "--jobs", "60", "--load", "12")
    assert table.returncode == 0, table.stderr
    assert "GPU allocated, T4" in table.stdout and "GPU allocated, V100" in table.stdout
    assert "(examples/hetero/cluster.yaml)" in table.stdout.replace(str(ROOT) + "/", "")


def test_typed_share_restricts_that_share_of_jobs_to_a_type_that_fits() -> None:
    spec = RunSpec(cluster_file=str(EXAMPLE), jobs=400, multi_gpu=True, typed_share=0.5)
    prep = prepare(spec)
    jobs = restrict_types(prep.workload.to_jobs(prep.profile_set.profiles), 0.5, prep.cluster, 0)
    typed = [j for j in jobs if j.gpu_types]
    assert 0.4 < len(typed) / len(jobs) < 0.6
    assert {t for j in typed for t in j.gpu_types} == {"T4", "V100"}
    with pytest.raises(SimInputError):
        restrict_types(jobs, 2.0, prep.cluster, 0)


def test_a_job_on_t4_runs_slower_than_on_v100_in_the_simulator() -> None:
    """Progress uses the speed on the landed type: the same trace restricted to T4 alone
    takes longer than on V100 alone (profiles: T4 at 0.45 of a V100)."""
    def run(gpu_type: str) -> float:
        spec = RunSpec(cluster_file=str(EXAMPLE), profiles=str(PROFILES), jobs=30, load=1.0,
                       seed=0)
        prep = prepare(spec)
        cluster = prep.cluster
        only = type(cluster)(tuple(s for s in cluster.servers if s.gpu_type == gpu_type))
        return simulate(type(prep)(spec, only, *[getattr(prep, f) for f in
                                                   ("profile_set", "workload", "measured", "cpu_trace",
                                                    "inference")])).metrics["avg_jct_h"]

    assert run("T4") > 1.5 * run("V100")
