"""`synergy-sim compare --html` writes a page that opens from a file URL with the network off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from browser import Browser, Page, find_chromium

CHROMIUM = find_chromium()
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium installed (.ci/run installs Debian's)")


@pytest.fixture
def offline_page() -> Iterator[Page]:
    assert CHROMIUM is not None
    # No network at all: every http(s) request goes to a proxy that is not there, and the
    # DevTools network emulation is offline too.
    b = Browser(CHROMIUM, "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>")
    p = b.page()
    p.send("Network.emulateNetworkConditions", offline=True, latency=0, downloadThroughput=-1, uploadThroughput=-1)
    yield p
    p.close()
    b.close()


@needs_chromium
def test_a_simulator_html_report_opens_offline_from_a_file(tmp_path: Path, offline_page: Page, artifacts: Path) -> None:
    report = tmp_path / "report.html"
    done = subprocess.run(
        [sys.executable, "-m", "synergy.scheduler.simulator.cli", "compare", "--mechanisms", "proportional,tune",
         "--jobs", "200", "--servers", "4", "--measure", "50:150", "--jobs-parallel", "1", "--html", str(report)],
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = offline_page
    page.goto(report.as_uri())
    page.wait("document.body.dataset.ready === '1'", what="the report's script to finish")
    assert page.eval("document.querySelectorAll('#metrics tr').length") == 3  # header + two mechanisms
    assert page.eval("document.getElementById('cdf').data.map((t) => t.name)") == ["proportional", "tune"]
    assert page.eval("document.getElementById('cdf').data[0].x.length") == 100  # the measured jobs
    assert page.eval("document.querySelectorAll('#runs .main-svg').length") >= 4
    page.screenshot(artifacts / "sim-report.png")
    outside = [u for u in page.requests if not u.startswith(("file:", "data:"))]
    assert outside == [], outside
    assert page.errors == [], page.errors


def test_html_to_a_missing_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "synergy.scheduler.simulator.cli", "--jobs", "20",
                           "--html", str(tmp_path / "nowhere" / "r.html")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == f"synergy-sim: error: --html {tmp_path / 'nowhere' / 'r.html'}: its directory does not exist"
