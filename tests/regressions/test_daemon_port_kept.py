"""Issue 15 (6): a synergyd restarted with `--port 0` got a new port, which agents and jobs
(they read the address once) could not find. The ports the last run picked are kept in the
state dir (`ports`) and bound again when free; only a taken port gives a new one.
"""

from __future__ import annotations

import socket
from pathlib import Path

from synergyd_harness import DaemonProcess


def test_a_restarted_daemon_with_port_0_keeps_its_port(tmp_path: Path) -> None:
    d = DaemonProcess(tmp_path / "state").start()
    first = d.address
    d.kill()  # kill -9: no clean-up at all
    d.start()
    try:
        assert d.address == first
        assert (tmp_path / "state" / "ports").read_text().split()[0] == first.rsplit(":", 1)[1]
    finally:
        d.terminate()
    # The port is taken by someone else meanwhile: a new one, and no failure to start.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", int(first.rsplit(":", 1)[1])))
        squatter.listen()
        d.start()
        try:
            assert d.address != first
        finally:
            d.terminate()
