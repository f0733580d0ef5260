"""A real single-machine Slurm cluster for tests: munged, slurmctld and one slurmd per node.

Everything lives in one temporary directory: its own munge key and socket, a slurm.conf on
free ports (never the default 6817/6818), state and spool dirs, logs. Nodes are several
slurmd processes on this machine (`slurmd -N NAME`, each on its own port), with fake GPU GRES
backed by character devices made with `mknod X c 1 3` (Slurm only needs a device file to
hand out; no driver is involved). Enforcement is real: select/cons_tres with CR_Core_Memory,
proctrack/cgroup and task/cgroup + task/affinity on this machine's cgroup v1 hierarchies,
so a job's cpuset and memory limit are Slurm's.

The partition is set up as docs/slurm.md asks of a site: OverSubscribe=NO and open only to
the group of the user the tests run as (AllowGroups; AllowAccounts would need slurmdbd).
`restrict()` puts those settings back after a test changed them with `scontrol update`.

Node names carry a per-cluster tag: slurmd names its cgroups `slurm_NODE`, so two clusters
(two test sessions) never share a group.
"""

from __future__ import annotations

import grp
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
            "DEADLINE"}
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel", "scontrol")
#: What each fake node offers (the machine has 2 cores; every node sees both).
NODE_CPUS = 2
NODE_MEM_MB = 4096
NODE_GPUS = 2
GPU_TYPE = "t4"


def missing() -> str:
    """Why a Slurm cluster cannot be started here ("" = it can)."""
    absent = [d for d in DAEMONS if shutil.which(d) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} not found; apt-get install slurmctld slurmd slurm-client munge)"
    if os.geteuid() != 0:
        return "slurmd needs root here (it makes cgroups and runs jobs as their users)"
    if not all(Path("/sys/fs/cgroup", c).is_dir() for c in ("cpuset", "memory", "freezer")):
        return "slurmd's task/cgroup needs cgroup v1 cpuset, memory and freezer hierarchies"
    return ""


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class SlurmCluster:
    root: Path
    partition: str = "synergy"
    n_nodes: int = 2
    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def nodes(self) -> list[str]:
        return [f"s{self.tag}n{i}" for i in range(self.n_nodes)]

    @property
    def partition_settings(self) -> str:
        """The partition's settings docs/slurm.md asks for: no oversubscription, one group only."""
        return f"OverSubscribe=NO AllowGroups={grp.getgrgid(os.getgid()).gr_name}"

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need to find this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    # -- commands ---------------------------------------------------------------------------------
    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30, check=check)

    def sinfo_nodes(self) -> list[dict]:
        return json.loads(self.run("sinfo", "--json").stdout)["nodes"]

    def jobs(self) -> list[dict]:
        return json.loads(self.run("squeue", "--json", "--states=all").stdout)["jobs"]

    def scontrol(self, *args: str) -> None:
        self.run("scontrol", *args)

    def restrict(self) -> None:
        """The partition as slurm.conf set it (after a test changed its settings)."""
        self.scontrol("update", f"PartitionName={self.partition}", *self.partition_settings.split(),
                      "AllowAccounts=ALL", "AllowQos=ALL", "RootOnly=NO")

    # -- life cycle -------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> SlurmCluster:
        r = self.root
        for d in ("state", "spool", "log", "run", "dev"):
            (r / d).mkdir(parents=True, exist_ok=True)
        gpus = []
        for i in range(self.n_nodes * NODE_GPUS):
            dev = r / "dev" / f"gpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a char device like /dev/null
            gpus.append(dev)
        key = r / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        ctld_port, *node_ports = _free_ports(1 + self.n_nodes)
        self._write_config(ctld_port, node_ports)
        sock = r / "run" / "munge.sock"
        self._spawn("munged", "munged", "-F", f"--key-file={key}", f"--socket={sock}",
                    f"--log-file={r / 'log' / 'munged.log'}", f"--pid-file={r / 'run' / 'munged.pid'}",
                    f"--seed-file={r / 'run' / 'munged.seed'}")
        _wait(lambda: sock.exists(), timeout, "munged's socket")
        self._spawn("slurmctld", "slurmctld", "-D", "-i", "-c")
        for node in self.nodes:
            self._spawn(f"slurmd-{node}", "slurmd", "-D", "-N", node)
        _wait(self._all_idle, timeout, "every slurmd to register idle")
        return self

    def _all_idle(self) -> bool:
        try:
            nodes = self.sinfo_nodes()
        except (subprocess.SubprocessError, ValueError, KeyError):
            return False
        return len(nodes) == self.n_nodes and all(n["state"] == "idle" for n in nodes)

    def _spawn(self, name: str, *argv: str) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()

    def _write_config(self, ctld_port: int, node_ports: list[int]) -> None:
        r = self.root
        nodes = "\n".join(
            f"NodeName={n} NodeHostname=localhost NodeAddr=127.0.0.1 Port={p} CPUs={NODE_CPUS} Boards=1 "
            f"SocketsPerBoard=1 CoresPerSocket={NODE_CPUS} ThreadsPerCore=1 RealMemory={NODE_MEM_MB} "
            f"Gres=gpu:{GPU_TYPE}:{NODE_GPUS} State=UNKNOWN"
            for n, p in zip(self.nodes, node_ports)
        )
        self.conf.write_text(f"""\
ClusterName=syn{self.tag}
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmdPort={node_ports[0]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={r}/run/munge.sock
CredType=cred/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/run/slurmctld.pid
SlurmdPidFile={r}/run/slurmd-%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd-%n.log
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup,task/affinity
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=1
MinJobAge=600
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2
JobAcctGatherType=jobacct_gather/cgroup
JobAcctGatherFrequency=task=2
AccountingStorageType=accounting_storage/none
MpiDefault=none
KillWait=5
{nodes}
PartitionName={self.partition} Nodes={','.join(self.nodes)} Default=NO MaxTime=INFINITE State=UP {self.partition_settings}
""")
        (r / "gres.conf").write_text("".join(
            f"NodeName={n} Name=gpu Type={GPU_TYPE} File={r}/dev/gpu[{i * NODE_GPUS}-{i * NODE_GPUS + NODE_GPUS - 1}]\n"
            for i, n in enumerate(self.nodes)
        ))
        (r / "cgroup.conf").write_text(
            "CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\nCgroupAutomount=no\n"
            "ConstrainCores=yes\nConstrainRAMSpace=yes\nConstrainDevices=no\n"
        )
        (r / "plugstack.conf").write_text("")

    def reset(self) -> None:
        """Between tests: every job cancelled and gone from the nodes, every node resumed, the
        partition's settings as slurm.conf has them."""
        self.restrict()
        self.run("scancel", "--full", "--signal=KILL", "--partition", self.partition, check=False)
        _wait(lambda: all(j["job_state"] in FINISHED for j in self.jobs()), 30, "the jobs to end")
        for node in self.nodes:
            self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        _wait(self._all_idle, 30, "every node to be idle again")

    def stop(self) -> None:
        """Cancel every job, then stop the daemons (slurmd first), each by its own pid."""
        if "slurmctld" in self.procs:
            try:
                self.run("scancel", "--full", "--signal=KILL", "--partition", self.partition, check=False)
                _wait(lambda: not [j for j in self.jobs() if j["job_state"] in ("RUNNING", "COMPLETING")],
                      15, "jobs to end", fail=False)
            except (subprocess.SubprocessError, ValueError):
                pass
        for name in [*(n for n in self.procs if n.startswith("slurmd-")), "slurmctld", "munged"]:
            p = self.procs.pop(name, None)
            if p is None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
        self._remove_cgroups()

    def _remove_cgroups(self) -> None:
        """slurmd leaves its per-node groups behind: kill what still runs in this cluster's (a job
        whose cancel never reached it), then remove them, deepest first."""
        for node in self.nodes:
            top = Path("/sys/fs/cgroup/freezer") / f"slurm_{node}"
            for procs in top.rglob("cgroup.procs") if top.is_dir() else ():
                for pid in procs.read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except OSError:
                        pass
        time.sleep(0.2 if any(Path("/sys/fs/cgroup/freezer").glob(f"slurm_s{self.tag}n*")) else 0)
        for controller in Path("/sys/fs/cgroup").iterdir():
            for node in self.nodes:
                top = controller / f"slurm_{node}"
                if top.is_dir():
                    for d in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                        _rmdir(d)
                    _rmdir(top)


def _rmdir(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass


def _wait(pred, timeout: float, what: str, fail: bool = True) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    if fail:
        raise RuntimeError(f"Slurm test cluster: timed out after {timeout:g} s waiting for {what}")
    return False
