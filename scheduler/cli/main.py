"""`synergy`: the user's command line for synergyd (docs/cli.md).

main() is the only place that prints errors or exits: commands raise CliError and return
Result, so every failure is one line on stderr with a documented exit code, and every
command supports --json the same way.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Sequence

from synergy.scheduler.cli.commands import admin, cluster, jobs, logs, nodes, users
from synergy.scheduler.cli.connection import DEFAULT_TIMEOUT_S, Client, resolve_target
from synergy.scheduler.cli.errors import CliError, ExitCode
from synergy.scheduler.cli.output import emit

PROG = "synergy"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: `synergy: error: ... (see 'synergy submit --help')`."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{PROG}: error: {message} (see '{self.prog} --help')\n")
        sys.exit(ExitCode.USAGE)


def add_connection_options(p: argparse.ArgumentParser, suppress: bool) -> None:
    """Options every command takes, before or after the command name.

    Sub-commands get them with SUPPRESS defaults so that `synergy --json jobs` is not
    overwritten by the sub-parser's own default.
    """
    g = p.add_argument_group("connection and output")
    extra = {"default": argparse.SUPPRESS} if suppress else {}
    g.add_argument("--address", metavar="HOST:PORT", **extra,
                   help="synergyd's gRPC address (default: $SYNERGY_ADDRESS, else STATE_DIR/address)")
    g.add_argument("--state-dir", metavar="DIR", **extra,
                   help="synergyd's state dir on this machine, to find its socket, address and admin token "
                        "(default: $SYNERGY_STATE_DIR, else ~/.local/state/synergy)")
    g.add_argument("--socket", metavar="PATH", **extra,
                   help="synergyd's Unix socket: you are your Unix user, no token needed (default: "
                        "$SYNERGY_SOCKET, else STATE_DIR/synergyd.sock when it exists and no address or "
                        "token is given)")
    g.add_argument("--token-file", metavar="FILE", **extra,
                   help="file holding your user token, from 'synergy admin users add' (default: $SYNERGY_TOKEN, "
                        "else STATE_DIR/admin.token)")
    g.add_argument("--tls-ca", metavar="FILE", **extra,
                   help="PEM CA to verify synergyd's TLS certificate (default: $SYNERGY_TLS_CA; plaintext if unset)")
    g.add_argument("--tls-cert", metavar="FILE", **extra,
                   help="PEM client certificate whose CN is your user name, for synergyd's mutual-TLS port "
                        "(with --tls-key; default: $SYNERGY_TLS_CERT)")
    g.add_argument("--tls-key", metavar="FILE", **extra,
                   help="PEM key of --tls-cert (default: $SYNERGY_TLS_KEY)")
    g.add_argument("--timeout", type=float, metavar="SECONDS", **(extra or {"default": DEFAULT_TIMEOUT_S}),
                   help=f"give up on synergyd after this long (default {DEFAULT_TIMEOUT_S:g})")
    g.add_argument("--json", action="store_true", **(extra or {"default": False}),
                   help="print one JSON document on stdout instead of tables (for scripts)")


def _add_to_commands(parser: argparse.ArgumentParser) -> None:
    """Give every (nested) sub-command the connection options, after its own flags."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                add_connection_options(child, suppress=True)
                _add_to_commands(child)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Submit and manage jobs on a Synergy GPU cluster (talks to synergyd over gRPC).",
        epilog="exit codes: 0 ok; 1 synergyd refused (not found, permission, conflict); "
               "2 bad input (flags, job spec, invalid argument); 3 synergyd unreachable. "
               "Run 'synergy COMMAND --help' for a command's flags; the job spec is in docs/cli.md.")
    add_connection_options(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    jobs.register(sub)
    logs.register(sub)
    nodes.register(sub)
    cluster.register(sub)
    admin.register(sub)
    users.register(sub)
    _add_to_commands(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    # `synergy submit ... -- python train.py --lr 0.1`: what follows '--' is the job's argv,
    # taken verbatim so that its own flags never reach argparse.
    trailing: list[str] | None = None
    if "--" in args_list and "submit" in args_list[: args_list.index("--")]:
        cut = args_list.index("--")
        args_list, trailing = args_list[:cut], args_list[cut + 1:]
    parser = build_parser()
    try:
        args = parser.parse_args(args_list)
    except SystemExit as exc:  # --help (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    if trailing is not None:
        args.argv_command = trailing
    try:
        if args.timeout is not None and not args.timeout > 0:
            raise CliError("--timeout must be a positive number of seconds", ExitCode.USAGE)

        def connect() -> Client:
            target = resolve_target(args.address, args.state_dir, args.token_file, args.tls_ca,
                                    socket_path=args.socket, tls_cert=args.tls_cert, tls_key=args.tls_key)
            return Client(target, args.timeout)

        result = args.func(args, connect)
        emit(result, args.json)
    except CliError as exc:
        sys.stderr.write(f"{PROG}: error: {exc.message}\n")
        return exc.code
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        return 130
    except BrokenPipeError:  # `synergy jobs | head`: the reader left; not an error
        # Point stdout at /dev/null so the interpreter's final flush does not complain.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
