"""The demo's local cluster: synergyd and two synergy-agents under one temporary dir.

Everything the demo starts lives under `LocalCluster.root` (state dir, agents' work dirs,
logs) and every cgroup under one parent named after it, so `stop()` can prove it left
nothing behind: it stops the agents first (each stops its tasks and removes its cgroups:
`--stop-tasks-on-exit`), then synergyd, and then sweeps what a crashed or killed child could
have left: processes whose command line names the root or whose output goes there, and
processes in (then the directories of) the demo's cgroups.

Every child runs in a session of its own, so a Ctrl-C in the terminal reaches only the
demo, which then stops the children in the order above (a job's agent must outlive it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from synergy.scheduler.statedir import ADDRESS_FILE, ADMIN_TOKEN_FILE, DASHBOARD_ADDRESS_FILE

#: Where cgroup controllers are mounted (v1: one folder per controller; v2: the root itself).
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: Grace for a child to exit after SIGTERM before it is killed: the agents need their
#: `--stop-grace-s` for their tasks plus a heartbeat.
AGENT_STOP_S = 20.0
#: The CPU weight of each agent's cgroup parent: the largest cgroup v1 `cpu.shares` (v2's
#: `cpu.weight` largest is 10000). See `LocalCluster.dedicate_cores`.
CPU_SHARES_V1, CPU_WEIGHT_V2 = 262144, 10000
DAEMON_STOP_S = 15.0
TASK_STOP_GRACE_S = 3


@dataclass
class Child:
    """One process the demo started: what it is, and where its output goes."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path


@dataclass
class LocalCluster:
    """synergyd plus `len(slices)` agents, one slice of this machine's cores and fake GPUs each."""

    slices: list[list[int]]
    mem_gb_per_agent: float
    gpus_per_agent: int
    round_s: float
    #: synergyd's allocation mechanism (`--mechanism`): "tune", "proportional", ...
    mechanism: str = "tune"
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="synergy-demo-")))
    children: list[Child] = field(default_factory=list)

    @property
    def state_dir(self) -> Path:
        return self.root / "state"

    @property
    def cgroup_prefix(self) -> str:
        """Every cgroup of this run starts with it: one parent per agent, `PREFIX-NODE_ID`.

        A parent of its own per agent, because an agent removes its parent at exit only
        when it is empty: with one shared parent, two agents stopping at once each find
        the other's group still there and both leave the parent behind."""
        return self.root.name

    def node_ids(self) -> list[str]:
        return [f"a{i}" for i in range(len(self.slices))]

    # -- starting ---------------------------------------------------------------------------------
    def start_daemon(self) -> Child:
        argv = [sys.executable, "-m", "synergy.scheduler.daemon.main", "--state-dir", str(self.state_dir),
                "--port", "0", "--round-s", f"{self.round_s:g}", "--mechanism", self.mechanism, "--log-format", "text", "--dashboard-port", "0"]
        return self._spawn("synergyd", argv)

    def start_agents(self) -> list[Child]:
        started = []
        for node_id, cores in zip(self.node_ids(), self.slices):
            argv = [sys.executable, "-m", "synergy.agent.main", "--state-dir", str(self.state_dir),
                    "--node-id", node_id, "--cpus", ",".join(map(str, cores)),
                    "--memory", f"{self.mem_gb_per_agent:g}G", "--fake-gpus", str(self.gpus_per_agent),
                    "--work-dir", str(self.root / node_id), "--cgroup-parent", f"{self.cgroup_prefix}-{node_id}",
                    "--stop-tasks-on-exit", "--stop-grace-s", str(TASK_STOP_GRACE_S),
                    "--bandwidth-calibration-s", "0.1", "--metrics-port", "-1", "--log-format", "text",
                    # one person's demo on one machine: its jobs run as whoever started it
                    "--ignore-job-users", "--allow-root-jobs"]
            started.append(self._spawn(f"agent {node_id}", argv))
        return started

    def _spawn(self, name: str, argv: list[str]) -> Child:
        log = self.root / f"{name.replace(' ', '-')}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True)
        child = Child(name, proc, log)
        self.children.append(child)
        return child

    def wait_for_address(self, timeout_s: float) -> None:
        """synergyd writes its address file once it listens (the CLI client reads it there)."""
        daemon = self.children[0]
        deadline = time.monotonic() + timeout_s
        while not all((self.state_dir / f).exists() for f in (ADDRESS_FILE, DASHBOARD_ADDRESS_FILE)):
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"synergyd did not listen within {timeout_s:g} s; see {daemon.log}")
            time.sleep(0.1)

    def dashboard_url(self) -> str:
        """The web dashboard's sign-in URL (it carries the admin token; docs/dashboard.md)."""
        address = (self.state_dir / DASHBOARD_ADDRESS_FILE).read_text().strip()
        return f"http://{address}/?token={(self.state_dir / ADMIN_TOKEN_FILE).read_text().strip()}"

    def check_alive(self) -> None:
        for child in self.children:
            code = child.proc.poll()
            if code is not None:
                tail = child.log.read_text(errors="replace").strip().splitlines()[-5:]
                raise RuntimeError(f"{child.name} exited with code {code}:\n  " + "\n  ".join(tail))

    def dedicate_cores(self, timeout_s: float = 10.0) -> str:
        """Give each agent's cgroup parent the largest CPU weight, once the agents made them.

        On a cluster a node's cores are its jobs'; here they are shared with whatever else
        runs on this machine, and a CFS quota only caps a job, it does not guarantee it the
        CPU: under other load a job given one core gets what the neighbours leave, and the
        demo would measure the neighbours rather than the allocation. With the weight the
        demo's jobs get the CPU their allocations say first (other processes still run on
        what the jobs leave). An agent makes its groups just after it registers, so this
        waits up to `timeout_s` for them. Returns what it did, for the demo to print."""
        if os.geteuid() != 0 or not CGROUP_ROOT.is_dir():
            return ("CPU weight not set (no cgroups to write as this user): other load on this machine takes "
                    "CPU from the jobs, and the measured figures show it")
        done, missing = [], []
        for node_id in self.node_ids():
            group = f"{self.cgroup_prefix}-{node_id}"
            candidates = ((CGROUP_ROOT / "cpu" / group / "cpu.shares", CPU_SHARES_V1),
                          (CGROUP_ROOT / group / "cpu.weight", CPU_WEIGHT_V2))
            deadline = time.monotonic() + timeout_s
            while not any(path.exists() for path, _ in candidates) and time.monotonic() < deadline:
                self.check_alive()
                time.sleep(0.1)
            found = next(((path, value) for path, value in candidates if path.exists()), None)
            if found is None:
                missing.append(f"{node_id} (no cpu cgroup)")
                continue
            try:
                found[0].write_text(str(found[1]))
            except OSError as exc:
                missing.append(f"{node_id} ({exc.strerror})")
            else:
                done.append(f"{node_id} {found[0].name}={found[1]}")
        if missing:
            return (f"CPU weight not set for {', '.join(missing)}: other load on this machine takes CPU "
                    "from the jobs, and the measured figures show it")
        return f"the agents' cores go to the demo's jobs first ({', '.join(done)}){self._weigh_control()}"

    def _control_group(self) -> Path:
        """The cgroup v1 `cpu` group synergyd and the agents run in (`_weigh_control`)."""
        return CGROUP_ROOT / "cpu" / f"{self.cgroup_prefix}-control"

    def _weigh_control(self) -> str:
        """Give synergyd and the agents the jobs' weight too, so the jobs cannot starve them.

        A task runs without a CFS quota until its job reaches its training loop (the agent's
        start-up phase, docs/agent.md): under a parent weighted 256 times a process, the
        starting jobs took the agents' cores from the agents themselves, whose heartbeats
        then came 4-6 s late and whose nodes were declared lost. cgroup v1 only (this
        machine's v2 tree has no cpu controller); elsewhere nothing is moved."""
        group = self._control_group()
        if not group.parent.is_dir():
            return ""
        try:
            group.mkdir(exist_ok=True)
            (group / "cpu.shares").write_text(str(CPU_SHARES_V1))
            for child in self.children:
                (group / "cgroup.procs").write_text(str(child.proc.pid))
        except OSError as exc:
            return f"; synergyd and the agents not weighted alike ({exc.strerror}): the jobs' start-up may slow them"
        return "; synergyd and the agents weighted alike"

    def _release_control(self) -> None:
        """Remove the control group once its processes have exited (before `sweep` looks)."""
        _remove_cgroup(self._control_group())

    # -- stopping ---------------------------------------------------------------------------------
    def stop(self) -> list[str]:
        """Stop everything, agents first; returns what had to be forced (empty: a clean stop)."""
        forced: list[str] = []
        agents = [c for c in self.children if c.name.startswith("agent")]
        daemons = [c for c in self.children if not c.name.startswith("agent")]
        for group, grace in ((agents, AGENT_STOP_S), (daemons, DAEMON_STOP_S)):
            for child in group:
                _signal(child.proc, signal.SIGTERM)
            deadline = time.monotonic() + grace
            for child in group:
                try:
                    child.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    forced.append(f"{child.name} (pid {child.proc.pid}) did not stop within {grace:g} s: killed")
                    _signal(child.proc, signal.SIGKILL)
                    child.proc.wait()
        self._release_control()
        forced += self.sweep()
        return forced

    def sweep(self) -> list[str]:
        """Kill any process still tied to the root or in our cgroups, then remove those cgroups."""
        forced = []
        for pid in sorted(set(self.stray_pids()) - {os.getpid()}):
            forced.append(f"left-over process {pid} killed")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for group in self.cgroup_dirs():
            forced.append(f"left-over cgroup {group} removed")
            for d in sorted((p for p in group.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [group]:
                _remove_cgroup(d)
        return forced

    def stray_pids(self) -> list[int]:
        """Processes whose argv names the root, whose stdout goes under it, or in our cgroups."""
        root = str(self.root)
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().decode(errors="replace")
                out = os.readlink(entry / "fd" / "1") if (entry / "fd").exists() else ""
            except OSError:
                continue
            if root in argv or out.startswith(root + "/"):
                found.add(int(entry.name))
        for group in self.cgroup_dirs():
            for procs in group.rglob("cgroup.procs"):
                try:
                    found.update(int(p) for p in procs.read_text().split())
                except (OSError, ValueError):
                    continue
        return sorted(found)

    def cgroup_dirs(self) -> list[Path]:
        """The demo's cgroup parents under each controller (v1) or the v2 root, where they exist."""
        return cgroup_dirs(self.cgroup_prefix)

    def remove_root(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _remove_cgroup(d: Path) -> None:
    """rmdir a cgroup (gone already is fine), retrying for 5 s: a process that exited or was
    killed leaves its group a moment later."""
    for _ in range(50):
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)


def cgroup_dirs(prefix: str) -> list[Path]:
    """Cgroups named `prefix...` at the top of the v2 tree or of any v1 controller."""
    if not CGROUP_ROOT.is_dir():
        return []
    tops = [CGROUP_ROOT] + [c for c in CGROUP_ROOT.iterdir() if c.is_dir() and not c.name.startswith(prefix)]
    found = []
    for top in tops:
        try:
            found += [d for d in top.iterdir() if d.is_dir() and d.name.startswith(prefix)]
        except OSError:
            continue
    return sorted(set(found))


def _signal(proc: subprocess.Popen[bytes], sig: int) -> None:
    if proc.poll() is None:
        try:
            proc.send_signal(sig)
        except ProcessLookupError:
            pass


def core_slices(cores: list[int], agents: int) -> list[list[int]]:
    """Disjoint, contiguous slices of `cores`, as even as possible (2 cores, 2 agents: one each)."""
    if len(cores) < agents:
        raise ValueError(f"the demo needs {agents} cores for {agents} agents with disjoint slices; "
                         f"this process may use {len(cores)} ({cores})")
    size, extra = divmod(len(cores), agents)
    out, at = [], 0
    for i in range(agents):
        n = size + (1 if i < extra else 0)
        out.append(cores[at:at + n])
        at += n
    return out
