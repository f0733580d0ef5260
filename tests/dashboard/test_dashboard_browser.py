"""The dashboard in a real browser: headless Chromium over the DevTools protocol against a
live local cluster (conftest.py), and a `synergy-sim --html` report opened from a file with
the network off. Where no Chromium is installed the module skips, with one line saying so."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from browser import Browser, Page, find_chromium
from live_cluster import LiveCluster

CHROMIUM = find_chromium()
if CHROMIUM is None:
    pytest.skip("dashboard browser tests: no chromium installed (.ci/run installs Debian's)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert CHROMIUM is not None
    b = Browser(CHROMIUM)
    yield b
    b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    p = browser.page()
    yield p
    p.close()


def _rows(page: Page) -> dict[str, dict[str, str]]:
    return page.eval("""Object.fromEntries(Array.from(document.querySelectorAll('#jobs tbody tr')).map(
        (tr) => [tr.children[1].textContent, {state: tr.dataset.state, cpus: tr.querySelector('.cpus').textContent,
                 mem: tr.querySelector('.mem').textContent}]))""")


def test_the_cluster_page_shows_nodes_running_jobs_and_their_allocations(
    live: LiveCluster, page: Page, artifacts: Path
) -> None:
    page.goto(live.login)
    page.wait("Number(document.body.dataset.polls || 0) >= 2", what="two polls of the JSON views")
    rows = _rows(page)
    # (finisher too, unless the live-view test already finished it: xdist may run that first)
    for name in ("steady", "small") if rows["finisher"]["state"] == "succeeded" else ("finisher", "steady", "small"):
        assert rows[name]["state"] == "running", rows
        assert "(" in rows[name]["cpus"] and rows[name]["cpus"].split()[0] != "", rows  # held (share)
    assert rows["waiting"]["state"] == "queued", rows
    # Every node drawn, with its bars (a plotly chart) and the jobs it holds in the legend.
    assert page.eval("document.querySelectorAll('.node .bars .main-svg').length") >= 2
    legend = page.eval("Array.from(document.querySelectorAll('#node-gpu-a .legendtext, #node-gpu-b .legendtext'))"
                       ".map((e) => e.textContent).join('|')")
    assert "steady" in legend and "proportional share" in legend, legend
    assert page.eval("document.querySelectorAll('#chart-util .main-svg').length") > 0
    # Sorting and filtering the jobs table in the page.
    page.eval("document.querySelector('#jobs th[data-key=name]').click()")
    names = page.eval("Array.from(document.querySelectorAll('#jobs tbody tr')).map((tr) => tr.children[1].textContent)")
    assert names == sorted(names), names
    page.eval("const f = document.getElementById('filter'); f.value = 'bob'; f.dispatchEvent(new Event('input'))")
    names = page.eval("Array.from(document.querySelectorAll('#jobs tbody tr')).map((tr) => tr.children[1].textContent)")
    assert sorted(names) == ["steady", "waiting"], names
    page.screenshot(artifacts / "dashboard-cluster.png")
    assert page.errors == [], page.errors


def test_a_job_page_shows_its_history_profile_heat_map_and_log(
    live: LiveCluster, page: Page, artifacts: Path
) -> None:
    job = live.jobs["steady"]
    page.goto(live.login.replace("/?token", f"/jobs/{job}?token"))
    page.wait("document.querySelectorAll('#history tbody tr').length >= 2", what="the state history")
    states = page.eval("Array.from(document.querySelectorAll('#history tbody tr')).map((tr) => tr.children[2].textContent)")
    assert states[-1] == "running" and "queued" in states, states
    page.wait("document.querySelector('#profile .main-svg') !== null", what="the profile heat map")
    assert page.eval("document.getElementById('profile').data[0].type") == "heatmap"
    assert "resnet50" in page.eval("document.querySelector('#profile .gtitle').textContent")
    page.wait("document.getElementById('log').textContent.includes('sleeping')", timeout=30, what="the log tail")
    page.screenshot(artifacts / "dashboard-job.png")
    assert page.errors == [], page.errors


def test_the_live_view_changes_when_a_job_finishes(live: LiveCluster, page: Page, artifacts: Path) -> None:
    page.goto(live.login)
    page.wait("document.querySelector('#jobs tbody tr[data-state=running]') !== null", what="the jobs table")
    assert _rows(page)["finisher"]["state"] == "running"
    loads = page.loads
    live.finish("finisher")
    page.wait("document.querySelector('#jobs tbody tr[data-job=\"%d\"]').dataset.state === 'succeeded'"
              % live.jobs["finisher"], timeout=45, what="the finished job's row to say succeeded")
    assert "1 succeeded" in page.eval("document.getElementById('summary').textContent")
    # The node that ran it no longer lists it, and the JCT CDF has its point; no reload happened.
    page.wait("!Array.from(document.querySelectorAll('.node .legendtext')).some((e) => e.textContent.includes('finisher'))",
              what="the finished job to leave its node")
    page.wait("document.getElementById('chart-jct').data[0].x.length === 1", what="the JCT CDF's point")
    assert page.loads == loads
    page.screenshot(artifacts / "dashboard-after-finish.png")
    assert page.errors == [], page.errors


def test_the_dashboard_fetches_nothing_from_outside_and_asks_for_the_token(live: LiveCluster, page: Page) -> None:
    page.send("Network.clearBrowserCookies")
    page.goto(live.dashboard + "/")  # no token: the sign-in page, nothing else
    assert page.eval("document.querySelector('input[name=token]') !== null")
    page.goto(live.login)
    page.wait("Number(document.body.dataset.polls || 0) >= 1")
    outside = [u for u in page.requests if not u.startswith(live.dashboard)]
    assert outside == [], outside
    cluster = json.loads(live.get("/api/cluster"))
    assert {n["id"] for n in cluster["nodes"]} == {"gpu-a", "gpu-b"}


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
