"""The real Slurm cluster the Slurm backend's tests run against (slurm_cluster.py).

One cluster per test session (a start takes seconds); each test gets it back clean: no jobs,
every node resumed. Where Slurm is not installed (or this is not root on cgroup v1) none of
them is collected and the run's summary says so in one line; .ci/run installs it.
"""

from __future__ import annotations

import shutil
import sys
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

here = Path(__file__).parent
# The iterator tests' job helpers (job_cluster.py) and the agent harness they import.
sys.path[:0] = [str(here.parent / "iterator"), str(here.parent / "agent")]

from slurm_cluster import SlurmCluster, missing  # noqa: E402

WHY_NOT = missing()
#: Where Slurm cannot run, nothing here is collected, and tests/conftest.py's summary says so in one line.
collect_ignore_glob = ["test_*.py"] if WHY_NOT else []


@pytest.fixture(scope="session")
def slurm_session() -> Iterator[SlurmCluster]:
    # Not under pytest's tmp dirs: munged refuses a socket whose parent dirs are not
    # world-searchable, and pytest's are 0700.
    root = Path(tempfile.mkdtemp(prefix="synergy-slurm-"))
    root.chmod(0o755)
    cluster = SlurmCluster(root)
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        cluster.stop()
        pytest.fail(f"the test Slurm cluster did not start: {exc} (logs in {cluster.root / 'log'})")
    yield cluster
    cluster.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The session's cluster, as a test leaves it cleaned: jobs cancelled, nodes resumed."""
    yield slurm_session
    slurm_session.reset()
