"""Job side of Synergy: the one-line `SynergyIterator` wrap (docs/iterator.md)."""

from synergy.iterator.checkpoint import CheckpointError
from synergy.iterator.position import ElasticSampler, Position
from synergy.iterator.wrap import EXIT_PREEMPTED, SynergyIterator

__all__ = ["SynergyIterator", "ElasticSampler", "Position", "CheckpointError", "EXIT_PREEMPTED"]
