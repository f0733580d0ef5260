"""Whom a task runs as: the job's Unix user, looked up on this node (issue 16).

A root agent starts every task with its user's uid, primary gid and supplementary groups
(the node's passwd and group databases: `pwd`, `os.getgrouplist`), its home as HOME, USER and
LOGNAME set and a umask of 077, so one user's job cannot read another's files, the agent's
work dir or its tokens, and cannot move itself out of its cgroups. The job's user is its
`spec.user` (the daemon sends it as `TaskSpec.run_as_user`); a job with no user runs as
`--default-user` (default `nobody`). A user unknown on the node fails the launch with a
reason naming the user and the node, never a silent fallback to root; running a job as root
(uid 0) needs `--allow-root-jobs`. An agent that is not root cannot switch users: it says so
at start and runs every job as itself. `--ignore-job-users` asks for that on purpose (every
job as the agent's user, as before issue 16), with `--allow-root-jobs` where the agent is root.

The drop itself happens in the shim's child, between fork and exec (shim.py): the shim stays
root, so the exit record it writes stays where the job cannot forge it.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass

from synergy.agent.launch import LaunchError

#: --default-user's default: the account with no files and no rights of its own.
DEFAULT_USER = "nobody"
#: a job's files are its user's alone (issue 16)
JOB_UMASK = 0o077
#: the working dir of a job that names none and whose user has no home (as Slurm falls back)
NO_HOME_DIR = "/tmp"


@dataclass(frozen=True)
class RunAs:
    """A Unix user as this node knows it: what the shim needs to become them."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    def env(self) -> dict[str, str]:
        """The variables that say who the job is (set over the agent's own)."""
        return {"HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def shim_arg(self) -> str:
        """"UID:GID:G1,G2" for the shim's command line (ids only: it does no lookups)."""
        return f"{self.uid}:{self.gid}:{','.join(map(str, self.groups))}"

    def default_working_dir(self) -> str:
        """Where a job that names no working dir starts: the user's home, else /tmp."""
        return self.home if self.home and os.path.isdir(self.home) else NO_HOME_DIR


def lookup(name: str, node_id: str) -> RunAs:
    """The user `name` on this node; LaunchError naming the user and the node when unknown."""
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        raise LaunchError(f"user {name!r} is not known on node {node_id} (no passwd entry): the job runs as "
                          "its user, so that user must exist on every node it may run on") from None
    try:
        groups = tuple(sorted(set(os.getgrouplist(pw.pw_name, pw.pw_gid))))
    except OSError as exc:
        raise LaunchError(f"user {name!r}: cannot read its groups on node {node_id}: {exc}") from None
    return RunAs(pw.pw_name, pw.pw_uid, pw.pw_gid, groups, pw.pw_dir)


@dataclass(frozen=True)
class JobUsers:
    """The agent's rule for whom jobs run as (flags --default-user, --allow-root-jobs, --ignore-job-users).

    `switch` False: every job runs as the agent itself (the agent is not root, or
    --ignore-job-users); the default of a bare `JobUsers()` (unit tests of the supervisor).
    """

    switch: bool = False
    default_user: str = DEFAULT_USER
    allow_root: bool = False
    node_id: str = ""

    @classmethod
    def for_agent(cls, node_id: str, default_user: str, allow_root: bool, ignore: bool) -> JobUsers:
        return cls(switch=os.geteuid() == 0 and not ignore, default_user=default_user, allow_root=allow_root,
                   node_id=node_id)

    def run_as(self, user: str) -> RunAs | None:
        """Whom a job of `user` ("" = none) runs as; None: as the agent. LaunchError when it may not run."""
        if not self.switch:
            return None
        name = user or self.default_user
        who = lookup(name, self.node_id)
        if who.uid == 0 and not self.allow_root:
            given = f"user {name!r}" if user else f"no user, and --default-user is {name!r}"
            raise LaunchError(f"{given}: the job would run as root (uid 0) on node {self.node_id}, which this "
                              "agent refuses (start it with --allow-root-jobs to allow root jobs)")
        return who

    def describe(self) -> str:
        """One line for the start log: whom jobs run as on this node."""
        if self.switch:
            root = "allowed" if self.allow_root else "refused"
            return (f"jobs run as their users (spec.user, looked up on this node); a job with no user runs as "
                    f"{self.default_user!r}; jobs as root are {root}")
        uid = os.geteuid()
        if uid != 0:
            name = _name_of(uid)
            return (f"the agent is not root (uid {uid}, {name}): it cannot switch users, so every job runs as "
                    f"{name}, whatever its user")
        return "--ignore-job-users: every job runs as the agent's user (root), whatever its user"


def unreadable_by_others(path: str) -> str:
    """Why a user other than the file's owner cannot read `path` ("" when anyone can): a
    file every job reads (the CA certificate it checks synergyd's with) must be world-readable."""
    p = os.path.abspath(path)
    try:
        if not os.stat(p).st_mode & 0o004:
            return f"{p} is not readable by others"
        parent = os.path.dirname(p)
        while parent != os.path.dirname(parent):
            if not os.stat(parent).st_mode & 0o001:
                return f"its dir {parent} cannot be entered by others"
            parent = os.path.dirname(parent)
    except OSError as exc:
        return f"{p}: {exc.strerror or exc}"
    return ""


def _name_of(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)
