"""Real Unix users for tests (useradd/userdel), and running the `synergy` CLI as one of them.

The interpreter of this virtualenv lives under /root (mode 0700 here), which another user
cannot execute; so the CLI runs in a child that starts as root, imports everything the CLI
needs while it still may, then drops to the user's uid, gid and groups for good (setgid,
setgroups, setuid) before `main()`: every connection it makes carries that user's
credentials, which is what synergyd's Unix socket reads (SO_PEERCRED).
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import subprocess
import sys
from dataclasses import dataclass

#: Run in the child: argv = uid gid JSON-list-of-synergy-argvs; prints a JSON list of
#: [code, stdout, stderr], one per command (one interpreter start for several commands).
_RUNNER = r"""
import contextlib, io, json, os, sys
import grpc, rich.console, rich.table, rich.text
import synergy.scheduler.cli.main as cli
from synergy.scheduler.cli.commands import admin, cluster, jobs, logs, nodes, users
from synergy.v1 import admin_pb2, admin_pb2_grpc, common_pb2
console = rich.console.Console(file=io.StringIO(), width=200)
t = rich.table.Table("a", "b"); t.add_row("x", rich.text.Text("y"))
console.print(t)  # rich imports some modules on first use: do it while they are readable
cli.build_parser().format_help()  # so does argparse (shutil, for the terminal width)
uid, gid, commands = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
os.setgroups([])
os.setgid(gid)
os.setuid(uid)
results, real_stdout = [], sys.stdout
for argv in commands:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    results.append([int(code), out.getvalue(), err.getvalue()])
real_stdout.write(json.dumps(results))
"""


def can_make_users() -> str:
    """Why real users cannot be made here ("" = they can)."""
    if os.geteuid() != 0:
        return "needs root to create Unix users with useradd"
    if not shutil.which("useradd") or not shutil.which("userdel"):
        return "needs useradd and userdel"
    return ""


@dataclass(frozen=True)
class UnixUser:
    name: str
    uid: int
    gid: int


def add_user(prefix: str) -> UnixUser:
    """A new user named PREFIX + 4 hex digits (unique: other tests may run beside these)."""
    name = f"{prefix}{secrets.token_hex(2)}"
    subprocess.run(["useradd", "-M", "-U", "-s", "/usr/sbin/nologin", name], check=True, capture_output=True)
    entry = pwd.getpwnam(name)
    return UnixUser(name, entry.pw_uid, entry.pw_gid)


def remove_user(user: UnixUser) -> None:
    subprocess.run(["userdel", user.name], check=False, capture_output=True)


@dataclass
class CliRun:
    code: int
    out: str
    err: str


def synergy_as(user: UnixUser | None, *commands: list[str], timeout: float = 60) -> list[CliRun]:
    """Each `synergy ARGV...` of `commands` in turn as `user` (None: as root), in one child
    process with a clean environment."""
    uid, gid = (user.uid, user.gid) if user is not None else (0, 0)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "LANG": "C.UTF-8",
           "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", _RUNNER, str(uid), str(gid), json.dumps(commands)],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd="/")
    if proc.returncode != 0:
        raise AssertionError(f"the CLI runner failed as uid {uid}: {proc.stderr[-2000:]}")
    return [CliRun(*r) for r in json.loads(proc.stdout)]
