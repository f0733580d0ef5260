"""The daemon's log relay buffers and the agent's bounded reads (pure units)."""
from __future__ import annotations

from pathlib import Path

from synergy.agent import logrelay
from synergy.scheduler.daemon.live import TaskKey
from synergy.scheduler.daemon.tasklogs import (CATCH_UP_CHUNKS, LOG_CHUNK_BYTES, RING_BYTES, LogChunk, TaskLogs,
                                               last_lines)
from synergy.v1 import node_pb2

K = TaskKey(1, 1, 0)


def test_requests_only_while_wanted_then_from_the_end() -> None:
    logs = TaskLogs()
    assert logs.requests("n", 0.0) == []
    logs.want(K, "n", 0.0)
    (first,) = logs.requests("n", 1.0)
    assert first.tail and logs.requests("other", 1.0) == []
    logs.receive("n", [LogChunk(K, 100, b"abc\n", eof=True)])
    nxt = logs.requests("n", 2.0)
    assert [(r.tail, r.offset) for r in nxt] == [(False, 104 + i * LOG_CHUNK_BYTES) for i in range(CATCH_UP_CHUNKS)]
    logs.receive("n", [LogChunk(K, 104, b"def\n", eof=True), LogChunk(K, 100, b"abc\n", eof=True)])  # stale dup
    assert bytes(logs.get(K).data) == b"abc\ndef\n" and logs.get(K).start == 100
    logs.receive("evil", [LogChunk(K, 108, b"forged", eof=True)])  # another node's answer is ignored
    assert bytes(logs.get(K).data) == b"abc\ndef\n"
    assert logs.requests("n", 100.0) == []  # interest lapsed


def test_ring_keeps_the_newest_bytes() -> None:
    logs = TaskLogs()
    logs.want(K, "n", 0.0)
    logs.requests("n", 0.0)
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


def _following(end: int = 100) -> TaskLogs:
    logs = TaskLogs()
    logs.want(K, "n", 0.0)
    logs.requests("n", 0.0)
    logs.receive("n", [LogChunk(K, 0, b"a" * end, eof=True)])
    return logs


def test_a_fresh_reader_gets_the_end_of_the_file_not_the_held_bytes() -> None:
    """Issue 15 (5): `logs -n 1` every few seconds was answered from a buffer that advanced
    64 KiB per heartbeat, so it showed lines 15-20 s old."""
    logs = _following()
    before = logs.get(K).tails
    logs.want(K, "n", 1.0, fresh=True)
    logs.receive("n", [LogChunk(K, 100, b"old\n", eof=False)])  # an earlier request's answer
    (req,) = logs.requests("n", 1.0)
    assert req.tail  # asked from the end of the file, not from what is held
    assert logs.get(K).tails == before
    logs.receive("n", [LogChunk(K, 9_000_000, b"newest line\n", eof=True)])
    log = logs.get(K)
    assert log.tails == before + 1 and bytes(log.data).endswith(b"newest line\n") and log.end == 9_000_012


def test_a_follower_that_falls_behind_jumps_to_the_end_and_says_what_it_skipped() -> None:
    """Issue 15 (5): `logs -f` relayed 64 KiB per heartbeat of a 1.5 MB/s job and never caught up."""
    logs = _following()
    asked = logs.requests("n", 1.0)
    chunk = b"b" * LOG_CHUNK_BYTES
    logs.receive("n", [LogChunk(K, r.offset, chunk, eof=False) for r in asked])  # still more behind
    (jump,) = logs.requests("n", 2.0)
    assert jump.tail
    logs.receive("n", [LogChunk(K, 5_000_000, b"latest\n", eof=True)])
    log = logs.get(K)
    assert log.epoch == 1 and log.start == 5_000_000 and "bytes of output skipped" in log.gap
    assert [r.tail for r in logs.requests("n", 3.0)] == [False] * CATCH_UP_CHUNKS  # caught up: follow on


def test_a_rotated_log_is_read_again_from_its_end() -> None:
    logs = _following(end=5000)
    logs.requests("n", 1.0)
    logs.receive("n", [LogChunk(K, 40, b"", eof=True)])  # the file is shorter than what is held
    (req,) = logs.requests("n", 2.0)
    assert req.tail
    logs.receive("n", [LogChunk(K, 0, b"[synergy: log reached its cap ...]\nnew\n", eof=True)])
    assert logs.get(K).epoch == 1 and "rotated" in logs.get(K).gap
