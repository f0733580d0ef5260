"""The per-task shim: parent of the job's process, it records the job's exit status in a file.

Why a shim: a restarted agent is no longer the parent of the tasks it re-adopts, and Linux
gives a process's exit status only to its parent (a pidfd or /proc tell *that* a process
ended, never *how*). So every task runs under this tiny waiter, which outlives the agent:
it forks the job, tells the agent the job's pid through an inherited pipe, `waitpid`s it
and writes the status (the agent's convention: the code, or -N for signal N) to
`STATUS_FILE` atomically (temp file, fsync, rename). Whichever agent instance supervises
the task then reads that file.

It runs as `python -I -S shim.py STATUS_FILE PID_FD CORES JOIN_FILES EXECUTABLE ARGV...`
(standard library only, no site packages: it starts in about 10 ms), with the job's
environment (the job token never appears on its command line). Before it forks the job it
joins the task's cgroups (writes its pid into each of the comma-separated JOIN_FILES) and
pins itself to CORES (comma-separated), so the job inherits both and no instant of the job
runs outside its limits; doing this here rather than in a `preexec_fn` lets the agent
spawn with vfork instead of copying its whole address space. A failure there is sent on
the pipe as `ERR message` instead of a pid. The shim ignores SIGTERM / SIGINT / SIGHUP; the job runs in a process group of its
own, which is what the agent signals, so a SIGKILL to the job never takes the shim with
it. The shim asks the kernel's OOM killer to pass it over (oom_score_adj -1000, where
permitted); the job gets the default back before it execs.
"""

import os
import signal
import sys

_IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_RESET = _IGNORED + (signal.SIGPIPE, signal.SIGXFSZ)


def _oom_score_adj(value: str) -> None:
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(value)
    except OSError:
        pass


def write_status(path: str, code: int) -> None:
    """Atomically replace `path` with the exit code (temp, fsync, rename, fsync the directory)."""
    tmp = f"{path}.tmp{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, f"{code}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    try:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _enter(pid_fd: int, cores: str, join: str) -> bool:
    """Join the task's cgroups and pin its cores; on failure tell the agent why and give up."""
    try:
        me = str(os.getpid()).encode()
        for path in filter(None, join.split(",")):
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, me)
            finally:
                os.close(fd)
        if cores:
            os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    except OSError as exc:
        os.write(pid_fd, f"ERR cannot enter the task's cgroup or cores: {exc}\n".encode())
        return False
    return True


def main(argv: list) -> int:
    status_path, pid_fd, cores, join, exe, args = argv[1], int(argv[2]), argv[3], argv[4], argv[5], argv[6:]
    for s in _IGNORED:
        signal.signal(s, signal.SIG_IGN)
    if not _enter(pid_fd, cores, join):
        return 1
    _oom_score_adj("-1000")
    pid = os.fork()
    if pid == 0:
        try:
            os.close(pid_fd)
            os.setpgid(0, 0)
            for s in _RESET:
                signal.signal(s, signal.SIG_DFL)
            _oom_score_adj("0")
            os.execv(exe, args)
        except BaseException as exc:  # noqa: BLE001 - the child must never return into the shim
            try:
                os.write(2, f"synergy-shim: cannot run {exe}: {exc}\n".encode())
            except OSError:
                pass
        os._exit(127)
    try:
        os.setpgid(pid, pid)  # both sides set it: no instant where a signal to the group misses
    except OSError:
        pass
    try:
        os.write(pid_fd, f"{pid}\n".encode())
    except OSError:
        pass
    os.close(pid_fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    write_status(status_path, os.waitstatus_to_exitcode(status))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
