"""Job side of Synergy: the one-line `SynergyIterator` wrap (docs/iterator.md)."""

# ruff: noqa: E402

import os
import sys

from synergy.common.contract import GRPC_FORK_ENV

# gRPC's fork support (see GRPC_FORK_ENV). synergy-agent puts it in every job's environment;
# this covers a job started another way, as long as it imports this package before grpc.
# Linux only: epoll1 is Linux's poller (elsewhere gRPC's default stays).
if sys.platform.startswith("linux"):
    for _name, _value in GRPC_FORK_ENV:
        os.environ.setdefault(_name, _value)
    del _name, _value

from synergy.iterator.checkpoint import CheckpointError
from synergy.iterator.position import ElasticSampler, Position
from synergy.iterator.wrap import EXIT_PREEMPTED, SynergyIterator

__all__ = ["SynergyIterator", "ElasticSampler", "Position", "CheckpointError", "EXIT_PREEMPTED"]
