"""The local Unix socket: users on the head node call synergyd with no token; the kernel says who.

gRPC's Python server does not give a handler its connection's peer credentials (the auth
context of a Unix-socket call is empty: grpc/grpc#15511, #28755). So synergyd accepts on the
socket itself, reads each connection's SO_PEERCRED (the uid the kernel recorded at
connect), and relays the connection's bytes to a loopback port of the same gRPC server over
a connection of its own, remembering that connection's local address. A call that arrives
from exactly that address (`context.peer()`) is that Unix user's: while a connection lives,
the kernel keeps its address unique, and the entry goes when it closes. Every other call on
the loopback port is an ordinary one and needs a token, as on the main port.

How munge and the Docker socket work; the socket is mode 0666 (anyone local may connect:
who they are is what the kernel says, not what they claim).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pwd
import socket
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

from synergy.scheduler.daemon.logs import event

from synergy.scheduler.daemon.server import BindError

_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid
RELAY_CHUNK = 64 * 1024
#: sockaddr_un's sun_path holds 108 bytes, the last a NUL.
MAX_PATH_BYTES = 107


class SocketError(BindError):
    """The socket path cannot be used; one line naming it and the fix."""


def path_problem(path: Path) -> str:
    """Why the kernel will not bind `path` ("" = it will)."""
    size = len(os.fsencode(str(path)))
    return f"the path is {size} bytes; a Unix socket's is at most {MAX_PATH_BYTES}" if size > MAX_PATH_BYTES else ""


@dataclass(frozen=True)
class LocalPeer:
    """A process on this machine connected over the socket."""

    uid: int
    pid: int
    #: Its Unix user name ("" when the uid has no passwd entry).
    name: str


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the process that connected `sock` (a Unix stream socket), from the kernel."""
    return _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))


def unix_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def unreachable_because(path: Path) -> str:
    """Why other users cannot reach `path` ("" = they can): a parent dir without search permission."""
    for parent in path.parent.resolve().parents[::-1] + (path.parent.resolve(),):
        try:
            mode = parent.stat().st_mode
        except OSError:
            continue
        if not mode & stat.S_IXOTH:
            return f"{parent} is mode {stat.S_IMODE(mode):04o} (others may not enter it)"
    return ""


class UnixFront:
    """Accepts on the Unix socket and relays to the gRPC server's loopback port (see the module doc).

    Runs on the gRPC server's event loop; `peers` is read by the auth guard on the same loop.
    """

    def __init__(self, path: Path, backend_port: int, log: logging.Logger) -> None:
        self.path = Path(path)
        self._backend = ("127.0.0.1", backend_port)
        self._log = log
        #: gRPC peer string of a relay connection ("ipv4:127.0.0.1:PORT") -> who is behind it.
        self.peers: dict[str, LocalPeer] = {}
        self._server: asyncio.AbstractServer | None = None
        self._relays: set[asyncio.Task[None]] = set()
        self._inode = 0

    async def start(self) -> None:
        if path_problem(self.path):
            raise SocketError(f"--unix-socket {self.path}: {path_problem(self.path)}; pass a shorter one")
        self._clear_stale()
        try:
            self._server = await asyncio.start_unix_server(self._accept, path=str(self.path))
            os.chmod(self.path, 0o666)
        except OSError as exc:
            raise SocketError(f"--unix-socket {self.path}: cannot listen ({exc.strerror or exc})") from None
        self._inode = self.path.stat().st_ino

    def _clear_stale(self) -> None:
        """A socket file left by a daemon that died is removed; one a live daemon answers on is not."""
        try:
            mode = self.path.lstat().st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(mode):
            raise SocketError(f"--unix-socket {self.path} exists and is not a socket; move it or pick another path")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.path))
            except OSError:
                self.path.unlink(missing_ok=True)
                return
        raise SocketError(f"--unix-socket {self.path}: another process (a synergyd?) listens on it")

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._relays):
            task.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)
        try:
            if self.path.stat().st_ino == self._inode:  # still ours, not a successor's
                self.path.unlink()
        except OSError:
            pass
        self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._relays.add(task)
        try:
            await self._relay(reader, writer)
        except (OSError, asyncio.IncompleteReadError):
            pass  # either side went away: the other is closed below
        finally:
            self._relays.discard(task)
            writer.close()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pid, uid, _gid = peer_credentials(writer.get_extra_info("socket"))
        peer = LocalPeer(uid, pid, unix_name(uid))
        up_reader, up_writer = await asyncio.open_connection(*self._backend)
        host, port = up_writer.get_extra_info("sockname")[:2]
        key = f"ipv4:{host}:{port}"
        self.peers[key] = peer  # before the first byte: the call cannot arrive earlier
        event(self._log, "unix_socket.connected", logging.DEBUG, uid=uid, user=peer.name, pid=pid)
        try:
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self.peers.pop(key, None)
            up_writer.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(RELAY_CHUNK):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
