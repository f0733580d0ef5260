"""Regression tests use the daemon tests' fixtures (start_daemon, start_agent), not copies of them."""

from daemon.conftest import start_agent, start_daemon  # noqa: F401
