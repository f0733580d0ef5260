"""What the iterator's end-to-end tests share: a real synergyd with real `synergy-agent`
processes (fake GPUs, disjoint one-core `--cpus` slices, a work dir each), the test job
script (`train_script.py`) and the batch records it writes.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from agent_harness import AgentProcess
from synergyd_harness import DaemonProcess

SCRIPT = str(Path(__file__).parent / "train_script.py")


@dataclass(frozen=True)
class Row:
    """One trained batch, as train_script.py records it."""

    step: int
    rank: int
    epoch: int
    loss: float
    ids: list[int]
    attempt: int


def records(path: Path) -> list[Row]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        step, rank, epoch, loss, ids, attempt = line.split()
        out.append(Row(int(step), int(rank), int(epoch), float(loss), [int(i) for i in ids.split(",")], int(attempt)))
    return out


def train_command(record: Path, *args: str) -> tuple[str, ...]:
    """The job's command line: train_script.py recording its batches to `record`."""
    return (sys.executable, "-u", SCRIPT, "--record", str(record), *args)


@dataclass
class Cluster:
    daemon: DaemonProcess
    agents: list[AgentProcess] = field(default_factory=list)

    def agent(self, node_id: str) -> AgentProcess:
        return next(a for a in self.agents if a.node_id == node_id)

    def stop(self) -> None:
        for a in self.agents:
            a.stop()
            a.remove_cgroups()
        self.daemon.kill()


def start_cluster(tmp_path: Path, *daemon_flags: str, gpus: int = 1) -> Cluster:
    """synergyd and agents n1 (core 0) and n2 (core 1), each with `gpus` fake GPUs and 2 GB."""
    d = DaemonProcess(tmp_path / "state", "--launch-timeout-s", "120", *daemon_flags).start()
    c = Cluster(d)
    try:
        for node, cpus in (("n1", "0"), ("n2", "1")):
            c.agents.append(AgentProcess(d, tmp_path / f"work-{node}", node, "--cpus", cpus, "--memory", "2G",
                                         fake_gpus=gpus).start())
    except BaseException:
        c.stop()
        raise
    return c
