"""Every family synergyd's and the agents' /metrics expose follows Prometheus naming conventions.

Parsed with prometheus_client's own text parser from a live cluster (conftest.py), so families
that only appear with nodes, tasks and placed jobs are checked too: counters end in `_total`,
nothing else does; names are snake_case under the component's prefix; units are base units
(bytes, seconds, ratios 0-1: no percent, GB, milliseconds...); every family has help text.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import yaml
from live_cluster import LiveCluster
from prometheus_client.parser import text_string_to_metric_families
from synergyd_harness import wait_for

#: Name parts that are not Prometheus base units (https://prometheus.io/docs/practices/naming/).
NON_BASE_UNITS = re.compile(
    r"_(pct|percent|percentage|gb|gbps|mb|kb|gib|mib|kib|ms|us|milliseconds|microseconds|minutes|hours|days|"
    r"kilobytes|megabytes|gigabytes)(_|$)")
SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")


def _families(text: str) -> dict[str, tuple[str, str, set[str]]]:
    """name -> (type, help, sample names)."""
    return {f.name: (f.type, f.documentation, {s.name for s in f.samples}) for f in text_string_to_metric_families(text)}


def _scrape(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        return r.read().decode()


def check(families: dict[str, tuple[str, str, set[str]]], prefix: str) -> list[str]:
    problems = []
    for name, (kind, doc, samples) in families.items():
        if name.startswith(("python_", "process_")):  # the client library's own collectors
            continue
        if not (SNAKE.match(name) and name.startswith(prefix)):
            problems.append(f"{name}: not snake_case under {prefix}")
        if NON_BASE_UNITS.search(name):
            problems.append(f"{name}: not in base units")
        if not doc.strip():
            problems.append(f"{name}: no help text")
        if kind == "counter" and not all(s.endswith(("_total", "_created")) for s in samples):
            problems.append(f"{name}: counter samples without _total: {sorted(samples)}")
        if kind != "counter" and name.endswith("_total"):
            problems.append(f"{name}: a {kind} named _total")
    return problems


def test_the_checker_finds_what_the_conventions_forbid() -> None:
    bad = ("# HELP synergyd_mem_gbps x\n# TYPE synergyd_mem_gbps gauge\nsynergyd_mem_gbps 1\n"
           "# HELP synergyd_things_total x\n# TYPE synergyd_things_total gauge\nsynergyd_things_total 1\n"
           "# HELP synergy_agent_cpu_util_pct x\n# TYPE synergy_agent_cpu_util_pct gauge\nsynergy_agent_cpu_util_pct 1\n"
           "# HELP synergyd_rounds x\n# TYPE synergyd_rounds untyped\nsynergyd_rounds 1\n")
    problems = check(_families(bad), "synergyd_")
    assert any("synergyd_mem_gbps: not in base units" in p for p in problems), problems
    assert any("synergyd_things_total: a gauge named _total" in p for p in problems), problems
    assert any("synergy_agent_cpu_util_pct: not snake_case under synergyd_" in p for p in problems), problems


def test_every_exposed_family_follows_prometheus_naming(live: LiveCluster) -> None:
    daemon = live.daemon.metrics_address
    # Per-node and per-job families appear once agents heartbeat and jobs are placed.
    text = wait_for(lambda: t if "synergyd_job_allocated_cpus{" in (t := _scrape(daemon))
                    and "synergyd_node_memory_bandwidth_bytes_per_second{" in t else "",
                    timeout=30, what="per-node and per-job families")
    families = _families(text)
    assert {"synergyd_rounds", "synergyd_resource_memory_bytes", "synergyd_job_proportional_share_cpus",
            "synergyd_round_decision_seconds"} <= set(families), sorted(families)
    problems = check(families, "synergyd_")
    for agent in live.agents:
        address = wait_for(lambda: (agent.work_dir / "metrics.address").exists()
                           and (agent.work_dir / "metrics.address").read_text().strip(), what="metrics.address")
        agent_text = wait_for(lambda: t if "synergy_agent_task_cpu_cores{" in (t := _scrape(address)) else "",
                              timeout=30, what="the agent's task families")
        agent_families = _families(agent_text)
        assert "synergy_agent_node_cpu_utilization_ratio" in agent_families, sorted(agent_families)
        problems += check(agent_families, "synergy_agent_")
    assert problems == [], "\n".join(problems)


REPO = Path(__file__).resolve().parents[2]
BOARD = REPO / "deploy" / "grafana" / "synergy-cluster.json"
METRIC = re.compile(r"\b(?:synergyd|synergy_agent)_[a-z0-9_]+")


def test_the_grafana_board_is_importable_and_queries_only_exposed_metrics(live: LiveCluster) -> None:
    board = json.loads(BOARD.read_text())
    # What Grafana's import needs: a datasource input the panels refer to, unique ids, a layout.
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 36
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for p in board["panels"]:
        assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and {"x", "y", "w", "h"} <= set(p["gridPos"]), p["title"]
        assert p["targets"] and all(t["expr"] and t["refId"] for t in p["targets"]), p["title"]
    wanted = {m for p in board["panels"] for t in p["targets"] for m in METRIC.findall(t["expr"])}
    # The allocation-vs-share, utilisation, round-latency, renewal and throttling panels the issue asks for.
    assert {"synergyd_job_allocated_cpus", "synergyd_job_proportional_share_cpus", "synergyd_resource_gpus",
            "synergyd_round_decision_seconds_bucket", "synergyd_lease_renewals_total",
            "synergyd_node_throttled_tasks", "synergy_agent_contention_actions_total"} <= wanted
    exposed: set[str] = set()
    texts = [_scrape(live.daemon.metrics_address)]
    texts += [_scrape((a.work_dir / "metrics.address").read_text().strip()) for a in live.agents]
    for text in texts:
        for family in text_string_to_metric_families(text):
            exposed |= {family.name, family.name + "_total" if family.type == "counter" else family.name}
            exposed |= {s.name for s in family.samples}
            if family.type == "histogram":
                exposed |= {family.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    assert wanted - exposed == set(), sorted(wanted - exposed)


def test_the_prometheus_example_scrapes_the_daemon_and_the_agents() -> None:
    config = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {c["job_name"]: c for c in config["scrape_configs"]}
    assert set(jobs) == {"synergyd", "synergy-agent"}
    assert all(c["static_configs"][0]["targets"] for c in jobs.values())
