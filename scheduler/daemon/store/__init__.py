"""State stores behind one protocol (`StateStore`); `open_store` picks the backend."""

from __future__ import annotations

from pathlib import Path

from synergy.scheduler.daemon.store.base import StateStore
from synergy.scheduler.daemon.store.memory import MemoryStore
from synergy.scheduler.daemon.store.sqlite import OnDamaged, SqliteStore
from synergy.scheduler.statedir import DB_FILE


def open_store(
    state_dir: Path | None, on_damaged: OnDamaged | None = None, finished_in_memory: int | None = None
) -> StateStore:
    """SQLite in `state_dir` (checked at open; `finished_in_memory`: see SqliteStore), or
    memory when None (unit tests; every job stays in memory, there is nowhere else)."""
    if state_dir is None:
        return MemoryStore()
    return SqliteStore(Path(state_dir) / DB_FILE, on_damaged, finished_in_memory)


__all__ = ["StateStore", "MemoryStore", "SqliteStore", "OnDamaged", "open_store"]
