"""Task supervision: launch, resize, stop and reap the processes of the tasks on this node.

One task = one attempt of one job on this node (its node rank). Each runs in its own
session / process group (no shell), inside its own cgroup with exclusive cores, a memory
limit and a CPU quota, with `CUDA_VISIBLE_DEVICES` naming the GPUs the agent picked, its
output in `<work-dir>/logs/<job>-<attempt>-<rank>.log` and the environment contract of
`synergy.agent.contract`. Nothing here blocks: a stop sends SIGTERM and records when to
send SIGKILL; `poll()` (called whenever the agent wakes, e.g. on SIGCHLD) reaps exits and
enforces those deadlines.

Bad input never raises out of `launch`: an impossible placement, a missing command or a
working directory that does not exist becomes an exited task with a clear message
(exit code `LAUNCH_FAILED`), and the agent keeps serving its other tasks.
"""

from __future__ import annotations

import enum
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from synergy.agent import contract
from synergy.agent.cgroups import Cgroups, CgroupError, Limits
from synergy.agent.cores import CoreError, choose_cores, format_cpu_list
from synergy.scheduler.daemon.logs import event
from synergy.v1 import node_pb2

GIB = 1024**3
#: Exit code reported for a task that could not be started (like a shell's "command not found").
LAUNCH_FAILED = 127
#: The exit code that means "checkpointed, restart me" (docs/daemon.md).
EXIT_RESTART = 75
#: Lines of a failed task's log quoted in its exit message (the daemon keeps 1024 characters).
TAIL_LINES = 10
TAIL_CHARS = 700


class Phase(str, enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    EXITED = "exited"


@dataclass(frozen=True, order=True)
class TaskKey:
    job_id: int
    attempt: int
    rank: int

    def __str__(self) -> str:
        return f"{self.job_id}-{self.attempt}-{self.rank}"

    @classmethod
    def of(cls, ref: node_pb2.TaskRef) -> TaskKey:
        return cls(ref.job_id, ref.attempt, ref.rank)


@dataclass(frozen=True)
class Share:
    """A task's resources on this node (the wire's Placement)."""

    gpus: int
    cpus: float
    mem_gb: float


@dataclass
class Task:
    key: TaskKey
    name: str
    share: Share
    log_path: Path
    phase: Phase = Phase.STARTING
    cores: tuple[int, ...] = ()
    gpu_indices: tuple[int, ...] = ()
    proc: subprocess.Popen[bytes] | None = None
    exit_code: int = 0
    message: str = ""
    #: monotonic time at which a stopping task gets SIGKILL.
    kill_at: float | None = None
    stop_reason: str = ""
    #: exited because the kernel killed it at its memory limit (TaskStatus.oom_killed).
    oom_killed: bool = False
    #: the cgroup still has to be removed (it was busy when the task exited).
    cgroup_pending: bool = False
    started_at: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    @property
    def cgroup(self) -> str:
        return f"job{self.key.job_id}-a{self.key.attempt}-r{self.key.rank}"

    @property
    def alive(self) -> bool:
        return self.phase in (Phase.STARTING, Phase.RUNNING, Phase.STOPPING)


def log_tail(path: Path, lines: int = TAIL_LINES, chars: int = TAIL_CHARS) -> str:
    """The last lines of a task's log, bounded (for exit messages)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 8192))
            data = f.read().decode("utf-8", "replace")
    except OSError:
        return ""
    text = "\n".join(data.rstrip("\n").splitlines()[-lines:])
    return text[-chars:]


def _enter(join_files: list[str], cores: tuple[int, ...]) -> Callable[[], None]:
    """Runs in the child between fork and exec: join the task's cgroups, pin its cores.

    Only system calls on precomputed values (no imports, no logging), so it is safe in the
    forked child of a threaded agent. Joining before exec means no instant of the job runs
    outside its limits.
    """
    paths = [f.encode() for f in join_files]
    cpu_set = set(cores)

    def enter() -> None:
        pid = str(os.getpid()).encode()
        for p in paths:
            fd = os.open(p, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        os.sched_setaffinity(0, cpu_set)

    return enter


class Supervisor:
    def __init__(
        self,
        *,
        node_id: str,
        cores: Iterable[int],
        gpus: int,
        mem_gb: float,
        work_dir: Path,
        cgroups: Cgroups,
        log: logging.Logger,
        daemon_address: str,
        tls_ca: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.node_id = node_id
        self.cores = tuple(cores)
        self.gpu_count = gpus
        self.mem_gb = mem_gb
        self.work_dir = Path(work_dir)
        self.logs_dir = self.work_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.cgroups = cgroups
        self.log = log
        self.daemon_address = daemon_address
        self.tls_ca = tls_ca
        self.clock = clock
        self.tasks: dict[TaskKey, Task] = {}

    # -- what is taken --------------------------------------------------------------------------
    def _held(self, exclude: TaskKey | None = None) -> tuple[set[int], set[int], float]:
        cores: set[int] = set()
        gpus: set[int] = set()
        mem = 0.0
        for t in self.tasks.values():
            if t.alive and t.key != exclude:
                cores.update(t.cores)
                gpus.update(t.gpu_indices)
                mem += t.share.mem_gb
        return cores, gpus, mem

    def _limits(self, share: Share, cores: tuple[int, ...]) -> Limits:
        return Limits(cores=cores, mem_bytes=int(share.mem_gb * GIB), cpu_quota=share.cpus)

    # -- LAUNCH ---------------------------------------------------------------------------------
    def launch(self, spec: node_pb2.TaskSpec) -> Task:
        key = TaskKey.of(spec.ref)
        if key in self.tasks:  # instructions repeat until the report shows them done
            return self.tasks[key]
        p = spec.placement
        task = Task(key, spec.job_name, Share(int(p.gpus), p.cpus, p.mem_gb), self.logs_dir / f"{key}.log")
        self.tasks[key] = task
        try:
            self._start(task, spec)
        except LaunchError as exc:
            self._fail(task, str(exc))
        return task

    def _start(self, task: Task, spec: node_pb2.TaskSpec) -> None:
        share = task.share
        if not spec.command:
            raise LaunchError("task.command: empty (nothing to run)")
        workdir = Path(spec.working_dir) if spec.working_dir else self.work_dir
        if not workdir.is_dir():
            raise LaunchError(f"task.working_dir: {workdir} does not exist or is not a directory")
        taken_cores, taken_gpus, mem_used = self._held(task.key)
        try:
            task.cores = choose_cores(share.cpus, self.cores, taken_cores)
        except CoreError as exc:
            raise LaunchError(f"impossible placement: {exc}") from None
        free_gpus = [i for i in range(self.gpu_count) if i not in taken_gpus]
        if share.gpus > len(free_gpus):
            raise LaunchError(
                f"impossible placement: needs {share.gpus} GPUs, {len(free_gpus)} of {self.gpu_count} are free"
            )
        if share.mem_gb < 0 or mem_used + share.mem_gb > self.mem_gb + 1e-6:
            raise LaunchError(
                f"impossible placement: needs {share.mem_gb:g} GB of memory, "
                f"{max(0.0, self.mem_gb - mem_used):g} of {self.mem_gb:g} GB are free"
            )
        task.gpu_indices = tuple(free_gpus[: share.gpus])
        try:
            self.cgroups.create(task.cgroup, self._limits(share, task.cores))
        except CgroupError as exc:
            self._remove_cgroup(task)
            raise LaunchError(f"cgroup: {exc}") from None
        env = self._environment(task, spec)
        try:
            out = open(task.log_path, "ab")
        except OSError as exc:
            self._remove_cgroup(task)
            raise LaunchError(f"cannot open the log {task.log_path}: {exc.strerror}") from None
        try:
            task.proc = subprocess.Popen(
                list(spec.command),
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_enter(self.cgroups.join_files(task.cgroup), task.cores),  # noqa: PLW1509
            )
        except FileNotFoundError:
            self._remove_cgroup(task)
            raise LaunchError(f"task.command: {spec.command[0]!r} not found (working dir {workdir})") from None
        except PermissionError:
            self._remove_cgroup(task)
            raise LaunchError(f"task.command: {spec.command[0]!r} is not executable") from None
        except (OSError, subprocess.SubprocessError) as exc:
            self._remove_cgroup(task)
            raise LaunchError(f"could not start the process: {exc}") from None
        finally:
            out.close()
        task.phase = Phase.RUNNING
        event(
            self.log,
            "task.launched",
            task=str(task.key),
            job=task.name,
            pid=task.pid,
            cores=format_cpu_list(task.cores),
            cpus=share.cpus,
            mem_gb=share.mem_gb,
            gpus=list(task.gpu_indices),
            cgroup=self.cgroups.kind,
            log=str(task.log_path),
        )

    def _environment(self, task: Task, spec: node_pb2.TaskSpec) -> dict[str, str]:
        """The agent's environment minus SYNERGY_*, then the job's env, then the contract."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNERGY_")}
        env.update(spec.env)
        master = spec.master_hostname or (os.uname().nodename if spec.master_node_id == self.node_id else "")
        env.update(
            contract.JobEnv(
                job_id=task.key.job_id,
                attempt=task.key.attempt,
                rank=task.key.rank,
                world_size=spec.world_size or 1,
                daemon_address=self.daemon_address,
                job_token=spec.job_token,
                job_name=spec.job_name,
                master_addr=master,
                master_port=contract.master_port(task.key.job_id, task.key.attempt),
                tls_ca=self.tls_ca,
                node_id=self.node_id,
                alloc_cpus=task.share.cpus,
                alloc_cores=format_cpu_list(task.cores),
                alloc_mem_gb=task.share.mem_gb,
                alloc_gpus=task.share.gpus,
                checkpoint_dir=spec.checkpoint_dir,
                resume_checkpoint=spec.resume_checkpoint_path,
                resume_step=spec.resume_step,
            ).to_env()
        )
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in task.gpu_indices)
        return env

    def _fail(self, task: Task, message: str) -> None:
        task.phase, task.exit_code, task.message = Phase.EXITED, LAUNCH_FAILED, f"launch failed: {message}"
        task.cores, task.gpu_indices = (), ()
        event(self.log, "task.launch_failed", level=logging.WARNING, task=str(task.key), job=task.name, reason=message)

    # -- RESIZE ---------------------------------------------------------------------------------
    def resize(self, key: TaskKey, gpus: int, cpus: float, mem_gb: float) -> bool:
        task = self.tasks.get(key)
        if task is None or task.phase != Phase.RUNNING:
            return False
        new = Share(gpus, cpus, mem_gb)
        if new == task.share:
            return True
        taken_cores, _, mem_used = self._held(key)
        why = ""
        if gpus != task.share.gpus:
            why = f"a resize keeps the GPUs ({task.share.gpus}), got {gpus}"
        elif mem_used + mem_gb > self.mem_gb + 1e-6:
            why = f"needs {mem_gb:g} GB, {self.mem_gb - mem_used:g} GB are free"
        cores = task.cores
        if not why:
            try:
                cores = choose_cores(cpus, self.cores, taken_cores, keep=task.cores)
                self.cgroups.apply(task.cgroup, self._limits(new, cores))
                if self.cgroups.kind == "none":
                    _pin_tree(task.pid, cores)
            except (CoreError, CgroupError) as exc:
                why = str(exc)
        if why:
            event(self.log, "task.resize_failed", level=logging.WARNING, task=str(key), reason=why)
            return False
        old = task.share
        task.share, task.cores = new, cores
        event(
            self.log,
            "task.resized",
            task=str(key),
            cpus=f"{old.cpus:g}->{cpus:g}",
            mem_gb=f"{old.mem_gb:g}->{mem_gb:g}",
            cores=format_cpu_list(cores),
        )
        return True

    # -- STOP -----------------------------------------------------------------------------------
    def stop(self, key: TaskKey, grace_s: float, reason: str) -> None:
        task = self.tasks.get(key)
        if task is None or task.phase not in (Phase.STARTING, Phase.RUNNING):
            return
        task.phase, task.stop_reason = Phase.STOPPING, reason or "stopped"
        task.kill_at = self.clock() + max(0.0, grace_s)
        self._signal(task, signal.SIGTERM)
        event(self.log, "task.stopping", task=str(key), pid=task.pid, grace_s=grace_s, reason=task.stop_reason)

    def _signal(self, task: Task, sig: int) -> None:
        if task.proc is None:
            return
        try:
            os.killpg(task.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    # -- reaping --------------------------------------------------------------------------------
    def poll(self) -> None:
        """Reap exited tasks, SIGKILL stopping tasks past their grace, retry busy cgroups."""
        now = self.clock()
        for task in list(self.tasks.values()):
            if task.proc is not None and task.alive:
                code = task.proc.poll()
                if code is not None:
                    self._exited(task, code)
                elif task.kill_at is not None and now >= task.kill_at:
                    event(self.log, "task.killed", level=logging.WARNING, task=str(task.key), pid=task.pid,
                          reason="grace period over")
                    self._signal(task, signal.SIGKILL)
                    task.kill_at = None
            if task.cgroup_pending:
                self._remove_cgroup(task)

    def next_deadline(self) -> float | None:
        """The earliest pending SIGKILL (monotonic), so the agent wakes for it."""
        deadlines = [t.kill_at for t in self.tasks.values() if t.kill_at is not None and t.alive]
        return min(deadlines, default=None)

    def _exited(self, task: Task, code: int) -> None:
        self._signal(task, signal.SIGKILL)  # what is left of its process group goes with it
        oom = self.cgroups.oom_kills(task.cgroup)
        task.phase, task.exit_code, task.kill_at = Phase.EXITED, code, None
        task.oom_killed = bool(oom)
        if oom:
            task.message = (
                f"OOM: killed by its memory limit of {task.share.mem_gb:g} GB ({oom} process(es) killed); "
                f"last lines of {task.log_path}:\n{log_tail(task.log_path)}"
            )
        elif task.stop_reason:
            task.message = f"stopped by the agent ({task.stop_reason}); exit code {code}"
        elif code not in (0, EXIT_RESTART):
            task.message = f"exit code {code}; last lines of {task.log_path}:\n{log_tail(task.log_path)}"
        self._remove_cgroup(task)
        event(
            self.log,
            "task.oom_killed" if oom else "task.exited",
            level=logging.WARNING if oom or code not in (0, EXIT_RESTART) else logging.INFO,
            task=str(task.key),
            pid=task.pid,
            exit_code=code,
            oom_kills=oom,
            runtime_s=round(time.time() - task.started_at, 3),
        )

    def _remove_cgroup(self, task: Task) -> None:
        try:
            task.cgroup_pending = not self.cgroups.remove(task.cgroup)
        except CgroupError as exc:
            task.cgroup_pending = False
            event(self.log, "cgroup.remove_failed", level=logging.WARNING, task=str(task.key), reason=str(exc))

    # -- bookkeeping ----------------------------------------------------------------------------
    def forget(self, key: TaskKey) -> None:
        task = self.tasks.get(key)
        if task is not None and task.phase == Phase.EXITED and not task.cgroup_pending:
            del self.tasks[key]

    def shutdown(self, grace_s: float) -> None:
        """Stop every task (SIGTERM, grace, SIGKILL) and remove their groups; blocks up to grace."""
        for task in self.tasks.values():
            self.stop(task.key, grace_s, "the agent is shutting down")
        deadline = self.clock() + grace_s + 5.0
        while any(t.alive for t in self.tasks.values()) and self.clock() < deadline:
            self.poll()
            time.sleep(0.05)
        self.poll()


class LaunchError(RuntimeError):
    """Why a LAUNCH could not be carried out (becomes the task's exit message)."""


def _pin_tree(pid: int, cores: tuple[int, ...]) -> None:
    """Affinity of every thread of a process tree (the fallback when no cpuset enforces it)."""
    if not pid:
        return
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        try:
            for t in p.threads():
                os.sched_setaffinity(t.id, set(cores))
        except (psutil.Error, OSError):
            continue
