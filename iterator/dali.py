"""DALI support for `SynergyIterator`: where a `DALIGenericIterator` is, and how to get back there.

A DALI iterator is not a DataLoader: there is no index sampler to skip in, and its order is
decided inside the pipeline (the reader's shuffling, the random operators' seeds), advancing
from epoch to epoch. Two ways to resume it, chosen per iterator:

* **DALI checkpoints (exact, cheap).** A pipeline built with ``enable_checkpointing=True``
  records its readers' and random operators' states. At a stop the wrap saves
  ``loader.checkpoints()`` beside its own position; on relaunch the script passes
  ``checkpoint=resume_checkpoint()`` to the pipeline, DALI rebuilds it at the next unconsumed
  batch, and the wrap skips nothing. This is what `examples/dali/train.py` does.
* **Read and drop (any deterministic pipeline).** Without checkpointing the pipeline restarts
  from its first epoch, so the wrap reads and drops every batch the job already trained:
  whole epochs (a DALI reader's shuffle advances per epoch) and then the consumed part of the
  checkpoint's epoch. Correct whenever the pipeline's order is a function of its seed, but it
  decodes everything again; the wrap says so in one line.

DALI iterators also need a `reset()` between epochs: their own ``__iter__`` does it when the
wrap starts the next epoch, also right after a restore. A checkpoint taken after an epoch's
last batch restores an iterator at that epoch's end (`at_epoch_end`): the wrap gives the
script's resumed epoch no batches, and the next one resets and starts afresh.

The DALI import is never forced: `DaliState.of` only recognises an iterator when the script
has already imported DALI's iterator module itself.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Mapping

from synergy.common.contract import JobEnv
from synergy.iterator import checkpoint

#: The key of the DALI pipelines' checkpoints in a rank's checkpoint file.
KEY = "dali"
_BASE_MODULE = "nvidia.dali.plugin.base_iterator"


def resume_checkpoint(pipeline: int = 0, environ: Mapping[str, str] | None = None) -> str | bytes | None:
    """The DALI checkpoint to build pipeline number `pipeline` from, or None to start afresh.

    Pass it as the pipeline's ``checkpoint=`` (with ``enable_checkpointing=True``). None when the
    script runs standalone, on a first attempt, or when the checkpoint holds no DALI state (the
    wrap then falls back to read and drop). A missing or corrupt checkpoint raises
    `CheckpointError`; the wrap reports the same error when it loads the checkpoint itself.
    """
    env_map = sys.modules["os"].environ if environ is None else environ
    try:
        env = JobEnv.from_env(env_map)
    except ValueError:
        return None  # standalone (or a malformed contract, which the wrap reports)
    if not env.resume_checkpoint:
        return None
    saved = checkpoint.load(env.resume_checkpoint, env.rank).get(KEY)
    if not saved or pipeline >= len(saved):
        return None
    return saved[pipeline]  # type: ignore[no-any-return]


@dataclass
class DaliState:
    """The wrap's view of one DALI iterator (`loader`): its checkpoints and epoch boundaries."""

    loader: Any

    @classmethod
    def of(cls, loader: Any) -> DaliState | None:
        """A `DaliState` when `loader` is a DALI framework iterator, else None."""
        base = sys.modules.get(_BASE_MODULE)
        cls_ = getattr(base, "_DaliBaseIterator", None)
        if cls_ is None or not isinstance(loader, cls_):
            return None
        return cls(loader)

    @property
    def checkpointing(self) -> bool:
        return bool(getattr(self.loader, "_enable_checkpointing", False))

    @property
    def restored(self) -> bool:
        """True when every pipeline was built from a checkpoint: DALI itself is positioned."""
        pipes = getattr(self.loader, "_pipes", [])
        return bool(pipes) and all(p.is_restored_from_checkpoint for p in pipes)

    def checkpoints(self) -> list[str | bytes] | None:
        """The pipelines' checkpoints at the last batch handed out (None without checkpointing)."""
        return list(self.loader.checkpoints()) if self.checkpointing else None

    @property
    def at_epoch_end(self) -> bool:
        """True when the iterator has handed out its whole epoch (its next `iter()` resets it).

        A checkpoint taken right after an epoch's last batch restores to this state: the wrap
        then gives the script an empty epoch instead of letting DALI start the next one early."""
        it = self.loader
        if getattr(it, "_first_batch", None) is not None:
            return False  # a batch prepared at construction is still to come (and is counted)
        return 0 < getattr(it, "_size", -1) <= getattr(it, "_counter", 0)

    def drop_epoch(self) -> int:
        """Read and drop one whole epoch (a resume without a DALI checkpoint); returns batches read."""
        if self.restored:
            return 0
        return sum(1 for _ in self.loader)
