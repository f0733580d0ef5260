"""State stores behind one protocol (`StateStore`); `open_store` picks the backend."""

from __future__ import annotations

from pathlib import Path

from synergy.scheduler.daemon.store.base import StateStore
from synergy.scheduler.daemon.store.memory import MemoryStore
from synergy.scheduler.daemon.store.sqlite import SqliteStore, StoreError

DB_NAME = "synergyd.sqlite"


def open_store(state_dir: Path | None) -> StateStore:
    """SQLite in `state_dir`, or memory when None (unit tests, simulations)."""
    if state_dir is None:
        return MemoryStore()
    return SqliteStore(Path(state_dir) / DB_NAME)


__all__ = ["StateStore", "MemoryStore", "SqliteStore", "StoreError", "open_store", "DB_NAME"]
