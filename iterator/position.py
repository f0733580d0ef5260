"""Where a job is in its data, and how to get back there without re-reading a batch.

The position is (epoch, batches consumed in the epoch, global samples consumed in the epoch)
plus the random states that decide the epoch's order. The order of an epoch is fixed when the
loader's index sampler starts iterating (RandomSampler draws its seed from its generator or
torch's global RNG right then), so `IndexCursor` records those states at that moment. To
resume, it puts them back, lets the sampler draw the same permutation, and drops the
already-consumed index batches *in the sampler*: no sample is loaded twice, worker processes
(num_workers > 0) only ever see the remaining indices.

Elastic resume: with `ElasticSampler` the position is a global sample index. Every rank of the
old world consumed the same number of batches, so ``global = batches * batch_size * world``;
the new world takes the same epoch permutation, drops its first `global` entries and re-splits
the rest rank-strided (``rest[rank::world]``), as DistributedSampler splits a whole epoch.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any, Iterator

import numpy as np
import torch


@dataclass
class Position:
    epoch: int = 0
    #: Batches this rank consumed in `epoch`.
    batches: int = 0
    #: Samples all ranks together consumed in `epoch` (the elastic resume point).
    global_samples: int = 0
    #: Job-wide step after which the checkpoint was taken.
    step: int = 0
    world_size: int = 1

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, int]) -> Position:
        return cls(**{k: int(v) for k, v in d.items() if k in cls.__dataclass_fields__})


def rng_states(*generators: torch.Generator | None) -> dict[str, Any]:
    """Python, numpy, torch and the given generators' states (None entries kept as None)."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "generators": [g.get_state() if g is not None else None for g in generators],
    }


def set_rng_states(states: dict[str, Any], *generators: torch.Generator | None) -> None:
    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    for g, s in zip(generators, states["generators"]):
        if g is not None and s is not None:
            g.set_state(s)


def _generator_of(sampler: Any) -> torch.Generator | None:
    inner = getattr(sampler, "sampler", None)  # BatchSampler wraps the sampler that shuffles
    g = getattr(sampler, "generator", None)
    if g is None and inner is not None:
        g = getattr(inner, "generator", None)
    return g if isinstance(g, torch.Generator) else None


class IndexCursor:
    """Wraps a loader's index sampler: records each epoch's starting RNG state, skips on resume.

    It runs in the main process (DataLoader iterates its index sampler there and sends indices
    to the workers) and only when an epoch starts, never per batch.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.generator = _generator_of(inner)
        #: States the current epoch's order was drawn from (saved in checkpoints).
        self.epoch_rng: dict[str, Any] | None = None
        #: Set by `resume`: consumed in the next epoch start, then cleared.
        self._pending: tuple[dict[str, Any], int, dict[str, Any] | None] | None = None

    def __len__(self) -> int:
        return len(self.inner)

    def __getattr__(self, name: str) -> Any:  # batch_size, drop_last, sampler... for DataLoader
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)

    def resume(self, epoch_rng: dict[str, Any] | None, skip: int, after: dict[str, Any] | None) -> None:
        """At the next epoch start: replay `epoch_rng`, drop `skip` index batches, then set `after`."""
        self._pending = (epoch_rng, skip, after) if epoch_rng is not None else None

    def __iter__(self) -> Iterator[Any]:
        # A generator: its body runs when the loader asks for the first index, the moment the
        # inner sampler draws the epoch's order, so the recorded state is the one it draws from.
        pending, self._pending = self._pending, None
        if pending is not None:
            set_rng_states(pending[0], self.generator)
        self.epoch_rng = rng_states(self.generator)
        it = iter(self.inner)
        if pending is None:
            yield from it
            return
        for _ in range(pending[1]):
            if next(it, _END) is _END:
                return
        first = next(it, _END)  # the inner sampler has drawn its order by now
        if pending[2] is not None:
            set_rng_states(pending[2], self.generator)
        if first is _END:
            return
        yield first
        yield from it


_END = object()


class ElasticSampler(torch.utils.data.Sampler[int]):
    """A DistributedSampler whose split survives a change of world size mid-epoch.

    The epoch's permutation depends only on (seed, epoch); `start` global samples of it are
    skipped and the rest split rank-strided. Call `set_epoch` like DistributedSampler; the
    iterator sets `start` on resume.
    """

    def __init__(self, dataset_len: int, rank: int = 0, world_size: int = 1, shuffle: bool = True,
                 seed: int = 0) -> None:
        self.n = dataset_len
        self.rank = rank
        self.world_size = world_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.start = 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.start = 0
        self.epoch = epoch

    def _rest(self) -> list[int]:
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.n, generator=g).tolist()
        else:
            order = list(range(self.n))
        rest = order[self.start:]
        usable = len(rest) - len(rest) % self.world_size  # equal shares, like drop_last=True
        return rest[:usable]

    def __iter__(self) -> Iterator[int]:
        rest = self._rest()
        self.start = 0  # a resume applies to one epoch only
        return iter(rest[self.rank::self.world_size])

    def __len__(self) -> int:
        return len(self._rest()) // self.world_size
