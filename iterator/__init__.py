"""Job side of Synergy: the one-line `SynergyIterator` wrap (docs/iterator.md)."""

# ruff: noqa: E402

import os

# DataLoader workers fork while the lease thread's gRPC channel is live; without gRPC's fork
# handlers a child can abort in gRPC's poller ("Check failed: next_worker->state == KICKED").
# Read when gRPC initialises, so it is set before this package first imports grpc.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "true")
os.environ.setdefault("GRPC_POLL_STRATEGY", "poll")

from synergy.iterator.checkpoint import CheckpointError
from synergy.iterator.position import ElasticSampler, Position
from synergy.iterator.wrap import EXIT_PREEMPTED, SynergyIterator

__all__ = ["SynergyIterator", "ElasticSampler", "Position", "CheckpointError", "EXIT_PREEMPTED"]
