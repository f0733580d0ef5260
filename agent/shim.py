"""The per-task shim: parent of the job's process, it records the job's exit status in a file.

Why a shim: a restarted agent is no longer the parent of the tasks it re-adopts, and Linux
gives a process's exit status only to its parent (a pidfd or /proc tell *that* a process
ended, never *how*). So every task runs under this tiny waiter, which outlives the agent:
it forks the job, tells the agent the job's pid through an inherited pipe, `waitpid`s it
and writes the status (the agent's convention: the code, or -N for signal N) to
`STATUS_FILE` atomically (into space reserved at start, fsync, rename). Whichever agent instance supervises
the task then reads that file.

It runs as `python -I -S shim.py STATUS_FILE PID_FD CORES JOIN_FILES LOG MAX_BYTES KEEP RUN_AS EXECUTABLE ARGV...`
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

**The job's user** (issue 16, agent/users.py). RUN_AS is "" (the job runs as the shim, i.e. the
agent) or `UID:GID:GROUPS`: the forked child then drops to that user (supplementary groups,
gid, uid: in that order, irrevocably), sets a umask of 077 and enters the working dir again
as the user before it execs. The shim itself stays root: its exit record lives in
the agent's root-only work dir where the job cannot write, the job cannot signal or trace it
(another uid), and its environment (the job token) is unreadable to other users. The log is
created owned by the user (0600). A failure of the drop or of the exec reaches the shim on a
close-on-exec pipe and fails the launch (`ERR` on the pid pipe) with the reason.

Two things a full work dir must not break (issue 15):

* **The exit record.** Before the job starts the shim reserves the record's space
  (`STATUS_FILE.reserve`, `posix_fallocate`); at the exit it writes the code *into* that
  reserved file and renames it into place, which needs no new block. A work dir already
  too full for the reservation fails the launch (`ERR` on the pipe) with that reason.
* **The log.** The job's stdout and stderr are a pipe the shim copies into LOG, capped at
  MAX_BYTES (0: no cap): at the cap LOG becomes LOG.1 (LOG.1 becomes LOG.2, ... up to KEEP
  files; KEEP 0: the old output is dropped) and LOG starts again with a line saying so.
  Output that cannot be written (the disk is full) is counted and dropped, and a line
  `[synergy: N bytes of output dropped: ...]` is written once the log takes writes again,
  so a reader sees the gap. The job never blocks on a full disk.
"""

import errno
import os
import select
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


#: bytes reserved for the exit record (one block)
RESERVE_BYTES = 4096
#: the most bytes read from the job's pipe at once
CHUNK = 1 << 16


def reserve_status(path: str) -> int:
    """Reserve the exit record's space now (a fd on `path.reserve`); OSError when the disk is full."""
    fd = os.open(f"{path}.reserve", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
    except OSError:
        os.close(fd)
        try:
            os.unlink(f"{path}.reserve")
        except OSError:
            pass
        raise
    return fd


def commit_status(fd: int, path: str, code: int, note: str = "") -> None:
    """Write the code (and a note line, e.g. output dropped) into the reserved file and rename
    it to `path` (no new block needed)."""
    data = f"{code}\n{note}".encode()[:RESERVE_BYTES]
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
    os.fsync(fd)
    os.close(fd)
    os.rename(f"{path}.reserve", path)
    _fsync_dir(path)


def _fsync_dir(path: str) -> None:
    try:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


class Log:
    """The task's log file, capped and rotated; what cannot be written is counted, not blocked on."""

    def __init__(self, path: str, max_bytes: int, keep: int, owner: tuple = ()) -> None:
        self.path, self.max_bytes, self.keep = path, max_bytes, keep
        #: (uid, gid) the log files belong to, () for the shim's own
        self.owner = owner
        self.dropped = 0
        self.why = ""
        self.fd = -1
        self._open()

    def _open(self) -> None:
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600 if self.owner else 0o644)
            if self.owner:
                os.fchown(self.fd, *self.owner)
            self.size = os.fstat(self.fd).st_size
        except OSError as exc:
            self.fd, self.size, self.why = -1, 0, exc.strerror or str(exc)

    def _rotate(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        try:
            if self.keep > 0:
                for i in range(self.keep - 1, 0, -1):
                    if os.path.exists(f"{self.path}.{i}"):
                        os.replace(f"{self.path}.{i}", f"{self.path}.{i + 1}")
                os.replace(self.path, f"{self.path}.1")
                note = f"earlier output in {os.path.basename(self.path)}.1 (at most {self.keep} such files)"
            else:
                os.unlink(self.path)
                note = "earlier output dropped (no rotated files are kept)"
        except OSError as exc:
            note = f"could not rotate: {exc.strerror or exc}"
        self._open()
        self._raw(f"[synergy: log reached its cap of {self.max_bytes} bytes; {note}]\n".encode())

    def _raw(self, data: bytes) -> int:
        """Write what fits; the bytes written."""
        done = 0
        while done < len(data) and self.fd >= 0:
            try:
                done += os.write(self.fd, data[done:])
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
                    raise
                self.why = exc.strerror or str(exc)
                break
        self.size += done
        return done

    def write(self, data: bytes) -> None:
        if self.dropped and self.fd >= 0:  # say what was lost before the output resumes
            note = (f"[synergy: {self.dropped} bytes of output dropped: the log could not be written "
                    f"({self.why})]\n").encode()
            if self._raw(note) == len(note):
                self.dropped = 0
        if self.max_bytes and self.size + len(data) > self.max_bytes and self.size > 0:
            self._rotate()
        if self.dropped:
            self.dropped += len(data)
            return
        self.dropped += len(data) - self._raw(data)

    def close(self) -> str:
        """Close the log; what was dropped and not yet said in it ("" when nothing)."""
        if self.dropped:
            self.write(b"")
        if self.fd >= 0:
            os.close(self.fd)
        if not self.dropped:
            return ""
        return f"{self.dropped} bytes of output dropped: the log could not be written ({self.why})"


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


def parse_run_as(text: str) -> tuple:
    """"UID:GID:G1,G2" -> (uid, gid, [groups]); "" -> () (no switch)."""
    if not text:
        return ()
    uid, gid, groups = text.split(":")
    return int(uid), int(gid), [int(g) for g in groups.split(",") if g]


def _become(run_as: tuple) -> None:
    """In the job's child: drop to its user for good (groups, gid, uid), umask 077, re-enter the cwd."""
    if not run_as:
        return
    os.umask(0o077)
    uid, gid, groups = run_as
    cwd = os.getcwd()
    os.setgroups(groups)
    os.setgid(gid)  # as root: real, effective and saved ids alike
    os.setuid(uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise OSError(f"the switch to uid {uid} gid {gid} did not hold")
    try:
        os.chdir(cwd)  # the user may enter it? (the shim entered it as root)
    except OSError as exc:
        raise OSError(f"working dir {cwd}: {exc.strerror or exc}") from None


def _exec_report(err_r: int) -> str:
    """What the child said on its close-on-exec pipe before it exited ("" = the exec succeeded)."""
    data = b""
    while True:
        try:
            chunk = os.read(err_r, 4096)
        except InterruptedError:
            continue
        if not chunk:
            break
        data += chunk
    os.close(err_r)
    return data.decode(errors="replace").strip()


def _relay(out_fd: int, log: Log, pid: int) -> int:
    """Copy the job's output into `log` until the job has exited; its wait status.

    SIGCHLD wakes the select (a wake-up fd), so the exit is seen at once even while a
    grandchild keeps the pipe open; what is in the pipe then is copied before returning.
    """
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    os.set_blocking(out_fd, False)
    status = None
    open_ = True
    while status is None:
        done, st = os.waitpid(pid, os.WNOHANG)
        if done:
            status = st
            break
        ready = select.select([out_fd, wake_r] if open_ else [wake_r], [], [], 5.0)[0]
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except BlockingIOError:
                pass
        if open_ and out_fd in ready:
            open_ = _drain(out_fd, log)
    if open_:
        _drain(out_fd, log, limit=64)  # what the job wrote last (a grandchild may write on: bounded)
    return status


def _drain(fd: int, log: Log, limit: int = 1 << 30) -> bool:
    """Copy what the pipe holds now (at most `limit` reads); False at EOF."""
    for _ in range(limit):
        try:
            data = os.read(fd, CHUNK)
        except BlockingIOError:
            return True
        except InterruptedError:
            continue
        if not data:
            return False
        log.write(data)
    return True


def main(argv: list) -> int:
    status_path, pid_fd, cores, join = argv[1], int(argv[2]), argv[3], argv[4]
    log_path, max_bytes, keep, run_as = argv[5], int(argv[6]), int(argv[7]), parse_run_as(argv[8])
    exe, args = argv[9], argv[10:]
    for s in _IGNORED:
        signal.signal(s, signal.SIG_IGN)
    if not _enter(pid_fd, cores, join):
        return 1
    try:
        reserved = reserve_status(status_path)
    except OSError as exc:
        os.write(pid_fd, (f"ERR the work dir is full: cannot reserve the task's exit record "
                          f"{status_path} ({exc.strerror or exc})\n").encode())
        return 1
    _oom_score_adj("-1000")
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()  # close-on-exec: EOF once the exec succeeded
    pid = os.fork()
    if pid == 0:
        step = "start the job"
        try:
            os.close(pid_fd)
            os.close(out_r)
            os.close(err_r)
            os.close(reserved)
            os.dup2(out_w, 1)
            os.dup2(out_w, 2)
            os.close(out_w)
            os.setpgid(0, 0)
            for s in _RESET:
                signal.signal(s, signal.SIG_DFL)
            _oom_score_adj("0")
            step = "switch to the job's user"
            _become(run_as)
            step = f"run {exe}" + (f" as uid {run_as[0]}" if run_as else "")
            os.execv(exe, args)
        except BaseException as exc:  # noqa: BLE001 - the child must never return into the shim
            try:
                os.write(err_w, f"cannot {step}: {exc}".encode())
            except OSError:
                pass
        os._exit(127)
    os.close(out_w)
    os.close(err_w)
    try:
        os.setpgid(pid, pid)  # both sides set it: no instant where a signal to the group misses
    except OSError:
        pass
    failed = _exec_report(err_r)
    if failed:  # the job never ran: the launch fails with the reason (and the log says it too)
        os.waitpid(pid, 0)
        os.close(out_r)
        os.close(reserved)
        try:
            os.unlink(f"{status_path}.reserve")
        except OSError:
            pass
        try:
            os.write(1, f"synergy-shim: {failed}\n".encode())
        except OSError:
            pass
        os.write(pid_fd, f"ERR {failed}\n".encode())
        return 1
    try:
        os.write(pid_fd, f"{pid}\n".encode())
    except OSError:
        pass
    os.close(pid_fd)
    log = Log(log_path, max_bytes, keep, tuple(run_as[:2]))
    status = _relay(out_r, log, pid)
    code = os.waitstatus_to_exitcode(status)
    note = log.close()  # a last try at the log; the record below does not need the disk
    commit_status(reserved, status_path, code, note)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
