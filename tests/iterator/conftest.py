import sys
from pathlib import Path
from typing import Callable, Iterator

import pytest

here = Path(__file__).parent
sys.path.insert(0, str(here))
sys.path.insert(0, str(here.parent / "agent"))  # agent_harness: the real synergy-agent process

from job_cluster import Cluster, start_cluster  # noqa: E402


@pytest.fixture
def make_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """`make_cluster(*daemon_flags, gpus=1)`: synergyd + agents n1 and n2 (job_cluster.py), stopped at the end."""
    started: list[Cluster] = []

    def make(*daemon_flags: str, gpus: int = 1) -> Cluster:
        c = start_cluster(tmp_path, *daemon_flags, gpus=gpus)
        started.append(c)
        return c

    yield make
    for c in started:
        c.stop()


@pytest.fixture
def cluster(make_cluster: Callable[..., Cluster]) -> Cluster:
    return make_cluster()
