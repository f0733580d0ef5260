"""The dashboard's HTTP side without a browser: off by default, the flag and its TOML key,
the admin-token check, the JSON views' shapes, and the history's bounds."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

import pytest
from synergyd_harness import DaemonProcess, FakeAgent, wait_for

from synergy.scheduler.daemon.config import ConfigError, load_config
from synergy.scheduler.dashboard.history import ClusterSample, History, JobSample
from synergy.v1 import admin_pb2


def test_the_dashboard_is_off_by_default_and_set_by_flag_or_toml(tmp_path: Path) -> None:
    c = load_config(["--state-dir", str(tmp_path)])
    assert (c.dashboard_port, c.dashboard_host) == (None, "127.0.0.1")
    toml = tmp_path / "d.toml"
    toml.write_text('dashboard-port = 8265\ndashboard_host = "0.0.0.0"\n')
    c = load_config(["--config", str(toml), "--state-dir", str(tmp_path)])
    assert (c.dashboard_port, c.dashboard_host) == (8265, "0.0.0.0")
    assert load_config(["--config", str(toml), "--state-dir", str(tmp_path), "--dashboard-port", "0"]).dashboard_port == 0
    with pytest.raises(ConfigError, match="--dashboard-port must be between 0 and 65535"):
        load_config(["--state-dir", str(tmp_path), "--dashboard-port", "70000"])


def _get(url: str, token: str | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


def test_every_page_and_view_needs_the_admin_token(
    start_daemon: Callable[..., DaemonProcess], start_agent: Callable[..., FakeAgent]
) -> None:
    d = start_daemon("--dashboard-port", "0")
    base = "http://" + (d.state_dir / "dashboard_address").read_text().strip()
    for path in ("/", "/jobs/1", "/api/cluster", "/api/jobs", "/static/plotly.min.js"):
        code, _, body = _get(base + path)
        assert code == 401 and b"admin token" in body, path
        assert _get(base + path, "wrong-token")[0] == 401
    code, headers, _ = _get(f"{base}/jobs/3?token={d.admin_token}")
    assert code == 303 and headers["Location"] == "/jobs/3"
    assert headers["Set-Cookie"].startswith(f"synergy_dashboard={d.admin_token}; HttpOnly")
    # The cookie it set opens the views; a wrong token in the URL sets nothing.
    req = urllib.request.Request(base + "/api/cluster", headers={"Cookie": f"synergy_dashboard={d.admin_token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert json.load(r)["policy"] == "fifo"
    assert _get(f"{base}/?token=nope")[0] == 401

    start_agent(d, "n1", gpus=2)
    admin = d.admin()
    job = admin.submit("viewed", gpus=1, model="resnet18").id
    wait_for(lambda: admin.state(job) == "running", what="the job to run")
    code, _, body = _get(f"{base}/api/jobs/{job}", d.admin_token)
    view = json.loads(body)
    assert code == 200 and view["state"] == "running" and view["allocated"]["gpus"] == 1
    assert view["share"]["cpus"] > 0 and view["profile"]["model"] == "resnet18"
    assert [t["to"] for t in view["history"]][-1] == "running"
    assert _get(f"{base}/api/jobs/999", d.admin_token)[0] == 404
    assert _get(f"{base}/api/nothing", d.admin_token)[0] == 404
    assert _get(f"{base}/static/../../etc/passwd", d.admin_token)[0] == 404
    def last_sample() -> dict | None:
        samples = json.loads(_get(f"{base}/api/history?window=600", d.admin_token)[2])["samples"]
        return samples[-1] if samples and samples[-1]["running"] == 1 else None

    sample = wait_for(last_sample, what="a history sample with the job running")
    assert (sample["gpus"], sample["gpus_allocated"]) == (2, 1)
    assert _get(f"{base}/api/history?window=bad", d.admin_token)[0] == 200  # a bad window is all kept
    admin.close()


def test_a_user_token_sees_only_that_users_jobs(
    start_daemon: Callable[..., DaemonProcess], start_agent: Callable[..., FakeAgent]
) -> None:
    """Issue 16: the dashboard takes user tokens; a plain user's views hold their own jobs,
    another's job page is refused, and on the node view another's job is an id, not a name."""
    d = start_daemon("--dashboard-port", "0")
    base = "http://" + (d.state_dir / "dashboard_address").read_text().strip()
    start_agent(d, "n1", gpus=2)
    admin = d.admin()
    token = admin.AddUser(admin_pb2.AddUserRequest(name="ivy")).token
    mine = admin.submit("ivys", gpus=1, user="ivy").id
    theirs = admin.submit("secret-name", gpus=1, user="jon").id
    wait_for(lambda: admin.state(mine) == admin.state(theirs) == "running", what="both jobs to run")

    assert {j["id"] for j in json.loads(_get(f"{base}/api/jobs", token)[2])["jobs"]} == {mine}
    assert {j["id"] for j in json.loads(_get(f"{base}/api/jobs", d.admin_token)[2])["jobs"]} == {mine, theirs}
    assert _get(f"{base}/api/jobs/{mine}", token)[0] == 200
    code, _, body = _get(f"{base}/api/jobs/{theirs}", token)
    assert code == 403 and b"belongs to another user" in body
    nodes = json.loads(_get(f"{base}/api/cluster", token)[2])["nodes"]
    holders = {h["id"]: h["name"] for n in nodes for h in n["jobs"]}
    assert holders == {mine: "ivys", theirs: ""}
    code, headers, _ = _get(f"{base}/?token={token}")
    assert code == 303 and headers["Set-Cookie"].startswith(f"synergy_dashboard={token}; HttpOnly")
    admin.RevokeUser(admin_pb2.RevokeUserRequest(name="ivy"))
    assert _get(f"{base}/api/jobs", token)[0] == 401  # revoked: refused at once
    admin.close()


def test_a_dashboard_port_in_use_stops_the_start_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "synergy.scheduler.daemon.main", "--state-dir", str(tmp_path / "s"),
                               "--port", "0", "--dashboard-port", str(port)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith("{")]  # JSON log lines aside
    assert lines == [f"synergyd: --dashboard-port: cannot listen on 127.0.0.1:{port} (Address already in use)"], lines


def test_the_daemon_without_the_flag_serves_no_dashboard(start_daemon: Callable[..., DaemonProcess]) -> None:
    d = start_daemon()
    assert not (d.state_dir / "dashboard_address").exists()


def test_the_history_is_bounded() -> None:
    h = History(max_samples=5, max_job_samples=3, max_jobs=2)
    for t in range(20):
        sample = ClusterSample(float(t), t, 8, 32, 100, 4, 16, 50, 2, 1)
        jobs = [2] if t == 0 else [0, 1]  # job 2 sampled once, long ago; jobs 0 and 1 every time
        h.add(sample, {j: JobSample(float(t), 1, 2, 3, 4.0) for j in jobs})
    assert [s["t"] for s in h.cluster()] == [15.0, 16.0, 17.0, 18.0, 19.0]
    assert [s["t"] for s in h.cluster(since=18)] == [18.0, 19.0]
    assert h.job(2) == []  # of three jobs, the one sampled longest ago was dropped
    assert [s["t"] for s in h.job(1)] == [17.0, 18.0, 19.0]


def test_sim_html_to_a_missing_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "synergy.scheduler.simulator.cli", "--jobs", "20",
                           "--html", str(tmp_path / "nowhere" / "r.html")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip() == f"synergy-sim: error: --html {tmp_path / 'nowhere' / 'r.html'}: its directory does not exist"
