"""GPU types and loanable jobs in synergyd: the node's type from RegisterNode to the core's
`Server.gpu_type`, a job's `gpu_types` / `loanable` to the core's `Job`, and, through a live
synergyd with real agent processes and the CLI, `synergy nodes` / `submit` / `describe`."""
from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import grpc
import pytest

from cli_runner import run_cli
from synergyd_harness import DaemonProcess, wait_for
from test_daemon_logic import logic, round_, state, submit  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent.parent / "agent"))
from agent_harness import AgentProcess  # noqa: E402

from synergy.scheduler.daemon.app import Logic  # noqa: E402
from synergy.scheduler.daemon.records import JobState, NodeRecord  # noqa: E402
from synergy.scheduler.model import Resources, RoundInput  # noqa: E402
from synergy.v1 import admin_pb2, node_pb2, node_pb2_grpc  # noqa: E402

SLEEPER = "import time; time.sleep(600)"
LONG = 10**9  # iterations: a long job, never loanable by the default rule


def _register(logic: Logic, node_id: str, gpu_type: str, gpus: int = 2) -> None:
    logic.nodes.register(NodeRecord(node_id, node_id, Resources(gpus, 16, 128), Resources(), gpu_type=gpu_type), [])


def _record_inputs(logic: Logic) -> list[RoundInput]:
    seen: list[RoundInput] = []
    decide = logic.ctx.decider.decide

    def recording(scheduler: Any, inp: RoundInput) -> Any:
        seen.append(inp)
        return decide(scheduler, inp)

    logic.ctx.decider.decide = recording  # type: ignore[method-assign]
    return seen


def test_types_and_flags_reach_the_core(logic: Logic) -> None:
    _register(logic, "t4", "T4")
    _register(logic, "plain", "")
    seen = _record_inputs(logic)
    job = submit(logic, "typed", gpu_types=("T4", "V100"), loanable=False)
    other = submit(logic, "any")
    round_(logic)
    (inp,) = seen
    assert {s.id: s.gpu_type for s in inp.cluster.servers} == {"t4": "T4", "plain": ""}
    jobs = {j.id: j for j in inp.jobs}
    assert jobs[job].gpu_types == frozenset({"T4", "V100"}) and jobs[job].loanable is False
    assert jobs[other].gpu_types == frozenset() and jobs[other].loanable is None


def test_a_job_naming_a_type_no_node_has_waits_and_says_so(logic: Logic) -> None:
    """Issue 15 (no decision outside the core): the daemon left such a job out of the round's
    input with a reason of its own, which the simulator could not replay. The core decides it."""
    _register(logic, "t4", "T4")
    seen = _record_inputs(logic)
    job = submit(logic, "wants-v100", gpu_types=("V100",))
    round_(logic)
    assert job in {j.id for j in seen[-1].jobs}, "the daemon decided for the core"
    assert state(logic, job) == JobState.QUEUED
    assert logic.jobs.get(job).waiting_reason == "accepts GPU types V100; no schedulable node has one (schedulable: T4)"
    _register(logic, "v100", "V100")
    round_(logic)  # which node of a matching type it gets is the core's (type-aware placement)
    assert state(logic, job) == JobState.RUNNING and not logic.jobs.get(job).waiting_reason


def test_a_node_registering_with_another_type_is_updated_and_logged(logic: Logic,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    _register(logic, "n", "T4")
    with caplog.at_level("WARNING"):
        _register(logic, "n", "V100")
    assert logic.ctx.store.node("n").gpu_type == "V100"
    assert any(r.getMessage() == "node.gpu_type_changed" and r.fields == {"node": "n", "old": "T4", "new": "V100"}
               for r in caplog.records)


def test_loanable_flag_overrides_the_default_rule_on_a_loaned_node(logic: Logic) -> None:
    _register(logic, "l1", "T4")
    logic.nodes.loans.loan(["l1"])
    refused = submit(logic, "short-no", iterations=10, loanable=False)
    round_(logic)
    assert state(logic, refused) == JobState.QUEUED, "a short job that says no stays off the loaned node"
    taken = submit(logic, "long-yes", iterations=LONG, loanable=True)
    round_(logic)
    assert state(logic, taken) == JobState.RUNNING, "a long job that says yes goes there"


# -- a live synergyd, real agents, the CLI -----------------------------------------------------------
@pytest.fixture
def cluster(tmp_path: Path):
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600", "--log-level", "info", round_s=0.5).start()
    agent = AgentProcess(d, tmp_path / "work", "t4-node", "--no-cgroups", "--cpus", "0", "--memory", "1G",
                         "--gpu-type", "T4", fake_gpus=2)
    try:
        agent.start()
        yield d, agent
    finally:
        agent.stop()
        d.kill()


def _cli(capsys: pytest.CaptureFixture[str], d: DaemonProcess, *args: str):
    return run_cli(capsys, "--state-dir", str(d.state_dir), *args)


def test_live_types_loanable_and_refusals(cluster, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    d, agent = cluster
    nodes = _cli(capsys, d, "nodes")
    assert nodes.code == 0
    header, row = nodes.out.splitlines()[:2] if "TYPE" in nodes.out.splitlines()[0] else nodes.out.splitlines()[1:3]
    assert header.split()[:4] == ["NODE", "STATE", "TYPE", "POOL"] and row.split()[0] == "t4-node" and row.split()[2] == "T4"
    listed = json.loads(_cli(capsys, d, "--json", "nodes").out)["nodes"]
    assert [(n["node_id"], n["gpu_type"]) for n in listed] == [("t4-node", "T4")]
    assert "agent.started" in agent.log_text() and "gpu_type=T4" in agent.log_text()

    admin = d.admin()
    try:
        # Bad input: one line, exit 2 from the CLI; INVALID_ARGUMENT naming the field from the daemon; nothing stored.
        run = _cli(capsys, d, "submit", "--name", "bad", "--gpus", "1", "--gpu-type", "T4", "--gpu-type", "t4",
                   "--", sys.executable, "-c", SLEEPER)
        assert run.code == 2 and run.err.count("\n") == 1 and "spec.gpu_types[1] (--gpu-type):" in run.err
        spec = admin_pb2.JobSpec(name="bad", gpus=1, command=["x"], gpu_types=["T4", "T4"])
        with pytest.raises(grpc.RpcError) as exc:
            admin.SubmitJob(admin_pb2.SubmitJobRequest(spec=spec))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert exc.value.details().startswith("spec.gpu_types[1]: 'T4' is listed twice")
        assert admin.jobs() == []
        # A node reporting a malformed type is refused the same way.
        stub = node_pb2_grpc.NodeServiceStub(admin.channel)
        with pytest.raises(grpc.RpcError) as exc:
            stub.RegisterNode(node_pb2.RegisterNodeRequest(node_id="odd", gpu_type="t 4"),
                              metadata=[("authorization", f"Bearer {d.cluster_token}")])
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT and exc.value.details().startswith("gpu_type:")

        # A type no node has: accepted, waits with the reason; the spec round trips through describe.
        spec_file = tmp_path / "job.yaml"
        spec_file.write_text(textwrap.dedent(f"""\
            name: wants-v100
            gpus: 1
            gpu_types: [V100]
            loanable: true
            profiler: none
            command: [{sys.executable}, -c, "{SLEEPER}"]
            """))
        assert _cli(capsys, d, "submit", str(spec_file)).code == 0
        wait_for(lambda: "GPU types V100" in admin.describe("wants-v100").waiting_reason, timeout=30,
                 what="the waiting reason")
        info = admin.describe("wants-v100")
        assert list(info.spec.gpu_types) == ["V100"] and info.spec.loanable is True
        text = _cli(capsys, d, "describe", "wants-v100").out
        assert "accepts GPU types V100; no schedulable node has one (schedulable: T4)" in " ".join(text.split())
        assert "loanable" in text and "yes" in text
        assert _cli(capsys, d, "cancel", "wants-v100").code == 0

        # Loaning: the node is loaned; a long job with --loanable runs there, a short one with --no-loanable waits.
        assert _cli(capsys, d, "nodes", "loan", "t4-node").code == 0
        common = ("--gpus", "1", "--profiler", "none", "--gpu-type", "T4")
        run = _cli(capsys, d, "submit", "--name", "short-no", *common, "--iterations", "10", "--no-loanable",
                   "--", sys.executable, "-c", SLEEPER)
        assert run.code == 0, run.err
        run = _cli(capsys, d, "submit", "--name", "long-yes", *common, "--iterations", str(LONG), "--loanable",
                   "--", sys.executable, "-c", SLEEPER)
        assert run.code == 0, run.err
        wait_for(lambda: admin.state("long-yes") == "running", timeout=60, what="the loanable job to run")
        assert admin.describe("long-yes").placements[0].node_id == "t4-node"
        assert admin.state("short-no") == "queued" and admin.describe("short-no").spec.loanable is False
        described = _cli(capsys, d, "--json", "describe", "short-no").out
        assert json.loads(described)["spec"]["loanable"] is False
    finally:
        admin.close()


def test_live_typed_jobs_land_on_nodes_of_their_type(tmp_path: Path) -> None:
    """A V100 agent and a T4 agent, one GPU each: a V100-only job submitted first lands on the
    V100 node and a T4-only job on the T4 node (type-blind, the first job takes the type that
    ties first by name, T4, and the second runs on the wrong type)."""
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "600", round_s=0.5).start()
    agents = [AgentProcess(d, tmp_path / f"work-{t}", f"{t.lower()}-node", "--no-cgroups", "--cpus", cpus,
                           "--memory", "1G", "--gpu-type", t, fake_gpus=1) for t, cpus in (("V100", "0"), ("T4", "0-1"))]
    admin = d.admin()
    try:
        for agent in agents:
            agent.start()
        wait_for(lambda: len(admin.ListNodes(admin_pb2.ListNodesRequest()).nodes) == 2, timeout=30, what="two nodes")
        for name, t in (("wants-v100", "V100"), ("wants-t4", "T4")):
            admin.submit(name, gpus=1, gpu_types=[t], command=(sys.executable, "-c", SLEEPER),
                         working_dir=str(tmp_path))
        for name, node in (("wants-t4", "t4-node"), ("wants-v100", "v100-node")):
            wait_for(lambda: admin.state(name) == "running", timeout=60, what=f"{name} to run")
            assert [p.node_id for p in admin.describe(name).placements] == [node]
        # The proportional share shown is the landed type's: 2 CPUs per T4, 1 per V100.
        assert admin.describe("wants-t4").proportional_share.cpus == 2
        assert admin.describe("wants-v100").proportional_share.cpus == 1
    finally:
        admin.close()
        for agent in agents:
            agent.stop()
        d.kill()
