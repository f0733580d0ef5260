"""Admin commands: back up synergyd's database online, restore it offline.

`backup` asks the running daemon for a consistent snapshot (BackupDatabase streams it) and
writes FILE atomically, checked in full before it replaces anything. `restore` works on
the state dir directly, with no daemon running (it takes the daemon's lock), and keeps the
tokens, so agents and the CLI need no new credentials. Both rest on synergy.scheduler.statedir,
the same checks synergyd runs at start.
"""
from __future__ import annotations

import argparse
import os
import secrets
from pathlib import Path
from typing import Callable

import grpc
from rich.text import Text

from synergy.scheduler.cli.commands import users
from synergy.scheduler.cli.connection import Client
from synergy.scheduler.cli.errors import CliError, ExitCode, from_rpc_error
from synergy.scheduler.cli.output import Result
from synergy.scheduler.statedir import (
    DatabaseDamaged,
    DatabaseSummary,
    StateDirError,
    StateDirLocked,
    WrongSchemaVersion,
    check_database,
    default_state_dir,
    fsync_dir,
    restore_database,
)
from synergy.v1 import admin_pb2

Connect = Callable[[], Client]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("admin", help="manage users; back up or restore synergyd's database",
                       description="Manage users (docs/daemon.md, 'Users and security'); back up synergyd's "
                                   "database while it runs, or restore a backup into a stopped daemon's "
                                   "state dir (docs/daemon.md, 'Damaged or full state dir; backup and restore').")
    actions = p.add_subparsers(dest="admin_action", metavar="{users,backup,restore}", required=True)
    users.register_admin(actions)
    backup = actions.add_parser(
        "backup", help="write a consistent snapshot of the running daemon's database to FILE",
        description="Ask the running synergyd for a consistent snapshot of its database (it keeps "
                    "serving) and write it to FILE atomically; FILE is checked (integrity_check) before "
                    "it replaces an existing one. Admins only.")
    backup.add_argument("file", metavar="FILE", help="where to write the backup (an SQLite file)")
    backup.set_defaults(func=backup_cmd)
    restore = actions.add_parser(
        "restore", help="replace a stopped daemon's database with FILE (offline)",
        description="Replace the database in the state dir (--state-dir, $SYNERGY_STATE_DIR or the "
                    "default) with the backup FILE. synergyd must be stopped. FILE is checked first; "
                    "tokens stay; the replaced database is kept as synergyd.sqlite.before-restore.")
    restore.add_argument("file", metavar="FILE", help="a backup written by 'synergy admin backup'")
    restore.set_defaults(func=restore_cmd)


def _summary(summary: DatabaseSummary, verb: str) -> Result:
    data = {"path": str(summary.path), "bytes": summary.size_bytes, "jobs": summary.jobs,
            "nodes": summary.nodes, "schema_version": summary.schema_version}
    return Result(data, Text(f"{verb} {summary.path}: {summary.size_bytes} bytes, {summary.jobs} jobs, "
                             f"{summary.nodes} nodes (integrity ok)"))


def backup_cmd(args: argparse.Namespace, connect: Connect) -> Result:
    dest = Path(args.file).expanduser()
    if dest.is_dir():
        raise CliError(f"{dest} is a directory; give a file name", ExitCode.USAGE)
    if not dest.parent.is_dir():
        raise CliError(f"cannot write {dest}: directory {dest.parent} does not exist", ExitCode.USAGE)
    tmp = dest.parent / f".{dest.name}.{secrets.token_hex(4)}.tmp"
    try:
        with connect() as client:
            expected = _receive(client, tmp)
        got = tmp.stat().st_size
        if got != expected:
            raise CliError(f"the backup stream ended after {got} of {expected} bytes; nothing was written")
        try:
            summary = check_database(tmp, full=True)
        except StateDirError as exc:
            raise CliError(f"the received backup failed its check ({exc}); nothing was written") from None
        os.replace(tmp, dest)
        fsync_dir(dest.parent)
    except OSError as exc:
        raise CliError(f"cannot write {dest}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return _summary(DatabaseSummary(dest, summary.size_bytes, summary.jobs, summary.nodes,
                                    summary.schema_version), "wrote")


def _receive(client: Client, tmp: Path) -> int:
    """Stream the snapshot into `tmp` (0600: it holds job tokens) and fsync it; returns the size announced."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    expected = -1
    with os.fdopen(fd, "wb") as f:
        try:
            for chunk in client.call("BackupDatabase", admin_pb2.BackupDatabaseRequest()):
                if expected < 0:
                    expected = chunk.total_bytes
                f.write(chunk.data)
        except grpc.RpcError as err:  # a stream fails while it is read, not when it is called
            raise from_rpc_error(err, client.target.address, client.timeout_s) from None
        f.flush()
        os.fsync(f.fileno())
    if expected < 0:
        raise CliError("synergyd sent an empty backup stream; nothing was written")
    return expected


def restore_cmd(args: argparse.Namespace, connect: Connect) -> Result:
    state_dir = Path(args.state_dir).expanduser() if args.state_dir else default_state_dir()
    backup = Path(args.file).expanduser()
    if not backup.is_file():
        raise CliError(f"cannot restore {backup}: no such file", ExitCode.USAGE)
    if not state_dir.is_dir():
        raise CliError(f"cannot restore into {state_dir}: no such directory (see --state-dir)", ExitCode.USAGE)
    try:
        summary = restore_database(state_dir, backup)
    except (DatabaseDamaged, WrongSchemaVersion) as exc:
        raise CliError(f"{exc}; nothing was changed", ExitCode.USAGE) from None
    except StateDirLocked as exc:
        raise CliError(f"{exc}: stop it before restoring; nothing was changed", ExitCode.FAILED) from None
    except StateDirError as exc:
        raise CliError(str(exc), ExitCode.FAILED) from None
    return _summary(summary, "restored")
