"""The SQLite store round-trips every record; settings come from flags over TOML over defaults."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from synergy.scheduler.daemon.config import ConfigError, load_config
from synergy.scheduler.daemon.records import AdminState, JobRecord, JobSpec, JobState, NodeRecord, Transition
from synergy.scheduler.daemon.store import MemoryStore, SqliteStore, open_store
from synergy.scheduler.model import Placement, Resources


def a_job(job_id: int = 1, name: str = "j") -> JobRecord:
    spec = JobSpec(
        name=name,
        command=("python", "t.py"),
        gpus=2,
        env=(("A", "1"),),
        model="resnet18",
        profile={
            "task": "image",
            "cpus_per_gpu": [1, 2],
            "mem_gb_per_gpu": [1, 2],
            "throughput": [[1, 1], [1, 1]],
            "reference": {"cpus_per_gpu": 1, "mem_gb_per_gpu": 1},
            "iter_time_s": 0.1,
        },
    )
    job = JobRecord(
        job_id, spec, "secret", 10.0, JobState.SUBMITTED, (Transition(None, JobState.SUBMITTED, "submitted", 10.0),)
    )
    job = job.to(JobState.PROFILING, "p", 11).to(JobState.QUEUED, "q", 12)
    return job.to(JobState.RUNNING, "r", 13, placements=(Placement("n1", 2, 6.5, 40.0),), attempt=1)


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_store_round_trip(tmp_path: Path, backend: str) -> None:
    store = MemoryStore() if backend == "memory" else open_store(tmp_path)
    job = a_job()
    node = NodeRecord(
        "n1",
        "host1",
        Resources(8, 24, 500),
        Resources(0, 2, 10),
        AdminState.CORDONED,
        "why",
        ({"index": 0, "uuid": "GPU-0"},),
        "v1",
        5.0,
    )
    store.save_jobs([job, a_job(2, "k")])
    store.save_nodes([node])
    store.save_setting("policy", "las")
    if backend == "sqlite":
        store.close()
        store = SqliteStore(tmp_path / "synergyd.sqlite")
    assert store.job(1) == job and store.node("n1") == node and store.setting("policy") == "las"
    assert [j.id for j in store.jobs_named("k")] == [2] and store.next_job_id() == 3
    assert [j.id for j in store.active_jobs()] == [1, 2]
    assert [j.id for j in store.running_on("n1")] == [1, 2] and store.running_on("n2") == []
    store.save_progress([replace(job, steps_done=77, attained_gpu_s=9.5)])
    if backend == "sqlite":  # progress rows survive a reopen, over the older body
        store.close()
        store = SqliteStore(tmp_path / "synergyd.sqlite")
    assert (store.job(1).steps_done, store.job(1).attained_gpu_s) == (77, 9.5)
    store.save_jobs([store.job(1).to(JobState.CANCELLED, "c", 14)])
    assert [j.id for j in store.active_jobs()] == [2] and [j.id for j in store.running_on("n1")] == [2]
    if backend == "sqlite":
        store.close()
        store = SqliteStore(tmp_path / "synergyd.sqlite")
    assert store.job(1).state == JobState.CANCELLED and store.job(1).steps_done == 77
    store.close()


def test_illegal_transitions_raise() -> None:
    with pytest.raises(ValueError, match="illegal transition"):
        a_job().to(JobState.QUEUED, "skipping preempted", 20)


def test_flags_win_over_toml_over_defaults(tmp_path: Path) -> None:
    toml = tmp_path / "d.toml"
    toml.write_text('round-s = 60\npolicy = "srtf"\nmax_job_gpus = 4\n')
    c = load_config(["--config", str(toml), "--policy", "las", "--state-dir", str(tmp_path)])
    assert (c.round_s, c.policy, c.max_job_gpus, c.mechanism) == (60, "las", 4, "tune")
    assert c.renew_interval_s == 6 and c.plan_lead == 6


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--round-s", "0"], "--round-s"),
        (["--policy", "nope"], "--policy"),
        (["--tls-cert", "/no/such"], "--tls-cert and --tls-key"),
        (["--plan-lead-s", "400"], "--plan-lead-s"),
        (["--port", "70000"], "--port"),
    ],
)
def test_bad_settings_name_the_flag(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=message.replace("-", r"\-")):
        load_config([*argv, "--state-dir", str(tmp_path)])


def test_bad_toml_names_the_key(tmp_path: Path) -> None:
    toml = tmp_path / "d.toml"
    toml.write_text("rounds = 3\n")
    with pytest.raises(ConfigError, match="unknown key 'rounds'"):
        load_config(["--config", str(toml)])
    toml.write_text('round_s = "fast"\n')
    with pytest.raises(ConfigError, match="wrong type"):
        load_config(["--config", str(toml)])


def test_migration_matching_is_on_unless_a_flag_or_the_toml_turns_it_off(tmp_path: Path) -> None:
    assert load_config(["--state-dir", str(tmp_path)]).migration_matching is True
    assert load_config(["--state-dir", str(tmp_path), "--no-migration-matching"]).migration_matching is False
    toml = tmp_path / "c.toml"
    toml.write_text("migration-matching = false\n")
    assert load_config(["--config", str(toml), "--state-dir", str(tmp_path)]).migration_matching is False
    toml.write_text('migration-matching = "off"\n')
    with pytest.raises(ConfigError, match="migration-matching"):
        load_config(["--config", str(toml), "--state-dir", str(tmp_path)])


def test_cpu_array_flags_and_toml_keys_reach_the_daemons_scheduler(tmp_path: Path) -> None:
    """CODA's CPU array: --borrow-fraction / --no-trim-training (or their TOML keys) become the
    core's CpuArray; a bad fraction stops the daemon with the sentence synergy-sim prints."""
    from synergy.scheduler.arrays.cpu_array import CpuArray

    assert load_config(["--state-dir", str(tmp_path)]).cpu_array == CpuArray(1.0, True)
    c = load_config(["--state-dir", str(tmp_path), "--borrow-fraction", "0.25", "--no-trim-training"])
    assert c.cpu_array == CpuArray(0.25, False)
    toml = tmp_path / "a.toml"
    toml.write_text("borrow-fraction = 0\ntrim_training = false\n")
    assert load_config(["--config", str(toml), "--state-dir", str(tmp_path)]).cpu_array == CpuArray(0.0, False)
    for bad in ("1.5", "-0.1", "nan", "inf"):
        with pytest.raises(ConfigError, match=r"^--borrow-fraction must be within \[0, 1\], got "):
            load_config(["--state-dir", str(tmp_path), "--borrow-fraction", bad])
    toml.write_text('borrow-fraction = "half"\n')
    with pytest.raises(ConfigError, match="'borrow-fraction' has the wrong type"):
        load_config(["--config", str(toml), "--state-dir", str(tmp_path)])


def test_pairs_file_is_checked_at_start(tmp_path: Path) -> None:
    """--pairs turns packing on: a file that cannot pair anything stops the daemon with one line."""
    state = ["--state-dir", str(tmp_path / "s")]
    assert load_config(state).pairs is None
    none = tmp_path / "none.json"
    none.write_text('{"format": "synergy-profile/v1", "models": {}}')
    with pytest.raises(ConfigError, match=r"^--pairs .*none\.json: the file has no 'pairs' list"):
        load_config([*state, "--pairs", str(none)])
    empty = tmp_path / "empty.json"  # issue 15 (7): an empty list was reported as missing
    empty.write_text('{"format": "synergy-profile/v1", "models": {}, "pairs": []}')
    with pytest.raises(ConfigError, match=r"^--pairs .*empty\.json: its 'pairs' list is empty"):
        load_config([*state, "--pairs", str(empty)])
    bad = tmp_path / "bad.json"
    bad.write_text('{"pairs": [{"models": ["a", "b"], "throughput": [0.7, 2]}]}')
    with pytest.raises(ConfigError, match=r"^--pairs: .*bad\.json: pairs\[0\]"):
        load_config([*state, "--pairs", str(bad)])
    with pytest.raises(ConfigError, match="^--pairs: no such file"):
        load_config([*state, "--pairs", str(tmp_path / "missing.json")])
    good = tmp_path / "good.json"
    good.write_text('{"pairs": [{"models": ["a", "b"], "throughput": [0.7, 0.6]}]}')
    assert load_config([*state, "--pairs", str(good)]).pairs == good


def test_a_new_attempt_does_not_show_the_last_attempts_exit_code() -> None:
    """Issue 15 (6): `synergy describe` of a job that SUCCEEDED (ReportCompletion) after a drain
    showed `exit code 75`, the drained attempt's."""
    drained = a_job().to(JobState.PREEMPTED, "drained", 14, exit_code=75).to(JobState.QUEUED, "q", 15)
    assert drained.exit_code == 75  # while it waits, the last exit is what there is to show
    again = drained.to(JobState.RUNNING, "r", 16, placements=(Placement("n1", 2, 6.5, 40.0),), attempt=2)
    assert again.to(JobState.SUCCEEDED, "training finished", 17).exit_code == 0


def test_checkpoint_every_s_from_the_toml_and_its_range(tmp_path: Path) -> None:
    assert load_config(["--state-dir", str(tmp_path)]).checkpoint_every_s == 0.0  # none unless set
    toml = tmp_path / "d.toml"
    toml.write_text("checkpoint-every-s = 1800\n")
    assert load_config(["--config", str(toml), "--state-dir", str(tmp_path)]).checkpoint_every_s == 1800.0
    with pytest.raises(ConfigError, match=r"--checkpoint-every-s: must be 0 or from 1 to"):
        load_config(["--state-dir", str(tmp_path), "--checkpoint-every-s", "0.5"])
