"""User commands: `synergy whoami`, and `synergy admin users add|list|revoke` (admins).

Who a user is comes from how they connect (docs/daemon.md, "Users and security"): on
synergyd's machine the Unix socket needs no token; elsewhere a token from `users add`, or a
client certificate whose CN names a user added with --no-token.
"""
from __future__ import annotations

import argparse
from typing import Callable

from rich.text import Text

from synergy.scheduler.cli.connection import Client
from synergy.scheduler.cli.output import Result, fmt_time, kv_table, table, to_plain
from synergy.v1 import admin_pb2

Connect = Callable[[], Client]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("whoami", help="who synergyd takes you for",
                       description="Show the user name synergyd knows you by (your jobs' user), your role "
                                   "(user or admin) and how you were authenticated.")
    p.set_defaults(func=whoami)


def register_admin(actions: argparse._SubParsersAction) -> None:
    """`synergy admin users ...` (called by admin.register)."""
    p = actions.add_parser("users", help="add, list or revoke users (admins only)",
                           description="Manage who may use synergyd. Users of synergyd's machine need no entry "
                                       "(the Unix socket names them; they get the role user); add one to give "
                                       "them a token for remote use, a certificate identity, or the admin role.")
    users = p.add_subparsers(dest="users_action", metavar="{add,list,revoke}", required=True)
    add = users.add_parser("add", help="add a user and print their token (once)",
                           description="Add a user (or re-enable a revoked one). Their token is printed once "
                                       "and stored only as its SHA-256: hand it to them (they pass it with "
                                       "--token-file or SYNERGY_TOKEN).")
    add.add_argument("name", metavar="NAME", help="user name: their Unix name, or the CN of their client certificate")
    add.add_argument("--role", choices=("user", "admin"), default="user",
                     help="user: their own jobs, nodes and status; admin: everything (default user)")
    add.add_argument("--no-token", action="store_true",
                     help="issue no token (the user connects over the Unix socket or with a client certificate)")
    add.set_defaults(func=users_add)
    ls = users.add_parser("list", help="list the users synergyd knows")
    ls.set_defaults(func=users_list)
    revoke = users.add_parser("revoke", help="revoke a user: every later call of theirs is refused",
                              description="Revoke a user: their token stops working at once, and so do their "
                                          "socket and certificate calls; their jobs stay. 'users add NAME' "
                                          "re-enables them with a new token.")
    revoke.add_argument("name", metavar="NAME", help="the user's name")
    revoke.set_defaults(func=users_revoke)


def whoami(args: argparse.Namespace, connect: Connect) -> Result:
    with connect() as client:
        me = client.call("WhoAmI", admin_pb2.WhoAmIRequest())
    return Result(to_plain(me), Text(f"{me.user} ({me.role}, via {me.via})"))


def users_add(args: argparse.Namespace, connect: Connect) -> Result:
    req = admin_pb2.AddUserRequest(name=args.name, role=args.role, no_token=args.no_token)
    with connect() as client:
        res = client.call("AddUser", req)
    rows = [("user", res.user.name), ("role", res.user.role)]
    if res.token:
        rows.append(("token", res.token))
        rows.append(("note", "shown once: give it to the user (--token-file FILE or SYNERGY_TOKEN)"))
    return Result(to_plain(res), kv_table(rows))


def users_list(args: argparse.Namespace, connect: Connect) -> Result:
    with connect() as client:
        users = list(client.call("ListUsers", admin_pb2.ListUsersRequest()).users)
    rows = [(u.name, u.role, "yes" if u.has_token else "no", f"{fmt_time(u.created_at_unix_s)} by {u.created_by}",
             f"revoked {fmt_time(u.revoked_at_unix_s)} by {u.revoked_by}" if u.revoked_at_unix_s else "active")
            for u in users]
    view = table(None, ["NAME", "ROLE", "TOKEN", "ADDED", "STATE"], rows) if rows else Text("no users")
    return Result({"users": [to_plain(u) for u in users]}, view)


def users_revoke(args: argparse.Namespace, connect: Connect) -> Result:
    with connect() as client:
        user = client.call("RevokeUser", admin_pb2.RevokeUserRequest(name=args.name)).user
    return Result(to_plain(user), Text(f"revoked {user.name} ({user.role}) at {fmt_time(user.revoked_at_unix_s)}"))
