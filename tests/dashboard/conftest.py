"""Fixtures of the dashboard tests: a live cluster (live_cluster.py) and where screenshots go."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import pytest
import live_cluster
from live_cluster import LiveCluster
from agent_harness import is_root_with_v1


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Screenshots: $SYNERGY_TEST_ARTIFACTS (read here, before the per-test environment is
    cleaned of SYNERGY_* variables) or a pytest tmp dir."""
    chosen = os.environ.get("SYNERGY_TEST_ARTIFACTS")
    path = Path(chosen) if chosen else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveCluster]:
    if not is_root_with_v1():
        pytest.skip("the live cluster's agents need root and cgroup v1")
    cluster = live_cluster.start(tmp_path_factory.mktemp("live"))
    yield cluster
    cluster.stop()
