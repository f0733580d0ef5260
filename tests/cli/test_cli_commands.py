"""`synergy` against a real synergyd: submit, list, describe, cancel, nodes, status, policy."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from synergy.v1 import common_pb2, node_pb2, node_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "jobs" / "resnet18.yaml"


def as_json(run) -> object:
    assert run.code == 0, run.err
    return json.loads(run.out)  # exactly one JSON document, nothing else on stdout


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


# -- jobs ------------------------------------------------------------------------------------------
def test_submit_from_yaml_then_list_and_describe(cli) -> None:
    job = as_json(cli("submit", str(EXAMPLE), "--json"))
    assert job["name"] == "resnet18-imagenet"
    assert job["state"] in ("submitted", "profiling", "queued")
    assert job["spec"]["command"][:2] == ["python", "train.py"]
    assert job["spec"]["env"] == {"PYTHONUNBUFFERED": "1"}
    assert job["spec"]["iterations"] == 450000

    listed = as_json(cli("jobs", "--json"))["jobs"]
    assert job["id"] in [j["id"] for j in listed]

    described = as_json(cli("describe", str(job["id"]), "--json"))
    states = [t["to_state"] for t in described["history"]]
    assert states[0] == "submitted"
    assert all(t["reason"] for t in described["history"])

    # No node is registered yet: after a round (1 s), describe says why the job waits. The
    # deadline is one a busy 2-core machine meets, not the round length.
    deadline = time.monotonic() + 30
    while not described["waiting_reason"] and time.monotonic() < deadline:
        time.sleep(0.2)
        described = as_json(cli("describe", "resnet18-imagenet", "--json"))
    assert described["state"] == "queued" and "no schedulable node" in described["waiting_reason"]
    by_name = cli("describe", "resnet18-imagenet")
    assert by_name.code == 0
    assert "History" in by_name.out and "profiling" in by_name.out
    assert described["waiting_reason"] in by_name.out


def test_submit_from_flags_keeps_the_command_verbatim(cli, tmp_path: Path) -> None:
    run = cli("submit", "--name", "flags-job", "--gpus", "2", "--model", "resnet50", "--env", "A=1",
              "--env", "B=x=y", "--iterations", "100", "--working-dir", str(tmp_path), "--json",
              "--", "python", "train.py", "--lr", "0.1", "--json", "a b")
    job = as_json(run)
    assert job["spec"]["command"] == ["python", "train.py", "--lr", "0.1", "--json", "a b"]
    assert job["spec"]["env"] == {"A": "1", "B": "x=y"}
    assert job["spec"]["gpus"] == 2 and job["spec"]["working_dir"] == str(tmp_path)

    run = cli("submit", "--name", "string-cmd", "--gpus", "1", "--command", "python t.py --msg 'a b'", "--json")
    assert as_json(run)["spec"]["command"] == ["python", "t.py", "--msg", "a b"]

    table = cli("jobs")
    assert table.code == 0 and "flags-job" in table.out and "string-cmd" in table.out


def test_user_text_is_never_read_as_markup(cli) -> None:
    as_json(cli("submit", "--name", "markup", "--gpus", "1", "--json", "--", "echo", "[red]x[/red]"))
    run = cli("describe", "markup")
    assert run.code == 0 and "'[red]x[/red]'" in run.out


def test_cancel_and_its_reason_in_the_history(cli) -> None:
    as_json(cli("submit", "--name", "to-cancel", "--gpus", "1", "--command", "sleep 1000", "--json"))
    job = as_json(cli("cancel", "to-cancel", "--reason", "wrong dataset", "--json"))
    assert job["state"] == "cancelled"
    described = as_json(cli("describe", "to-cancel", "--json"))
    assert described["history"][-1]["to_state"] == "cancelled"
    assert "wrong dataset" in described["history"][-1]["reason"]
    active = as_json(cli("jobs", "--active", "--json"))["jobs"]
    assert "to-cancel" not in [j["name"] for j in active]
    cancelled = as_json(cli("jobs", "--state", "cancelled", "--json"))["jobs"]
    assert "to-cancel" in [j["name"] for j in cancelled]


def test_daemon_refusals_are_one_line(cli) -> None:
    run = cli("describe", "no-such-job")
    assert run.code == 1 and "no-such-job" in one_line(run.err) and run.out == ""

    as_json(cli("submit", "--name", "dup", "--gpus", "1", "--command", "x", "--json"))
    run = cli("submit", "--name", "dup", "--gpus", "1", "--command", "x")
    assert run.code == 1 and "already exists" in one_line(run.err)

    # Valid for the CLI, above the daemon's --max-job-gpus: its INVALID_ARGUMENT names the field.
    run = cli("submit", "--name", "huge", "--gpus", "100000", "--command", "x")
    assert run.code == 2 and "spec.gpus" in one_line(run.err)


def test_bad_spec_fails_before_dialing(cli, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: bad\ncommand: [python, t.py]\ngpus: 0\n")
    run = cli("submit", str(spec))
    assert run.code == 2 and run.out == ""
    assert one_line(run.err) == f"synergy: error: {spec}: spec.gpus: must be at least 1, got 0"
    run = cli("submit", "--name", "x", "--gpus", "-1", "--command", "t")
    assert run.code == 2 and "spec.gpus (--gpus): must be at least 1, got -1" in one_line(run.err)


# -- nodes, status, policy -------------------------------------------------------------------------
def _register_node(daemon, node_id: str) -> None:
    with grpc.insecure_channel(daemon.address) as channel:
        node_pb2_grpc.NodeServiceStub(channel).RegisterNode(
            node_pb2.RegisterNodeRequest(
                node_id=node_id, hostname=node_id,
                capacity=common_pb2.Resources(gpus=4, cpus=32, mem_gb=256),
                reserved=common_pb2.Resources(cpus=2, mem_gb=8), agent_version="test"),
            metadata=(("authorization", f"Bearer {daemon.cluster_token}"),), timeout=10)


def test_nodes_cordon_drain_resume(cli, synergyd) -> None:
    _register_node(synergyd, "gpu-a")
    nodes = as_json(cli("nodes", "--json"))["nodes"]
    node = next(n for n in nodes if n["node_id"] == "gpu-a")
    assert node["allocatable"]["cpus"] == 30 and node["capacity"]["gpus"] == 4
    assert "gpu-a" in cli("nodes").out

    for command, state in (("cordon", "cordoned"), ("drain", "draining"), ("resume", "ready")):
        node = as_json(cli(command, "gpu-a", "--reason", f"{command} for test", "--json"))
        assert node["state"] == state, (command, node)
    run = cli("cordon", "gpu-a")  # cordon and drain require a reason
    assert run.code == 2 and "--reason" in one_line(run.err)
    run = cli("cordon", "no-such-node", "--reason", "x")
    assert run.code == 1 and "no-such-node" in one_line(run.err)


def test_nodes_loan_and_reclaim(cli, synergyd) -> None:
    _register_node(synergyd, "inf-a")
    loaned = as_json(cli("nodes", "loan", "inf-a", "--json"))["nodes"]
    assert [(n["node_id"], n["pool"]) for n in loaned] == [("inf-a", "loaned")]
    assert "loaned: inf-a" in cli("nodes", "loan", "inf-a").out
    run = cli("nodes", "loan", "no-such-node")
    assert run.code == 1 and "node_ids[0]: no node 'no-such-node'" in one_line(run.err)
    for bad in ("0", "-3"):
        run = cli("nodes", "reclaim", bad)
        assert run.code == 2 and "N must be a positive number" in one_line(run.err)
    run = cli("nodes", "reclaim", "9")
    assert run.code == 2 and one_line(run.err).startswith("synergy: error: count: must be 1 to the")
    run = cli("nodes", "reclaim", "1", "--deadline-s", "-1")
    assert run.code == 2 and "deadline_s:" in one_line(run.err)
    back = as_json(cli("nodes", "reclaim", "1", "--deadline-s", "5", "--json"))
    assert [(n["node_id"], n["pool"]) for n in back["nodes"]] == [("inf-a", "inference")]
    assert back["preempted_job_ids"] == [] and back["shrunk"] == []
    assert "inf-a" in cli("nodes").out  # the plain listing still works beside the verbs
    # Issue 15 (7): status said "free N GPU" while jobs waited, the free node being in the
    # inference pool, which only --json showed. The tables name the pools now.
    header, *rows = [line.split() for line in cli("nodes").out.splitlines() if line.strip()]
    assert header[:4] == ["NODE", "STATE", "TYPE", "POOL"]
    assert [r[3] for r in rows if r[0] == "inf-a"] == ["inference"]
    free = [line for line in cli("status").out.splitlines() if line.strip().startswith("free")]
    assert free and "inference" in free[0], cli("status").out


def test_status_and_runtime_policy_change(cli) -> None:
    status = as_json(cli("status", "--json"))
    assert status["max_job_gpus"] == 64 and status["round_s"] == 1  # the daemon's defaults / flags
    assert status["policy"] in ("fifo", "las") and status["mechanism"] in ("tune", "greedy")
    changed = as_json(cli("policy", "set", "--policy", "las", "--mechanism", "greedy", "--json"))
    assert changed == {"policy": "las", "mechanism": "greedy"}
    assert as_json(cli("policy", "show", "--json")) == {"policy": "las", "mechanism": "greedy"}
    run = cli("policy", "set", "--policy", "nope")
    assert run.code == 2 and "nope" in one_line(run.err)
    assert "las" in cli("status").out


# -- connection ------------------------------------------------------------------------------------
def test_address_and_token_from_the_environment(cli, synergyd, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNERGY_ADDRESS", synergyd.address)
    monkeypatch.setenv("SYNERGY_TOKEN", synergyd.admin_token)
    assert "jobs" in as_json(cli("jobs", "--json", state_dir=False))

    monkeypatch.setenv("SYNERGY_TOKEN", "not-the-admin-token")
    run = cli("jobs", state_dir=False)
    assert run.code == 1 and "does not know who you are" in one_line(run.err)
    assert "not-the-admin-token" not in run.err


def test_token_file_flag(cli, synergyd, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text(synergyd.admin_token + "\n")
    run = cli("--address", synergyd.address, "--token-file", str(token), "status", "--json", state_dir=False)
    # The same daemon's status as through the state dir: the flag's token was the one used.
    expected = as_json(cli("policy", "show", "--json"))
    assert run.code == 0 and {k: as_json(run)[k] for k in ("policy", "mechanism")} == expected
    run = cli("--address", synergyd.address, "--token-file", str(tmp_path / "nope"), "status", state_dir=False)
    assert run.code == 3 and "nope" in one_line(run.err)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _synergy(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The installed console entry point, as a user runs it."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SYNERGY_")}
    return subprocess.run([sys.executable, "-c", "import sys; from synergy.scheduler.cli.main import main; "
                           "sys.exit(main())", *args], capture_output=True, text=True, timeout=60,
                          env={**clean, **(env or {})})


def test_unreachable_daemon_is_one_clear_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    run = _synergy("--address", address, "jobs")
    assert run.returncode == 3 and run.stdout == ""
    assert one_line(run.stderr) == (f"synergy: error: cannot reach synergyd at {address} "
                                    "(is it running? see --address, SYNERGY_ADDRESS or --state-dir)")
    run = _synergy("jobs", "--json", "--state-dir", str(tmp_path / "empty"))
    assert run.returncode == 3 and "address does not exist" in one_line(run.stderr)


def test_bad_spec_through_the_entry_point(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: x\ncommand: python t.py\ngpus: two\n")
    run = _synergy("submit", str(spec), env={"SYNERGY_ADDRESS": f"127.0.0.1:{_closed_port()}"})
    assert run.returncode == 2 and run.stdout == ""
    assert one_line(run.stderr) == f"synergy: error: {spec}: spec.gpus: must be an integer, got a string 'two'"


def test_help_explains_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    from synergy.scheduler.cli.main import main

    commands = ["submit", "jobs", "describe", "cancel", "nodes", "cordon", "drain", "resume", "status", "policy"]
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    for command in commands:
        assert command in top
    for command in [*commands, "policy set"]:
        assert main([*command.split(), "--help"]) == 0
        text = capsys.readouterr().out
        assert "--json" in text and "--address" in text, command


def test_a_bad_profiler_flag_is_one_line_naming_the_field(cli) -> None:
    run = cli("submit", "--name", "badprof", "--gpus", "1", "--profiler", "fast", "--", "python", "t.py")
    assert run.code != 0 and "Traceback" not in run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and "spec.profiler" in lines[0] and "--profiler" in lines[0], run.err


def test_profiler_flag_reaches_the_spec(cli) -> None:
    job = as_json(cli("submit", "--name", "coda-job", "--gpus", "1", "--profiler", "coda", "--checkpoint-dir",
                      "/tmp/ckpt", "--json", "--", "python", "t.py"))
    assert job["spec"]["profiler"] == "coda" and job["state"] == "profiling"


def test_an_explicit_profiler_needs_a_checkpoint_dir(cli) -> None:
    run = cli("submit", "--name", "nockpt", "--gpus", "1", "--profiler", "synergy", "--", "python", "t.py")
    assert run.code != 0 and "Traceback" not in run.err
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and "spec.checkpoint_dir" in lines[0], run.err
    names = [j["name"] for j in as_json(cli("jobs", "--json"))["jobs"]]
    assert "nockpt" not in names, "a refused job must not exist"


def test_auto_without_a_checkpoint_dir_keeps_the_stand_in_and_says_why(cli) -> None:
    job = as_json(cli("submit", "--name", "auto-nockpt", "--gpus", "1", "--task", "image", "--json",
                      "--", "python", "t.py"))
    assert job["state"] == "queued" and job["profile_source"].startswith("zoo:resnet18"), job
    assert "no checkpoint_dir" in job["state_reason"], job["state_reason"]


def test_submit_elastic_range_reaches_the_daemon(cli) -> None:
    """`--min-gpus/--max-gpus` are sent (not dropped) and the daemon accepts them; `jobs`
    shows the range."""
    run = cli("submit", "--name", "elastic-job", "--gpus", "2", "--min-gpus", "1", "--max-gpus", "4",
              "--json", "--", "python", "train.py")
    assert run.err == ""
    job = as_json(run)
    assert (job["spec"]["min_gpus"], job["spec"]["max_gpus"]) == (1, 4)
    table = cli("jobs")
    assert table.code == 0
    assert any("elastic-job" in line and "1-4" in line for line in table.out.splitlines()), table.out
    bad = cli("submit", "--name", "elastic-bad", "--gpus", "2", "--min-gpus", "3", "--max-gpus", "4", "--", "x")
    assert bad.code != 0 and "spec.gpus (--gpus): must lie in the elastic range 3..4" in bad.err


def test_no_share_is_kept_and_described(cli) -> None:
    job = as_json(cli("submit", "--name", "solo", "--gpus", "1", "--no-share", "--json", "--", "python", "t.py"))
    assert job["spec"]["no_share"] is True
    assert as_json(cli("describe", "solo", "--json"))["spec"]["no_share"] is True
    shown = cli("describe", "solo")
    assert shown.code == 0 and "never (no_share)" in shown.out
    # a wrong type never reaches the daemon: one line, exit 2
    run = cli("submit", "--name", "solo2", "--gpus", "1", "--no-share=yes", "--", "python", "t.py")
    assert run.code == 2 and "Traceback" not in run.err
