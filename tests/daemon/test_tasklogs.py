"""The daemon's log relay buffers and the agent's bounded reads (pure units)."""
from __future__ import annotations

from pathlib import Path

from synergy.agent import logrelay
from synergy.scheduler.daemon.live import TaskKey
from synergy.scheduler.daemon.tasklogs import RING_BYTES, LogChunk, TaskLogs, last_lines
from synergy.v1 import node_pb2

K = TaskKey(1, 1, 0)


def test_requests_only_while_wanted_then_from_the_end() -> None:
    logs = TaskLogs()
    assert logs.requests("n", 0.0) == []
    logs.want(K, "n", 0.0)
    (first,) = logs.requests("n", 1.0)
    assert first.tail and logs.requests("other", 1.0) == []
    logs.receive("n", [LogChunk(K, 100, b"abc\n", eof=True)])
    (nxt,) = logs.requests("n", 2.0)
    assert (nxt.tail, nxt.offset) == (False, 104)
    logs.receive("n", [LogChunk(K, 104, b"def\n", eof=True), LogChunk(K, 100, b"abc\n", eof=True)])  # stale dup
    assert bytes(logs.get(K).data) == b"abc\ndef\n" and logs.get(K).start == 100
    logs.receive("evil", [LogChunk(K, 108, b"forged", eof=True)])  # another node's answer is ignored
    assert bytes(logs.get(K).data) == b"abc\ndef\n"
    assert logs.requests("n", 100.0) == []  # interest lapsed


def test_ring_keeps_the_newest_bytes() -> None:
    logs = TaskLogs()
    logs.want(K, "n", 0.0)
    big = b"x" * (RING_BYTES - 10)
    logs.receive("n", [LogChunk(K, 0, big, eof=False)])
    logs.receive("n", [LogChunk(K, len(big), b"0123456789abcdef", eof=True)])
    log = logs.get(K)
    assert len(log.data) == RING_BYTES and log.data.endswith(b"abcdef") and log.end == len(big) + 16


def test_last_lines() -> None:
    assert last_lines(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert last_lines(b"a\nb\nc", 2) == b"b\nc"
    assert last_lines(b"a\n", 5) == b"a\n"


def test_agent_reads_are_bounded_and_say_what_is_missing(tmp_path: Path) -> None:
    f = tmp_path / "t.log"
    f.write_bytes(b"y" * (3 * logrelay.MAX_CHUNK_BYTES))
    ref = node_pb2.TaskRef(job_id=1, attempt=1, rank=0)
    reqs = [node_pb2.LogRequest(ref=ref, max_bytes=10**9, tail=True),
            node_pb2.LogRequest(ref=ref, offset=5, max_bytes=3),
            node_pb2.LogRequest(ref=node_pb2.TaskRef(job_id=9), tail=True)]
    tail, mid, missing = logrelay.answer(reqs, lambda r: f if r.job_id == 1 else None)
    assert len(tail.data) == logrelay.MAX_CHUNK_BYTES and tail.eof and tail.offset == 2 * logrelay.MAX_CHUNK_BYTES
    assert (mid.offset, mid.data, mid.eof) == (5, b"yyy", False)
    assert missing.error == "no such task on this node"
    assert len(logrelay.answer([reqs[1]] * 100, lambda r: f)) == logrelay.MAX_CHUNKS
