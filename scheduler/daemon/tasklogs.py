"""`synergy logs`: task output relayed from agents on their heartbeats, kept in memory.

Agents only dial out (no port on a GPU node, no daemon-to-agent connection to secure or to
route through a NAT), so the daemon cannot read a log file when a user asks. Instead:

1. `TailLogs` marks the task as *wanted* for a few seconds (renewed while a client follows);
2. the next heartbeat reply of the task's node carries a `LogRequest` (the last bytes of the
   file the first time, then from the end of what the daemon holds);
3. the agent answers with a bounded `LogChunk` in its following heartbeat;
4. the daemon appends it to a small per-task ring buffer, which `TailLogs` serves from.

Latency is one to two heartbeat intervals; the cost is nothing while nobody is reading, and
bounded (LOG_CHUNK_BYTES per wanted task per heartbeat, RING_BYTES per buffered task, at most
MAX_BUFFERED_TASKS buffers) while someone is. Live state only: a restarted daemon re-asks.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from typing import Mapping

from synergy.scheduler.daemon.live import NodeLive, ObservedTask, TaskKey

#: Bytes one LogChunk may carry (the agent caps its reads at the same figure).
LOG_CHUNK_BYTES = 64 * 1024
#: LogChunks one heartbeat may carry.
MAX_LOG_CHUNKS = 64
#: Bytes of output kept per task (the oldest are dropped first).
RING_BYTES = 256 * 1024
#: Task buffers kept at most (least recently read dropped first).
MAX_BUFFERED_TASKS = 256
#: A reader's interest lasts this long after its last poll.
WANTED_S = 10.0


@dataclass(frozen=True)
class LogRequest:
    key: TaskKey
    offset: int
    max_bytes: int
    tail: bool


@dataclass(frozen=True)
class LogChunk:
    key: TaskKey
    offset: int
    data: bytes
    eof: bool
    error: str = ""


@dataclass
class TaskLog:
    """The held part of one task's log file: bytes [start, start + len(data))."""

    node_id: str
    start: int = 0
    data: bytearray = field(default_factory=bytearray)
    #: Any answer came back (until then a reader waits).
    answered: bool = False
    eof: bool = False
    error: str = ""
    wanted_until: float = 0.0
    #: A request went out while the node reported the task exited ...
    asked_after_exit: bool = False
    #: ... and its answer reached the end of the file: nothing more will come.
    drained: bool = False

    @property
    def end(self) -> int:
        return self.start + len(self.data)


@dataclass
class TaskLogs:
    """Per-task ring buffers and who wants what (callers hold the daemon's lock)."""

    logs: OrderedDict[TaskKey, TaskLog] = field(default_factory=OrderedDict)

    def want(self, key: TaskKey, node_id: str, now: float, refresh: bool = True) -> TaskLog:
        """Mark `key` wanted; after a lapse of interest (and `refresh`: its node still reports
        it) the held bytes may be stale, so the next request is a fresh tail."""
        log = self.logs.get(key)
        if log is None or log.node_id != node_id:
            log = self.logs[key] = TaskLog(node_id)
        elif refresh and log.wanted_until < now:
            log.answered = False
        self.logs.move_to_end(key)
        while len(self.logs) > MAX_BUFFERED_TASKS:
            self.logs.popitem(last=False)
        log.wanted_until = now + WANTED_S
        return log

    def get(self, key: TaskKey) -> TaskLog | None:
        return self.logs.get(key)

    def holds_back(self, key: TaskKey, now: float) -> bool:
        """An exited task a reader follows stays reported (not forgotten) until its file
        has been read to the end after the exit, so a follower sees its last lines."""
        log = self.logs.get(key)
        return log is not None and log.wanted_until >= now and not log.drained

    def requests(self, node_id: str, now: float, exited: frozenset[TaskKey] = frozenset()) -> list[LogRequest]:
        """What to ask `node_id` for in this heartbeat reply (`exited`: tasks it reports exited)."""
        out = []
        for key, log in self.logs.items():
            if log.node_id != node_id or log.wanted_until < now or log.drained or len(out) >= MAX_LOG_CHUNKS:
                continue
            if key in exited:
                log.asked_after_exit = True
            if not log.answered:
                out.append(LogRequest(key, 0, LOG_CHUNK_BYTES, tail=True))
            else:
                out.append(LogRequest(key, log.end, LOG_CHUNK_BYTES, tail=False))
        return out

    def receive(self, node_id: str, chunks: list[LogChunk]) -> None:
        """Append answers; chunks for tasks nobody asked this node about are ignored."""
        for c in chunks:
            log = self.logs.get(c.key)
            if log is None or log.node_id != node_id:
                continue
            log.eof, log.error = c.eof, c.error
            log.drained = log.drained or (log.asked_after_exit and (c.eof or bool(c.error)))
            if c.error:
                log.answered = True
                continue
            if not log.answered or c.offset != log.end:  # first answer, or a gap: restart there
                if log.answered and c.offset < log.end:
                    continue  # a stale duplicate of bytes already held
                log.start, log.data = c.offset, bytearray()
            log.answered = True
            log.data += c.data
            if len(log.data) > RING_BYTES:
                cut = len(log.data) - RING_BYTES
                del log.data[:cut]
                log.start += cut


def find_task(nodes: Mapping[str, NodeLive], key: TaskKey) -> tuple[str, ObservedTask] | None:
    """(node id, task) for a task some node reports now, exited or not."""
    for node_id, n in nodes.items():
        t = n.tasks.get(key)
        if t is not None:
            return node_id, t
    return None


def last_lines(data: bytes, lines: int) -> bytes:
    """The last `lines` lines of `data` (a trailing newline does not count as an empty line)."""
    if lines <= 0:
        return b""
    body = data[:-1] if data.endswith(b"\n") else data
    cut = len(body)
    for _ in range(lines):
        cut = body.rfind(b"\n", 0, cut)
        if cut < 0:
            return data
    return data[cut + 1:]
