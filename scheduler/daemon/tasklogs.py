"""`synergy logs`: task output relayed from agents on their heartbeats, kept in memory.

Agents only dial out (no port on a GPU node, no daemon-to-agent connection to secure or to
route through a NAT), so the daemon cannot read a log file when a user asks. Instead:

1. `TailLogs` marks the task as *wanted* for a few seconds (renewed while a client follows);
2. the next heartbeat reply of the task's node carries `LogRequest`s: the last bytes of the
   file the first time and for every `synergy logs` without `-f` (a tail is answered from
   the end of the file, never from what the buffer held), then up to CATCH_UP_CHUNKS
   consecutive chunks from the end of what the daemon holds. A follower that is still
   behind after them (the job writes faster than that) jumps to the file's end: the skipped
   bytes are announced in the stream (`[synergy: N bytes of output skipped ...]`), never
   relayed late;
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
#: Consecutive chunks asked per followed task and heartbeat before it jumps to the end.
CATCH_UP_CHUNKS = 4
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
    #: The next request is a tail read (a new reader, a fresh `logs -n`, or a follower that
    #: fell behind or whose file shrank), and one is out: its answer restarts the buffer.
    tail_next: bool = True
    tail_out: bool = False
    #: Tail answers received (a fresh `logs -n` waits for the next one).
    tails: int = 0
    #: Bumped whenever the held bytes stop following the ones before (a jump to the end, a
    #: rotated file); `gap` says what a follower missed there.
    epoch: int = 0
    gap: str = ""

    @property
    def end(self) -> int:
        return self.start + len(self.data)


@dataclass
class TaskLogs:
    """Per-task ring buffers and who wants what (callers hold the daemon's lock)."""

    logs: OrderedDict[TaskKey, TaskLog] = field(default_factory=OrderedDict)

    def want(self, key: TaskKey, node_id: str, now: float, refresh: bool = True, fresh: bool = False) -> TaskLog:
        """Mark `key` wanted; after a lapse of interest (and `refresh`: its node still reports
        it) the held bytes may be stale, so the next request is a fresh tail; `fresh` asks
        for one anyway (a `logs -n` reader then waits for `tails` to grow)."""
        log = self.logs.get(key)
        if log is None or log.node_id != node_id:
            log = self.logs[key] = TaskLog(node_id)
        elif refresh and log.wanted_until < now:
            log.answered = False
            log.tail_next = True
        elif fresh:
            log.tail_next = True
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
            if not log.answered or log.tail_next or log.tail_out:  # an unanswered tail is asked again
                out.append(LogRequest(key, 0, LOG_CHUNK_BYTES, tail=True))
                log.tail_next, log.tail_out = False, True
            else:
                room = min(CATCH_UP_CHUNKS, MAX_LOG_CHUNKS - len(out))
                out.extend(LogRequest(key, log.end + i * LOG_CHUNK_BYTES, LOG_CHUNK_BYTES, tail=False)
                           for i in range(room))
        return out

    def receive(self, node_id: str, chunks: list[LogChunk]) -> None:
        """Append answers (in the order asked); chunks for tasks nobody asked this node about are ignored."""
        for c in chunks:
            log = self.logs.get(c.key)
            if log is None or log.node_id != node_id:
                continue
            log.eof, log.error = c.eof, c.error
            log.drained = log.drained or (log.asked_after_exit and (c.eof or bool(c.error)))
            if log.tail_out:  # the answer to a tail request
                log.tail_out = False
                log.tails += 1
                if not c.error:
                    self._restart(log, c)
                log.answered = True
                continue
            if c.error:
                log.answered = True
                continue
            if not log.answered:
                continue  # an older request's answer, while a fresh tail is awaited
            if c.offset == log.end:
                self._append(log, c.data)
                if not c.eof:
                    log.tail_next = True  # still behind after what was asked: jump to the end next time
            elif c.offset < log.end and not c.data and c.eof:
                log.tail_next = True  # the file is shorter than what we hold: rotated
            # else a stale duplicate, or a read past a shorter answer before it: nothing to keep

    def _restart(self, log: TaskLog, c: LogChunk) -> None:
        """A tail answer: extend the buffer when it follows on, else start again there."""
        if log.answered and log.start <= c.offset <= log.end <= c.offset + len(c.data):  # the same file, on
            self._append(log, c.data[log.end - c.offset:])
            return
        if log.answered and log.data:
            log.epoch += 1
            log.gap = (f"{c.offset - log.end} bytes of output skipped: the job writes faster than "
                       "they are relayed" if c.offset > log.end else "the log file was rotated or truncated")
        log.start, log.data = c.offset, bytearray(c.data)

    @staticmethod
    def _append(log: TaskLog, data: bytes) -> None:
        log.data += data
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
