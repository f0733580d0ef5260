"""Prometheus metrics of one daemon (own registry: no module-level state) and the HTTP endpoint.

/metrics serves the registry in the text format; /healthz answers 200 "ok" while the daemon
serves and 503 otherwise, for load balancers and `curl -f`.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from synergy.scheduler.daemon.logs import LOGGER
from synergy.scheduler.model import Resources


#: The resource gauges' units (Prometheus names carry base units), each with how it is read
#: from a `Resources` (memory is kept in GiB).
RESOURCE_UNITS: dict[str, Callable[[Resources], float]] = {
    "gpus": lambda r: float(r.gpus),
    "cpus": lambda r: float(r.cpus),
    "memory_bytes": lambda r: float(r.mem_gb) * 2**30,
}


def set_resources(gauges: dict[str, Gauge], labels: tuple[str, ...], value: Resources) -> None:
    """Set one gauge per unit of `RESOURCE_UNITS` from `value`."""
    for unit, read in RESOURCE_UNITS.items():
        gauges[unit].labels(*labels).set(read(value))


@dataclass
class Metrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        r = self.registry
        self.decision_seconds = Histogram(
            "synergyd_round_decision_seconds",
            "Time the core took to decide one round (policy + mechanism).",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.rounds = Counter("synergyd_rounds", "Rounds applied.", registry=r)
        # Tesserae's migrations: a running job whose GPUs a round changed (stop, relaunch).
        self.migrations = Counter(
            "synergyd_migrations", "Running jobs a round moved to other GPUs (restarted elsewhere).", registry=r
        )
        self.round_migrations = Gauge(
            "synergyd_round_migrations", "Running jobs the last applied round moved to other GPUs.", registry=r
        )
        self.job_migrations = Histogram(
            "synergyd_job_migrations",
            "Migrations per job, observed when a job ends (succeeded, failed or cancelled).",
            buckets=(0, 1, 2, 3, 5, 10, 20, 50),
            registry=r,
        )
        self.queue_length = Gauge("synergyd_queue_length", "Jobs waiting in QUEUED.", registry=r)
        self.cadence_stretch = Gauge(
            "synergyd_cadence_stretch",
            "Factor on the round's renewal and heartbeat intervals and their timeouts (1: none; "
            "above 1 while the cadence would ask for more calls a second than --max-rpc-rate).",
            registry=r,
        )
        self.cadence_stretch.set(1.0)
        self.running_jobs = Gauge("synergyd_running_jobs", "Jobs in RUNNING.", registry=r)
        self.jobs = Gauge("synergyd_jobs", "Jobs per lifecycle state.", ["state"], registry=r)
        # One gauge per unit (Prometheus: never mix units in one metric), each by kind.
        self.resources = {
            unit: Gauge(f"synergyd_resource_{unit}", f"Schedulable resources ({unit}): capacity, allocated, free.",
                        ["kind"], registry=r)
            for unit in RESOURCE_UNITS
        }
        self.nodes = Gauge("synergyd_nodes", "Registered nodes per state.", ["state"], registry=r)
        self.lease_renewals = Counter(
            "synergyd_lease_renewals", "Lease renewals answered, by action.", ["action"], registry=r
        )
        self.rpc_errors = Counter(
            "synergyd_rpc_errors", "RPCs answered with an error, by method and code.", ["method", "code"], registry=r
        )
        self.foreign_task_reports = Counter(
            "synergyd_foreign_task_reports",
            "Task exits reported by a node the task was not placed on (ignored).",
            registry=r,
        )
        # Per node, from the agents' latest heartbeat (a lost node keeps its last values).
        self.node_cpu_cores = Gauge("synergyd_node_cpu_cores", "CPU cores in use on the node.", ["node"], registry=r)
        self.node_rss_bytes = Gauge("synergyd_node_rss_bytes", "Resident memory in use on the node.", ["node"],
                                    registry=r)
        self.node_mem_bandwidth = Gauge(
            "synergyd_node_memory_bandwidth_bytes_per_second", "Memory bandwidth in use on the node, by source.",
            ["node", "source"], registry=r)
        self.node_mem_bandwidth_peak = Gauge(
            "synergyd_node_memory_bandwidth_peak_bytes_per_second",
            "Calibrated peak memory bandwidth of the node, by source.", ["node", "source"], registry=r)
        self.node_throttled_tasks = Gauge(
            "synergyd_node_throttled_tasks", "Tasks the node's contention eliminator (CODA) throttles now.",
            ["node"], registry=r)
        self.node_tasks = Gauge("synergyd_node_tasks", "Tasks the node's agent reports.", ["node"], registry=r)
        # Running jobs only (cleared and set again at every refresh): a lost node costs a job
        # what it trained since its last checkpoint.
        self.job_checkpoint_age = Gauge(
            "synergyd_job_checkpoint_age_seconds",
            "Seconds since the running job's last reported checkpoint (since its start when it has none).",
            ["job"], registry=r)
        self.job_checkpoint_step = Gauge(
            "synergyd_job_checkpoint_step", "Step of the running job's last reported checkpoint.", ["job"], registry=r)
        # Per placed job (set at scrape time, cleared of jobs no longer placed): what it holds
        # against its GPU-proportional share, the picture the Grafana board draws.
        self.job_allocated = {
            unit: Gauge(f"synergyd_job_allocated_{unit}", f"What a placed job holds ({unit}).", ["job", "name"],
                        registry=r)
            for unit in RESOURCE_UNITS
        }
        self.job_proportional_share = {
            unit: Gauge(f"synergyd_job_proportional_share_{unit}",
                        f"A placed job's GPU-proportional share ({unit}).", ["job", "name"], registry=r)
            for unit in RESOURCE_UNITS
        }
        # Per user (spec.user, the authenticated submitter), over jobs that have not ended; set at
        # scrape time, users with no such job dropped.
        self.user_jobs = Gauge("synergyd_user_jobs", "Jobs of a user that have not ended: running or waiting.",
                               ["user", "state"], registry=r)
        self.user_allocated = {
            unit: Gauge(f"synergyd_user_allocated_{unit}", f"What a user's placed jobs hold ({unit}).", ["user"],
                        registry=r)
            for unit in RESOURCE_UNITS
        }
        self.job_throughput = Gauge(
            "synergyd_job_throughput_samples_per_second", "A placed job's latest reported throughput.",
            ["job", "name"], registry=r)
        self.transitions = Counter(
            "synergyd_job_transitions", "Job lifecycle transitions, by target state.", ["to"], registry=r
        )


class MetricsServer:
    """A small threaded HTTP server; `port=0` picks a free port (see `.port`).

    `refresh` runs before each /metrics answer: gauges computed from the daemon's state are
    set when someone reads them, not every second whether anyone does or not.
    """

    def __init__(
        self, metrics: Metrics, host: str, port: int, healthy: Callable[[], bool],
        refresh: Callable[[], None] | None = None,
    ) -> None:
        registry = metrics.registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] == "/metrics":
                    if refresh is not None:
                        try:
                            refresh()
                        except Exception:  # noqa: BLE001 (serve the last values rather than nothing)
                            logging.getLogger(LOGGER).exception("metrics.refresh_failed")
                    self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
                elif self.path.split("?")[0] == "/healthz":
                    ok = healthy()
                    self._reply(200 if ok else 503, b"ok\n" if ok else b"not serving\n", "text/plain")
                else:
                    self._reply(404, b"not found: try /metrics or /healthz\n", "text/plain")

            def _reply(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # scrapes are not news
                pass

        self._httpd = ThreadingHTTPServer((host, port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
