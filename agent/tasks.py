"""Task supervision: launch, resize, stop and reap the processes of the tasks on this node.

One task = one attempt of one job on this node (its node rank). Each runs in its own
session / process group (no shell), inside its own cgroup with exclusive cores, a memory
limit and a CPU quota, with `CUDA_VISIBLE_DEVICES` naming the GPUs the agent picked, its
output in `<work-dir>/logs/<job>-<attempt>-<rank>.log` and the environment contract of
`synergy.common.contract`. Nothing here blocks: a stop sends SIGTERM and records when to
send SIGKILL; `poll()` (called whenever the agent wakes, e.g. on SIGCHLD) reaps exits and
enforces those deadlines.

Packing (Tesserae, issue 10): a LAUNCH whose `packed_with_job_id` names a job with a
running task on this node gets that task's GPU indices (the same `CUDA_VISIBLE_DEVICES`),
with cores and a memory limit of its own; no GPU index ever carries more than two tasks.
The daemon sends the host's LAUNCH before its partner's, in the same heartbeat reply or an
earlier one, so the agent does not wait for a host: a packed launch whose host is not
running here fails at once with a message naming the field (the daemon launches the job
again on its next attempt). Unpacked launches only take GPUs no live task holds, so the
GPUs of a pair stay taken while either of its tasks runs.

Bad input never raises out of `launch`: an impossible placement, a missing command or a
working directory that does not exist becomes an exited task with a clear message
(exit code `LAUNCH_FAILED`), and the agent keeps serving its other tasks.

Users (issue 16): a root agent runs each task as the Unix user its `run_as_user` names
(agent/users.py decides whom; the shim's child drops to that user before the exec); the log
file is created owned by that user, and a job that names no working dir starts in its
user's home. An unknown user, or root without --allow-root-jobs, fails the launch.

Layout: the task records and their small rules are in task.py, the OS side of starting a
process (executable lookup, the shim's pid report, affinity) in launch.py, whom a task runs
as in users.py, the shim itself in shim.py; this module holds the `Supervisor`, which
decides and keeps the books.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import BinaryIO, Callable, Iterable

from synergy.agent import state
from synergy.agent.cgroups import Cgroups, CgroupError, Limits
from synergy.agent.cores import CoreError, CoreGrant, choose_cores, format_cpu_list, pool_of
from synergy.agent.launch import SHIM, SHIM_START_TIMEOUT_S, LaunchError, pin_tree, read_pid, resolve
from synergy.agent.startup import STARTUP_CAP_S, WIND_DOWN_CAP_S, Startup
from synergy.agent.task import (  # noqa: F401 - the task records, re-exported for the supervisor's users
    EXIT_LOST, EXIT_RESTART, GIB, LAUNCH_FAILED, MAX_JOBS_PER_GPU, Phase, Share, Task, TaskCounts,
    TaskKey, key_of_cgroup, log_tail)
from synergy.agent.users import JobUsers, RunAs
from synergy.common import contract, startup
from synergy.common.logs import event
from synergy.common.tasks import IMPOSSIBLE_PLACEMENT
from synergy.v1 import node_pb2


class Supervisor:
    """The node's tasks: launch (with launch.py), resize, stop, reap, persist and re-adopt them."""

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
        pids_max: int = 0,
        log_max_bytes: int = 0,
        log_keep: int = 1,
        users: JobUsers = JobUsers(),
        startup_cap_s: float = STARTUP_CAP_S,
        wind_down_cap_s: float = WIND_DOWN_CAP_S,
    ) -> None:
        self.node_id = node_id
        self.cores = tuple(cores)
        self.gpu_count = gpus
        self.mem_gb = mem_gb
        self.work_dir = Path(work_dir)
        self.logs_dir = self.work_dir / "logs"
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.exits_dir = self.work_dir / state.EXITS_DIR
        self.exits_dir.mkdir(parents=True, exist_ok=True)
        self.state_path = self.work_dir / state.STATE_FILE
        self.cgroups = cgroups
        self.log = log
        self.daemon_address = daemon_address
        self.tls_ca = tls_ca
        self.clock = clock
        #: each task's `pids.max` (0: no limit)
        self.pids_max = pids_max
        #: each task's log cap (0: none) and how many rotated files it keeps (the shim rotates)
        self.log_max_bytes, self.log_keep = log_max_bytes, log_keep
        #: whom tasks run as (the default: the agent itself)
        self.users = users
        #: the longest start-up phase (agent/startup.py; 0: none, the quota from the start)
        self.startup_cap_s = startup_cap_s
        #: the longest wind-down (agent/startup.py: no CPU quota while an exiting process tears down)
        self.wind_down_cap_s = wind_down_cap_s
        self.tasks: dict[TaskKey, Task] = {}
        self.counts = TaskCounts()
        #: the state file was read into `tasks` (load); re-adoption checks them (readopt)
        self._loaded = False
        self._kill_at_unix: dict[TaskKey, float] = {}

    # -- what is taken --------------------------------------------------------------------------
    def _held(self, exclude: TaskKey | None = None) -> tuple[list[CoreGrant], set[int], float]:
        grants: list[CoreGrant] = []
        gpus: set[int] = set()
        mem = 0.0
        for t in self.tasks.values():
            if t.alive and t.key != exclude:
                grants.append(t.grant)
                gpus.update(t.gpu_indices)
                mem += t.share.mem_gb
        return grants, gpus, mem

    def _limits(self, task: Task, share: Share | None = None, cores: tuple[int, ...] | None = None,
                throttle_level: int | None = None, via: str | None = None) -> Limits:
        """The task's cgroup limits, as it is or with a new share / cores / throttle (not yet taken).

        The CPU quota is its share; a throttle (quota actuator) takes a fraction of it, and wins
        over the start-up phase, which has none (a contender the eliminator holds is held, starting
        or not). The CFS weight is always the share: the one rule that keeps every contending task
        at its allocation while a starting one runs without a quota (agent/startup.py).
        """
        share = task.share if share is None else share
        cores = task.cores if cores is None else cores
        level = task.throttle_level if throttle_level is None else throttle_level
        via = task.throttle_via if via is None else via
        quota = share.cpus
        if level > 0 and via == "quota":  # a throttled task keeps its cores, with a fraction of their time
            quota = (share.cpus or len(cores)) / 2**level
        elif task.startup is not None or task.wind_down_until is not None:
            quota = 0.0  # none
        return Limits(cores=cores, mem_bytes=int(share.mem_gb * GIB), cpu_quota=quota, pids_max=self.pids_max,
                      cpu_weight=share.cpus)

    def _repool(self) -> None:
        """Move every fractional task onto the shared pool as it is now.

        Whole cores taken from the pool shrink it, whole cores given back (an exit, a smaller
        resize) widen it; the fractions on it never exceed it while the placements fit the node
        (cores.py), so each task keeps its quota's worth of CPU time wherever the pool is.
        """
        alive = [t for t in self.tasks.values() if t.alive]
        pool = pool_of(self.cores, [t.grant for t in alive])
        for t in alive:
            if not t.grant.shared or t.grant.shared == pool or not pool:
                continue
            grant = replace(t.grant, shared=pool)
            try:
                self.cgroups.apply(t.cgroup, self._limits(t, cores=grant.cores))
                if self.cgroups.kind == "none" and t.pid:
                    pin_tree(t.pid, grant.cores)
            except CgroupError as exc:
                event(self.log, "task.move_failed", level=logging.WARNING, task=str(t.key), reason=str(exc))
                continue
            t.grant = grant

    def set_throttle(self, key: TaskKey, level: int, via: str = "quota") -> bool:
        """Record the contention eliminator's throttle level; with `via="quota"` apply it to the CPU quota.

        (`via="mba"`: the caller set the resctrl MBA cap; the quota stays the task's own.)
        """
        task = self.tasks.get(key)
        if task is None or task.phase != Phase.RUNNING or (via == "quota" and self.cgroups.kind == "none"):
            return False
        try:
            self.cgroups.apply(task.cgroup, self._limits(task, throttle_level=level, via=via))
        except CgroupError as exc:
            event(self.log, "contention.apply_failed", level=logging.WARNING, task=str(key), reason=str(exc))
            return False
        task.throttle_level, task.throttle_via = level, via
        self.save()
        return True

    # -- LAUNCH ---------------------------------------------------------------------------------
    def launch(self, spec: node_pb2.TaskSpec) -> Task:
        key = TaskKey.of(spec.ref)
        if key in self.tasks:  # instructions repeat until the report shows them done
            return self.tasks[key]
        p = spec.placement
        task = Task(key, spec.job_name, Share(int(p.gpus), p.cpus, p.mem_gb), self.logs_dir / f"{key}.log",
                    packed_with=int(spec.packed_with_job_id))
        self.tasks[key] = task
        try:
            self._start(task, spec)
        except LaunchError as exc:
            self._fail(task, str(exc))
        self._repool()
        self.save()
        return task

    def _start(self, task: Task, spec: node_pb2.TaskSpec) -> None:
        share = task.share
        if not spec.command:
            raise LaunchError("task.command: empty (nothing to run)")
        run_as = self.users.run_as(spec.run_as_user)
        if spec.working_dir:
            workdir = Path(spec.working_dir)
        else:  # the agent's work dir is root's alone: a job of another user starts in its home
            workdir = Path(run_as.default_working_dir()) if run_as else self.work_dir
        if not workdir.is_dir():
            raise LaunchError(f"task.working_dir: {workdir} does not exist or is not a directory")
        held, taken_gpus, mem_used = self._held(task.key)
        try:
            task.grant = choose_cores(share.cpus, self.cores, held)
        except CoreError as exc:
            raise LaunchError(f"{IMPOSSIBLE_PLACEMENT}: {exc}") from None
        if task.packed_with:
            gpu_indices = self._packed_gpus(task)
        else:
            free_gpus = [i for i in range(self.gpu_count) if i not in taken_gpus]
            if share.gpus > len(free_gpus):
                raise LaunchError(
                    f"{IMPOSSIBLE_PLACEMENT}: needs {share.gpus} GPUs, {len(free_gpus)} of {self.gpu_count} are free"
                )
            gpu_indices = tuple(free_gpus[: share.gpus])
        if share.mem_gb < 0 or mem_used + share.mem_gb > self.mem_gb + 1e-6:
            raise LaunchError(
                f"{IMPOSSIBLE_PLACEMENT}: needs {share.mem_gb:g} GB of memory, "
                f"{max(0.0, self.mem_gb - mem_used):g} of {self.mem_gb:g} GB are free"
            )
        task.gpu_indices = gpu_indices
        job_end = -1  # the job's end of its start-up socket (agent/startup.py); none without cgroups
        if self.cgroups.kind != "none" and self.startup_cap_s > 0:
            task.startup, job_end = Startup.open(self.clock(), self.startup_cap_s)
        try:
            self._spawn(task, spec, run_as, workdir, job_end)
        finally:
            if job_end >= 0:
                os.close(job_end)  # the job has its copy now (or never will)

    def _spawn(self, task: Task, spec: node_pb2.TaskSpec, run_as: RunAs | None, workdir: Path, job_end: int) -> None:
        """The task's cgroup, then its shim and job (`job_end` >= 0: passed on as the job's start-up socket)."""
        share = task.share
        try:
            self.cgroups.create(task.cgroup, self._limits(task))
        except CgroupError as exc:
            self._remove_cgroup(task)
            raise LaunchError(f"cgroup: {exc}") from None
        env = self._environment(task, spec, run_as)
        if job_end >= 0:
            env[contract.STARTUP_FD] = startup.env_value(job_end)
        try:
            exe = resolve(spec.command[0], workdir, env.get("PATH", os.defpath))
        except LaunchError:
            self._remove_cgroup(task)
            raise
        exit_path = self._exit_path(task)
        exit_path.unlink(missing_ok=True)
        try:
            out = self._open_log(task, run_as)
        except OSError as exc:
            self._remove_cgroup(task)
            raise LaunchError(f"cannot open the log {task.log_path}: {exc.strerror}") from None
        r, w = os.pipe()
        try:
            task.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", SHIM, str(exit_path), str(w), ",".join(map(str, task.cores)),
                 ",".join(self.cgroups.join_files(task.cgroup)), str(task.log_path), str(self.log_max_bytes),
                 str(self.log_keep), run_as.shim_arg() if run_as else "", exe, *spec.command],
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                pass_fds=(w,) if job_end < 0 else (w, job_end),
            )
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(r)
            self._remove_cgroup(task)
            raise LaunchError(f"could not start the process: {exc}") from None
        finally:
            os.close(w)
            out.close()
        task.shim_pid, task.shim_ticks = task.proc.pid, state.start_ticks(task.proc.pid)
        try:
            task.pid = read_pid(r, SHIM_START_TIMEOUT_S)
        except LaunchError:
            task.proc.wait()
            self._remove_cgroup(task)
            raise
        finally:
            os.close(r)
        task.pid_ticks = state.start_ticks(task.pid)
        if not task.pid:
            self._signal_shim(task)
            self._remove_cgroup(task)
            raise LaunchError(f"the task's shim did not start within {SHIM_START_TIMEOUT_S:g} s")
        task.phase = Phase.RUNNING
        self.counts.launched += 1
        event(
            self.log,
            "task.launched",
            task=str(task.key),
            job=task.name,
            pid=task.pid,
            cores=format_cpu_list(task.cores),
            shared=format_cpu_list(task.grant.shared),
            cpus=share.cpus,
            mem_gb=share.mem_gb,
            gpus=list(task.gpu_indices),
            packed_with=task.packed_with,
            cgroup=self.cgroups.kind,
            startup_cap_s=self.startup_cap_s if task.startup is not None else 0,
            log=str(task.log_path),
            user=run_as.name if run_as else "",
            uid=run_as.uid if run_as else os.geteuid(),
        )

    @staticmethod
    def _open_log(task: Task, run_as: RunAs | None) -> BinaryIO:
        """The task's log for the shim's own output: its user's file (0600) when it runs as one."""
        out = open(task.log_path, "ab")
        if run_as is not None:
            try:
                os.fchown(out.fileno(), run_as.uid, run_as.gid)
                os.fchmod(out.fileno(), 0o600)
            except OSError:
                out.close()
                raise
        return out

    def _packed_gpus(self, task: Task) -> tuple[int, ...]:
        """The GPU indices of the running task of the job `task` is packed with (its host)."""
        host_id = task.packed_with
        hosts = [t for t in self.tasks.values() if t.key.job_id == host_id and t.phase == Phase.RUNNING]
        if not hosts:
            raise LaunchError(f"task.packed_with_job_id: job {host_id} has no running task on this node "
                              "to share GPUs with")
        host = max(hosts, key=lambda t: t.key.attempt)
        if host.share.gpus != task.share.gpus or not host.gpu_indices:
            raise LaunchError(f"task.packed_with_job_id: job {host_id} holds {len(host.gpu_indices)} GPUs here, "
                              f"this task asks for {task.share.gpus} (a packed task shares every GPU of its host)")
        for i in host.gpu_indices:
            carried = sum(1 for t in self.tasks.values() if t.alive and t.key != task.key and i in t.gpu_indices)
            if carried >= MAX_JOBS_PER_GPU:
                raise LaunchError(f"task.packed_with_job_id: GPU {i} of job {host_id} already carries "
                                  f"{carried} tasks (at most {MAX_JOBS_PER_GPU} per GPU)")
        return host.gpu_indices

    def _environment(self, task: Task, spec: node_pb2.TaskSpec, run_as: RunAs | None = None) -> dict[str, str]:
        """The agent's environment minus SYNERGY_*, gRPC's fork settings, the job's env, who the
        job is (HOME, USER, LOGNAME of its user), the contract."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SYNERGY_")}
        env.update(contract.GRPC_FORK_ENV)
        env.update(spec.env)
        if run_as is not None:
            env.update(run_as.env())
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
        self._drop_startup(task)
        task.grant, task.gpu_indices = CoreGrant(), ()
        self.counts.exits["launch_failed"] += 1
        event(self.log, "task.launch_failed", level=logging.WARNING, task=str(task.key), job=task.name, reason=message)

    # -- RESIZE ---------------------------------------------------------------------------------
    def resize(self, key: TaskKey, gpus: int, cpus: float, mem_gb: float) -> bool:
        task = self.tasks.get(key)
        if task is None or task.phase != Phase.RUNNING:
            return False
        new = Share(gpus, cpus, mem_gb)
        if new == task.share:
            return True
        held, _, mem_used = self._held(key)
        why = ""
        if gpus != task.share.gpus:
            why = f"a resize keeps the GPUs ({task.share.gpus}), got {gpus}"
        elif mem_used + mem_gb > self.mem_gb + 1e-6:
            why = f"needs {mem_gb:g} GB, {self.mem_gb - mem_used:g} GB are free"
        grant = task.grant
        if not why:
            try:
                grant = choose_cores(cpus, self.cores, held, keep=task.grant)
                self.cgroups.apply(task.cgroup, self._limits(task, new, grant.cores))
                if self.cgroups.kind == "none":
                    pin_tree(task.pid, grant.cores)
            except (CoreError, CgroupError) as exc:
                why = str(exc)
        if why:
            # The daemon repeats the instruction every heartbeat until it holds: say each reason once.
            if why != task.resize_failure:
                event(self.log, "task.resize_failed", level=logging.WARNING, task=str(key), reason=why)
            task.resize_failure = why
            return False
        old = task.share
        task.share, task.grant, task.resize_failure = new, grant, ""
        self._repool()
        event(
            self.log,
            "task.resized",
            task=str(key),
            cpus=f"{old.cpus:g}->{cpus:g}",
            mem_gb=f"{old.mem_gb:g}->{mem_gb:g}",
            cores=format_cpu_list(grant.cores),
            shared=format_cpu_list(grant.shared),
        )
        self.save()
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
        self.save()

    def _signal(self, task: Task, sig: int) -> None:
        """Signal the job's process group (the shim, outside it, lives on to record the exit)."""
        if not task.pid:
            return
        try:
            os.killpg(task.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _signal_shim(self, task: Task) -> None:
        if task.shim_pid and state.same_process(task.shim_pid, task.shim_ticks):
            try:
                os.kill(task.shim_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if task.proc is not None:
            task.proc.poll()

    # -- reaping --------------------------------------------------------------------------------
    def poll(self) -> None:
        """Reap exited tasks, SIGKILL stopping tasks past their grace, retry busy cgroups."""
        now = self.clock()
        changed = False
        for task in list(self.tasks.values()):
            if task.proc is not None and task.proc.returncode is None:
                task.proc.poll()  # reap our shim (also after its task exited)
            if task.alive:
                code = self._exit_status(task)
                if code is not None:
                    self._exited(task, code)
                    changed = True
                elif task.kill_at is not None and now >= task.kill_at:
                    event(self.log, "task.killed", level=logging.WARNING, task=str(task.key), pid=task.pid,
                          reason="grace period over")
                    self._signal(task, signal.SIGKILL)
                    task.kill_at = None
            if task.alive and task.startup is not None:
                why = task.startup.heard()
                if not why and now >= task.startup.deadline:
                    why = f"its cap of {self.startup_cap_s:g} s, without a word from its job"
                if why:
                    self._end_startup(task, why)
            if task.alive and task.line is not None and task.line.winding_down():
                self._wind_down(task, now)
            if task.line is not None and task.line.sock is None:
                task.line = None
            if task.alive and task.wind_down_until is not None and now >= task.wind_down_until:
                self._end_wind_down(task, f"its cap of {self.wind_down_cap_s:g} s")
            if task.cgroup_pending:
                self._remove_cgroup(task)
        if changed:
            self.save()

    def _exit_path(self, task: Task) -> Path:
        return self.exits_dir / f"{task.key}.exit"

    def _exit_status(self, task: Task) -> int | None:
        """The job's exit code once the shim recorded it; EXIT_LOST when the shim died without."""
        if task.proc is not None and task.proc.returncode is None:
            return None  # our shim still runs: it writes the record before it exits (SIGCHLD wakes us)
        code = state.read_exit(self._exit_path(task))
        if code is not None:
            return code
        if task.proc is not None:
            shim_gone = task.proc.returncode is not None
        else:
            shim_gone = not state.same_process(task.shim_pid, task.shim_ticks)
        if not shim_gone:
            return None
        code = state.read_exit(self._exit_path(task))  # it may have written just before exiting
        if code is not None:
            return code
        task.lost = f"its shim (pid {task.shim_pid}) ended without recording the job's exit status"
        return EXIT_LOST

    def next_deadline(self) -> float | None:
        """The earliest pending SIGKILL or start-up cap (monotonic), so the agent wakes for it."""
        deadlines = [t.kill_at for t in self.tasks.values() if t.kill_at is not None and t.alive]
        deadlines += [t.startup.deadline for t in self.tasks.values()
                      if t.startup is not None and t.alive and t.startup.sock is not None]
        deadlines += [t.wind_down_until for t in self.tasks.values() if t.wind_down_until is not None and t.alive]
        return min(deadlines, default=None)

    def wake_fds(self) -> list[int]:
        """The start-up sockets: the agent wakes as soon as a job says it reached its training loop
        (the job waits for the answer)."""
        fds = [fd for t in self.tasks.values() if t.startup is not None and (fd := t.startup.fileno()) is not None]
        return fds + [fd for t in self.tasks.values() if t.line is not None and (fd := t.line.fileno()) is not None]

    # -- the start-up phase (agent/startup.py) --------------------------------------------------
    def _end_startup(self, task: Task, why: str) -> None:
        """Apply the task's CPU quota (its share now: a RESIZE during start-up counts), then answer its job."""
        ending = task.startup
        task.startup = None
        limits = self._limits(task)
        try:
            self.cgroups.apply(task.cgroup, limits)
        except CgroupError as exc:  # the group is gone (the task is exiting): nothing to hold
            event(self.log, "task.startup_quota_failed", level=logging.WARNING, task=str(task.key), reason=str(exc))
        if ending is not None:
            task.line = ending.answer()  # after the quota: the job goes on only once it holds
        event(self.log, "task.startup_done", task=str(task.key), after_s=round(time.time() - task.started_at, 2),
              quota=round(limits.cpu_quota, 4), reason=why)
        self.save()

    @staticmethod
    def _drop_startup(task: Task) -> None:
        """The task ended (or never started): its phase ends with it, unanswered, and its line closes."""
        if task.startup is not None:
            task.startup.close(answer=False)
            task.startup = None
        if task.line is not None:
            task.line.close()
            task.line = None
        task.wind_down_until = None

    def _wind_down(self, task: Task, now: float) -> None:
        """Its job said its process is exiting: no CPU quota for the teardown, up to the cap
        (its weight stays its allocation, so no neighbour gets less than its own)."""
        task.line = None
        if self.wind_down_cap_s <= 0:
            return
        task.wind_down_until = now + self.wind_down_cap_s
        try:
            self.cgroups.apply(task.cgroup, self._limits(task))
        except CgroupError as exc:  # the group is gone (the task has exited)
            event(self.log, "task.wind_down_failed", level=logging.WARNING, task=str(task.key), reason=str(exc))
            return
        event(self.log, "task.winding_down", task=str(task.key), cap_s=self.wind_down_cap_s)

    def _end_wind_down(self, task: Task, why: str) -> None:
        """A wind-down that outlived its cap: the quota again (the process is still there)."""
        task.wind_down_until = None
        limits = self._limits(task)
        try:
            self.cgroups.apply(task.cgroup, limits)
        except CgroupError as exc:
            event(self.log, "task.wind_down_failed", level=logging.WARNING, task=str(task.key), reason=str(exc))
            return
        event(self.log, "task.wind_down_over", level=logging.WARNING, task=str(task.key),
              quota=round(limits.cpu_quota, 4), reason=why)

    def _exited(self, task: Task, code: int) -> None:
        if not task.adopted or state.same_process(task.pid, task.pid_ticks):
            self._signal(task, signal.SIGKILL)  # what is left of its process group goes with it
        oom = self.cgroups.oom_kills(task.cgroup)
        task.phase, task.exit_code, task.kill_at = Phase.EXITED, code, None
        task.oom_killed = bool(oom)
        self._drop_startup(task)
        if task.lost:
            task.message = f"lost: {task.lost}; the job's processes were killed"
        elif oom:
            task.message = (
                f"OOM: killed by its memory limit of {task.share.mem_gb:g} GB ({oom} process(es) killed); "
                f"last lines of {task.log_path}:\n{log_tail(task.log_path)}"
            )
        elif task.stop_reason:
            task.message = f"stopped by the agent ({task.stop_reason}); exit code {code}"
        elif code not in (0, EXIT_RESTART):
            task.message = f"exit code {code}; last lines of {task.log_path}:\n{log_tail(task.log_path)}"
        note = state.read_exit_note(self._exit_path(task))
        if note:
            task.message = f"{task.message}\n{note}" if task.message else note
        self._remove_cgroup(task)
        self._remove_cache_segments(task)
        kind = ("lost" if task.lost else "oom" if oom else "stopped" if task.stop_reason else "ok" if code == 0
                else "restart" if code == EXIT_RESTART else "failed")
        self.counts.exits[kind] += 1
        self.counts.oom_kills += oom
        event(
            self.log,
            "task.lost" if task.lost else "task.oom_killed" if oom else "task.exited",
            level=logging.WARNING if task.lost or oom or code not in (0, EXIT_RESTART) else logging.INFO,
            task=str(task.key),
            pid=task.pid,
            exit_code=code,
            oom_kills=oom,
            adopted=task.adopted,
            runtime_s=round(time.time() - task.started_at, 3),
        )
        self._repool()  # its whole cores, if any, go back to the pool

    def _remove_cache_segments(self, task: Task) -> None:
        """Unlink the /dev/shm MinIO cache segments whose owner process is gone: a job killed by
        a signal (a cancel's SIGTERM, the grace's SIGKILL, OOM) never ran its own clean-up, and
        its segment would hold its memory until some job on the node created the next cache."""
        from synergy.cache.minio import remove_stale_segments

        try:
            removed = remove_stale_segments()
        except OSError as exc:
            event(self.log, "cache.remove_failed", level=logging.WARNING, task=str(task.key), reason=str(exc))
            return
        if removed:
            event(self.log, "cache.segments_removed", task=str(task.key), paths=removed)

    def _remove_cgroup(self, task: Task) -> None:
        try:
            task.cgroup_pending = not self.cgroups.remove(task.cgroup)
        except CgroupError as exc:
            task.cgroup_pending = False
            event(self.log, "cgroup.remove_failed", level=logging.WARNING, task=str(task.key), reason=str(exc))

    # -- the state file and re-adoption ---------------------------------------------------------
    def save(self) -> None:
        """Write the task list to the state file (atomically); a failure is logged, never raised."""
        now_mono, now_unix = self.clock(), time.time()
        records = [
            t.to_record(None if t.kill_at is None else now_unix + (t.kill_at - now_mono))
            for t in self.tasks.values()
            if t.pid or t.phase == Phase.EXITED
        ]
        try:
            state.save(self.state_path, self.node_id, records)
        except OSError as exc:
            event(self.log, "agent.state_not_saved", level=logging.ERROR, path=str(self.state_path),
                  reason=exc.strerror)

    def load(self) -> None:
        """Read the state file into `tasks`, as recorded, touching nothing (no process, no group).

        What the agent reports in `RegisterNode` before the daemon accepted it as the node's
        agent: until then it must not act on the node (a refused duplicate would otherwise
        kill the live agent's tasks). `readopt` checks them once it has been accepted.
        """
        if self._loaded:
            return
        self._loaded = True
        records, problem = state.load(self.state_path, self.node_id)
        if problem:
            event(self.log, "agent.state_unreadable", level=logging.WARNING, reason=problem)
        for r in records:
            try:
                task = Task.from_record(r)
            except (KeyError, TypeError, ValueError) as exc:
                event(self.log, "agent.state_bad_record", level=logging.WARNING, reason=repr(exc))
                continue
            self.tasks[task.key] = task
            kill_at = r.get("kill_at_unix")
            if task.phase == Phase.STOPPING and kill_at is not None:
                self._kill_at_unix[task.key] = float(kill_at)

    def readopt(self) -> None:
        """Take over the tasks a previous agent instance left running (once the daemon accepted
        this agent as the node's instance; `load` reads them first, without acting).

        A task is re-adopted when its job process and its shim are the very processes the
        state file names (pid and start time) and the job is still in its cgroup; one whose
        exit the shim recorded meanwhile is reported with that code; anything else (and any
        task group of ours the state file does not know) is killed and reported lost.
        """
        self.load()
        state.remove_stale_temp_files(self.state_path)
        for task in list(self.tasks.values()):
            if not task.alive:
                continue
            kill_at = self._kill_at_unix.pop(task.key, None)
            if kill_at is not None:
                task.kill_at = self.clock() + max(0.0, kill_at - time.time())
            code = state.read_exit(self._exit_path(task))
            if code is not None:
                self._exited(task, code)
                continue
            why = ""
            if not state.same_process(task.pid, task.pid_ticks):
                why = f"its process (pid {task.pid}) is gone and no exit status was recorded"
            elif not state.same_process(task.shim_pid, task.shim_ticks):
                why = f"its shim (pid {task.shim_pid}) is gone, so its exit status could not be known"
            elif self.cgroups.kind != "none" and task.pid not in self.cgroups.pids(task.cgroup):
                why = f"its process (pid {task.pid}) is no longer in its cgroup {task.cgroup}"
            if why:
                task.lost = why + " (found at agent restart)"
                self._exited(task, EXIT_LOST)
                continue
            self.counts.readopted += 1
            event(self.log, "task.readopted", task=str(task.key), pid=task.pid, phase=task.phase.value,
                  cores=format_cpu_list(task.cores))
            if task.startup is not None:  # its job's word would go to the old agent's socket, closed
                self._end_startup(task, "re-adopted by a new agent instance (the socket went with the old one)")
        known = {t.cgroup for t in self.tasks.values()}
        for name in self.cgroups.children():
            key = key_of_cgroup(name)
            if name in known or key is None:
                continue
            task = Task(key, "", Share(0, 0.0, 0.0), self.logs_dir / f"{key}.log", phase=Phase.RUNNING,
                        lost="its cgroup was found without a state record (found at agent restart)", adopted=True)
            self.tasks[key] = task
            self._exited(task, EXIT_LOST)
        self.save()

    def fit_to_slice(self, grace_s: float) -> None:
        """Move re-adopted tasks whose cores left the agent's slice (`--cpus` changed across a
        restart) onto cores of the new slice, as a resize would; a task that no longer fits
        is stopped (SIGTERM, SIGKILL after `grace_s`: it may checkpoint and be requeued) and
        meanwhile confined to the slice's cores. Afterwards no task group holds a core outside
        the slice, so the node group can be narrowed to it (`Cgroups.confine`)."""
        inside = set(self.cores)
        for task in list(self.tasks.values()):
            if not task.alive or set(task.cores) <= inside:
                continue
            old = format_cpu_list(task.cores)
            held = [t.grant for t in self.tasks.values()
                    if t.alive and t.key != task.key and set(t.cores) <= inside]
            try:
                grant = choose_cores(task.share.cpus, self.cores, held)
            except CoreError as exc:
                self.stop(task.key, grace_s, f"the agent's --cpus changed and the task no longer fits: {exc}")
                grant = CoreGrant(tuple(self.cores))
            try:
                self.cgroups.apply(task.cgroup, self._limits(task, cores=grant.cores))
            except CgroupError as exc:
                event(self.log, "task.move_failed", level=logging.WARNING, task=str(task.key), reason=str(exc))
                continue
            if self.cgroups.kind == "none":
                pin_tree(task.pid, grant.cores)
            task.grant = grant
            event(self.log, "task.moved", level=logging.WARNING, task=str(task.key), cores=f"{old}->"
                  f"{format_cpu_list(grant.cores)}", stopping=task.phase == Phase.STOPPING,
                  reason="the agent's --cpus changed across its restart")
        self._repool()
        self.save()

    # -- bookkeeping ----------------------------------------------------------------------------
    def forget(self, key: TaskKey) -> None:
        task = self.tasks.get(key)
        if task is not None and task.phase == Phase.EXITED and not task.cgroup_pending:
            del self.tasks[key]
            self._exit_path(task).unlink(missing_ok=True)
            self._exit_path(task).with_name(f"{task.key}.exit.reserve").unlink(missing_ok=True)
            self.save()

    def shutdown(self, grace_s: float, stop_tasks: bool = True) -> None:
        """Leave the tasks running for the next agent instance (state saved), or stop them all.

        Stopping sends SIGTERM, waits up to the grace, then SIGKILL, and removes the groups.
        """
        if not stop_tasks:
            self.poll()
            for task in self.tasks.values():  # no agent may come back to end their start-up
                if task.alive and task.startup is not None:
                    self._end_startup(task, "the agent is leaving its tasks running")
            self.save()
            event(self.log, "agent.tasks_left_running", tasks=sum(t.alive for t in self.tasks.values()),
                  state=str(self.state_path))
            return
        for task in self.tasks.values():
            self.stop(task.key, grace_s, "the agent is shutting down")
        deadline = self.clock() + grace_s + 5.0
        while any(t.alive or t.cgroup_pending for t in self.tasks.values()) and self.clock() < deadline:
            self.poll()  # also reaps the shims and retries groups that were busy a moment ago
            time.sleep(0.05)
        self.poll()
        self.save()
