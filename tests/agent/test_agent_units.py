"""Unit tests of the agent's pure parts: the env contract, core selection, flags."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from synergy.common import contract
from synergy.agent.config import ConfigError, from_args, parse_size_gb
from synergy.agent.cores import (CoreError, CoreGrant, choose_cores, format_cpu_list, parse_cpu_list, pool_load, pool_of,
                                 split_cpus)
from synergy.agent.tasks import log_tail


def _env(**over: object) -> contract.JobEnv:
    base = dict(job_id=7, attempt=2, rank=1, world_size=3, daemon_address="127.0.0.1:5", job_token="s3cret-token")
    base.update(over)
    return contract.JobEnv(**base)  # type: ignore[arg-type]


def test_contract_round_trips_through_the_environment() -> None:
    e = _env(alloc_cpus=2.5, alloc_cores="2-4", alloc_mem_gb=8.0, alloc_gpus=2, resume_step=40,
             resume_checkpoint="/c/40", master_addr="h0", master_port=contract.master_port(7, 2))
    env = e.to_env()
    assert env[contract.JOB_TOKEN] == "s3cret-token" and env[contract.ALLOC_CORES] == "2-4"
    assert all(k.startswith("SYNERGY_") for k in env)
    assert contract.JobEnv.from_env(env) == e


def test_contract_names_the_missing_or_malformed_variable() -> None:
    env = _env().to_env()
    del env[contract.JOB_TOKEN]
    with pytest.raises(ValueError, match="SYNERGY_JOB_TOKEN is not set"):
        contract.JobEnv.from_env(env)
    env = _env().to_env() | {contract.RANK: "one"}
    with pytest.raises(ValueError, match="SYNERGY_RANK='one'"):
        contract.JobEnv.from_env(env)


def test_job_token_is_not_in_the_repr() -> None:
    assert "s3cret" not in repr(_env())


def test_master_port_is_shared_by_ranks_and_new_per_attempt() -> None:
    assert contract.master_port(3, 1) == contract.master_port(3, 1) != contract.master_port(3, 2)
    assert all(contract.MASTER_PORT_BASE <= contract.master_port(j, a) < 65536 for j in range(50) for a in range(5))


def test_cpu_lists_parse_and_format() -> None:
    assert parse_cpu_list("0-3,8,10-11") == (0, 1, 2, 3, 8, 10, 11)
    assert format_cpu_list((11, 10, 8, 3, 2, 1, 0)) == "0-3,8,10-11"
    assert parse_cpu_list("") == ()
    for bad in ("a", "3-1", "-1", "1-x"):
        with pytest.raises(CoreError):
            parse_cpu_list(bad)


def test_whole_cores_are_exclusive_and_resizes_keep_theirs() -> None:
    usable = range(8)
    held = [CoreGrant((0, 1))]
    assert choose_cores(2, usable, held) == CoreGrant((2, 3))
    # a resize keeps the task's own cores first
    assert choose_cores(3, usable, [CoreGrant((0,))], keep=CoreGrant((5, 6))).exclusive == (1, 5, 6)
    assert choose_cores(1, usable, [CoreGrant((0,))], keep=CoreGrant((5, 6))).exclusive == (5,)
    with pytest.raises(CoreError, match="needs 3 whole cores.*2 of the agent.s 4 cores .0-3. are held whole"):
        choose_cores(3, range(4), held)


def test_fractions_run_on_the_pool_of_cores_nobody_holds_whole() -> None:
    assert split_cpus(2.5) == (2, 0.5) and split_cpus(2.0) == (2, 0.0) and split_cpus(0) == (0, 0.0)
    with pytest.raises(CoreError, match="placement.cpus"):
        split_cpus(-1)
    g = choose_cores(2.5, range(8), [CoreGrant((0, 1))])
    assert g == CoreGrant((2, 3), shared=(4, 5, 6, 7), fraction=0.5) and g.cores == (2, 3, 4, 5, 6, 7)
    # four 0.5-CPU tasks on two cores: all on the pool of both, their quotas filling it
    held: list[CoreGrant] = []
    for _ in range(4):
        held.append(choose_cores(0.5, range(2), held))
    assert all(g.shared == (0, 1) and not g.exclusive for g in held)
    assert pool_load(held) == 2.0 and pool_of(range(2), held) == (0, 1)
    with pytest.raises(CoreError, match="0.5 CPU on the shared pool.*run 2 CPUs on the rest"):
        choose_cores(0.5, range(2), held)
    with pytest.raises(CoreError, match="1 whole cores"):
        choose_cores(1, range(2), held[:3])  # 1.5 on the pool would not fit the one core left
    # a whole core comes out of the pool while what runs there still fits the rest
    whole = choose_cores(1, range(2), held[:2])
    assert whole.exclusive == (0,) and whole.shared == () and pool_of(range(2), held[:2] + [whole]) == (1,)
    assert choose_cores(0.1 + 0.2, range(1), [CoreGrant((), (0,), 0.7)]).shared == (0,)  # float sums
    # a resize keeps its whole cores, and may turn its fraction into a whole core
    mine = CoreGrant((1,), (), 0.0)
    assert choose_cores(1.5, range(3), [CoreGrant((), (0, 2), 0.5)], keep=mine) == CoreGrant((1,), (0, 2), 0.5)
    assert choose_cores(1, range(2), [CoreGrant((), (0, 1), 0.5)], keep=CoreGrant((), (0, 1), 0.5)).exclusive == (0,)
    assert choose_cores(0, range(2), []).shared == (0, 1)  # 0 CPUs still run somewhere
    with pytest.raises(CoreError, match="a core to run on"):
        choose_cores(0, range(2), [CoreGrant((0, 1))])


def test_any_placement_that_fits_the_node_gets_cores_whatever_came_before() -> None:
    """The physical run's sequence (issue 14): TUNE resized one of four 1-GPU jobs on a 2-core
    node to a whole CPU (0.5 + 0.25 + 0.25 on the rest). With each fraction packed onto one
    core, the others sat on both cores and the resize failed for 8 s; three 0.6s never fit."""
    held = [choose_cores(c, range(2), []) for c in (0.5,)]
    for c in (0.25, 0.25, 0.25):
        held.append(choose_cores(c, range(2), held))
    big = choose_cores(1, range(2), held[:2] + held[3:], keep=held[2])
    assert len(big.exclusive) == 1 and pool_of(range(2), held[:2] + held[3:] + [big]) != ()
    three: list[CoreGrant] = []
    for _ in range(3):
        three.append(choose_cores(0.6, range(2), three))
    assert pool_load(three) == pytest.approx(1.8)
    # 0.75 + 0.5 + 0.25 already there, 0.5 more: 2 CPUs on 2 cores
    held = []
    for c in (0.75, 0.5, 0.25, 0.5):
        held.append(choose_cores(c, range(2), held))
    assert pool_load(held) == pytest.approx(2.0)


def test_sizes() -> None:
    assert parse_size_gb("8G", "--memory") == 8
    assert parse_size_gb("512M", "--memory") == 0.5
    assert parse_size_gb("1.5GiB", "--memory") == 1.5
    with pytest.raises(ConfigError, match="^--memory: 'lots'"):
        parse_size_gb("lots", "--memory")


def test_flags_are_checked(tmp_path: Path) -> None:
    token = tmp_path / "t"
    token.write_text("x" * 20)
    base = ["--daemon", "127.0.0.1:1", "--cluster-token-file", str(token), "--work-dir", str(tmp_path / "w")]
    cfg = from_args([*base, "--cpus", "0", "--memory", "1G", "--fake-gpus", "2", "--node-id", "n-1"])
    assert cfg.cores == (0,) and cfg.mem_gb == 1 and cfg.fake_gpus == 2 and (tmp_path / "w" / "logs").is_dir()
    assert "x" * 20 not in repr(cfg)
    assert not cfg.stop_tasks_on_exit and cfg.metrics_port == 0 and cfg.sample_interval_s == 1
    assert from_args([*base, "--metrics-port", "-1", "--stop-tasks-on-exit"]).metrics_port is None
    assert cfg.task_pids_max == 4096 and not cfg.allow_unenforced and cfg.cgroup_parent == "synergy"
    assert from_args([*base, "--cgroup-parent", "/team.a/synergy_1/"]).cgroup_parent == "team.a/synergy_1"
    for extra, message in [
        (["--cpus", "9999"], "^--cpus: cores 9999 are not available"),
        (["--cpus", "0", "--reserve-cpus", "1"], "^--reserve-cpus"),
        (["--memory", "100000G"], "^--memory"),
        (["--node-id", "bad id"], "^--node-id"),
        (["--daemon", "nohost"], "^--daemon"),
        (["--metrics-port", "70000"], "^--metrics-port"),
        (["--sample-interval-s", "-1"], "^--sample-interval-s"),
        (["--bandwidth-calibration-s", "nan"], "^--bandwidth-calibration-s"),
        # issue 15: a parent that escapes the cgroup tree made every launch fail with 127
        (["--cgroup-parent", ".."], "^--cgroup-parent: '..' must be a relative path"),
        (["--cgroup-parent", "a/../../b"], "^--cgroup-parent"),
        (["--cgroup-parent", "a//b"], "^--cgroup-parent"),
        (["--cgroup-parent", "a/./b"], "^--cgroup-parent"),
        (["--task-pids-max", "-1"], "^--task-pids-max"),
    ]:
        with pytest.raises(ConfigError, match=message):
            from_args([*base, *extra])
    with pytest.raises(ConfigError, match="^--cluster-token-file: cannot read"):
        from_args(["--daemon", "h:1", "--cluster-token-file", str(tmp_path / "missing")])


def test_bad_flag_is_one_line_and_exit_2() -> None:
    r = subprocess.run([sys.executable, "-m", "synergy.agent.main", "--cpus", "zz", "--daemon", "h:1",
                        "--cluster-token-file", "/nonexistent"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "synergy.agent.main", "--no-such-flag"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr


def test_log_tail_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "l.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    tail = log_tail(log)
    assert tail.splitlines() == [f"line {i}" for i in range(90, 100)]
    log.write_text("x" * 5000)
    assert len(log_tail(log)) <= 700
    assert log_tail(tmp_path / "missing") == ""


def test_memory_is_kept_in_the_steps_the_daemon_sees(tmp_path: Path) -> None:
    """RegisterNode sends GB with 3 decimals: the agent must not hold a figure above what it
    advertised (it refused a share as 'needs 23.541 GB, 23.5406 free' when it rounded up)."""
    token = tmp_path / "t"
    token.write_text("x" * 20)
    cfg = from_args(["--daemon", "127.0.0.1:1", "--cluster-token-file", str(token),
                     "--work-dir", str(tmp_path / "w"), "--memory", "2.00068G", "--reserve-mem", "0.00012G"])
    assert cfg.mem_gb == 2.0 and cfg.reserve_mem_gb == 0.001
    machine = from_args(["--daemon", "127.0.0.1:1", "--cluster-token-file", str(token),
                         "--work-dir", str(tmp_path / "w")])
    assert round(machine.mem_gb, 3) == machine.mem_gb  # what RegisterNode sends is what it holds


@pytest.mark.skipif(os.geteuid() != 0, reason="whom jobs run as is checked only where the agent is root (only "
                    "root can switch users; a plain agent runs jobs as itself); CI runs as root")
def test_job_user_flags_are_checked_where_the_agent_is_root(tmp_path: Path) -> None:
    """Issue 16: a root agent's default user must exist on the node, and root jobs are asked for by name."""
    token = tmp_path / "t"
    token.write_text("x" * 20)
    base = ["--daemon", "127.0.0.1:1", "--cluster-token-file", str(token), "--work-dir", str(tmp_path / "w")]
    cfg = from_args(base)
    assert (cfg.default_user, cfg.allow_root_jobs, cfg.ignore_job_users) == ("nobody", False, False)
    assert stat.S_IMODE((tmp_path / "w").stat().st_mode) == 0o700  # made the agent's alone
    for extra, message in [
        (["--default-user", "nosuchuser-x1"], "^--default-user: user 'nosuchuser-x1' is not known on node"),
        (["--default-user", "root"], r"^--default-user: 'root' is root \(uid 0\).*--allow-root-jobs"),
        (["--ignore-job-users"], "^--ignore-job-users: the agent runs as root.*--allow-root-jobs"),
    ]:
        with pytest.raises(ConfigError, match=message):
            from_args([*base, *extra])
    assert from_args([*base, "--ignore-job-users", "--allow-root-jobs"]).ignore_job_users
    assert from_args([*base, "--default-user", "root", "--allow-root-jobs"]).default_user == "root"


def test_a_file_every_job_reads_must_be_readable_by_others() -> None:
    """Jobs of other users read --tls-ca (SYNERGY_TLS_CA): the agent warns when they cannot."""
    from synergy.agent.users import unreadable_by_others

    top = Path(tempfile.mkdtemp())
    try:
        ca = top / "ca.pem"
        ca.write_text("cert")
        os.chmod(top, 0o755)
        os.chmod(ca, 0o644)
        assert unreadable_by_others(str(ca)) == ""
        os.chmod(ca, 0o600)
        assert unreadable_by_others(str(ca)) == f"{ca} is not readable by others"
        os.chmod(ca, 0o644)
        os.chmod(top, 0o700)
        assert unreadable_by_others(str(ca)) == f"its dir {top} cannot be entered by others"
        assert "No such file" in unreadable_by_others(str(top / "missing"))
    finally:
        shutil.rmtree(top)
