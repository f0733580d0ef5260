"""The agent's half of `synergy logs`: answer the daemon's LogRequests with bounded chunks.

The daemon asks in a heartbeat reply (`HeartbeatResponse.log_requests`); the agent reads the
requested byte range of the task's log file and sends it in its next heartbeat
(`HeartbeatRequest.log_chunks`). Agents only dial out, so this is the whole channel; see
docs/daemon.md ("Task logs ride on heartbeats"). Reads are bounded (MAX_CHUNK_BYTES per
chunk, MAX_CHUNKS per heartbeat) so a chatty job cannot inflate the agent's heartbeats.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

from synergy.v1 import node_pb2

#: Bytes per chunk (the daemon refuses larger ones) and chunks per heartbeat.
MAX_CHUNK_BYTES = 64 * 1024
MAX_CHUNKS = 64


def read_range(path: Path, offset: int, max_bytes: int, tail: bool) -> tuple[int, bytes, bool]:
    """(offset of the first byte, bytes, reached the end) of one bounded read of `path`."""
    max_bytes = max(0, min(max_bytes or MAX_CHUNK_BYTES, MAX_CHUNK_BYTES))
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = max(0, size - max_bytes) if tail else min(offset, size)
        f.seek(start)
        data = f.read(max_bytes)
    return start, data, start + len(data) >= size


def answer(requests: Iterable[node_pb2.LogRequest],
           log_path: Callable[[node_pb2.TaskRef], Path | None]) -> list[node_pb2.LogChunk]:
    """One LogChunk per request (at most MAX_CHUNKS); `log_path` finds a task's file (None: no such task)."""
    out = []
    for req in list(requests)[:MAX_CHUNKS]:
        ref = node_pb2.TaskRef(job_id=req.ref.job_id, attempt=req.ref.attempt, rank=req.ref.rank)
        path = log_path(ref)
        if path is None:
            out.append(node_pb2.LogChunk(ref=ref, error="no such task on this node"))
            continue
        try:
            start, data, eof = read_range(path, req.offset, req.max_bytes, req.tail)
        except FileNotFoundError:
            out.append(node_pb2.LogChunk(ref=ref, offset=0, eof=True))  # nothing written yet
            continue
        except OSError as exc:
            out.append(node_pb2.LogChunk(ref=ref, error=f"cannot read {path}: {exc.strerror or exc}"))
            continue
        out.append(node_pb2.LogChunk(ref=ref, offset=start, data=data, eof=eof))
    return out
