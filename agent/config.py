"""synergy-agent's flags, checked into an `AgentConfig` (a bad value: one line, exit code 2).

The node's capacity comes from the machine (psutil, NVML) restricted to the slice given
with `--cpus` / `--memory`, so several agents can share one machine without overlapping.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn, Sequence

import psutil

from synergy.agent.cores import CoreError, format_cpu_list, parse_cpu_list
from synergy.agent.launch import LaunchError
from synergy.agent.startup import WIND_DOWN_CAP_S
from synergy.agent.users import DEFAULT_USER, lookup
from synergy.scheduler.gpu_type_names import gpu_type_problem
from synergy.scheduler.statedir import ADDRESS_FILE, AGENT_ADDRESS_FILE, CLUSTER_TOKEN_FILE, default_state_dir

GIB = 1024**3
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_UNITS = {"": GIB, "k": 1024, "m": 1024**2, "g": GIB, "t": 1024**4}


#: --task-pids-max's default: a DataLoader with many workers and their threads fits, a fork bomb does not.
DEFAULT_TASK_PIDS_MAX = 4096
DEFAULT_TASK_LOG_MAX_BYTES = 100 * 1024**2
DEFAULT_WORK_DIR_MIN_FREE_BYTES = 256 * 1024**2


class ConfigError(ValueError):
    """A flag value that cannot be used; the message starts with the flag."""


def parse_size_gb(text: str, flag: str) -> float:
    """"8G", "512M", "1.5GiB", "16" (GB) -> GiB as a float."""
    m = _SIZE_RE.match(text)
    if not m:
        raise ConfigError(f"{flag}: {text!r} is not a size like 8G, 512M or 1.5G")
    return float(m.group(1)) * _UNITS[m.group(2).lower()] / GIB


@dataclass(frozen=True)
class AgentConfig:
    daemon: str
    cluster_token: str = field(repr=False)
    node_id: str
    hostname: str
    work_dir: Path
    #: The agent's slice of the machine's cores, and the first `reserve_cpus` of them kept back.
    cores: tuple[int, ...]
    reserve_cpus: int
    mem_gb: float
    reserve_mem_gb: float
    fake_gpus: int | None
    cgroup_parent: str
    use_cgroups: bool
    #: start (and register "memory not enforced") even when the cgroups found cannot be set up
    allow_unenforced: bool = False
    #: the most processes and threads one task may have (cgroup pids controller; 0 = no limit)
    task_pids_max: int = DEFAULT_TASK_PIDS_MAX
    #: each task's log is rotated at this many bytes (0: never), keeping this many older files
    task_log_max_bytes: int = DEFAULT_TASK_LOG_MAX_BYTES
    task_log_files: int = 1
    #: the node asks for no new tasks while its work dir has less free space than this
    #: (at most a tenth of the work dir's filesystem)
    work_dir_min_free_bytes: int = DEFAULT_WORK_DIR_MIN_FREE_BYTES
    #: --gpu-type: the node's GPU type ("" = NVML's; fake GPUs are then untyped).
    gpu_type: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    #: Address the job processes call (the JobService); defaults to --daemon.
    job_daemon_address: str = ""
    stop_grace_s: float = 10.0
    #: the longest a finished job's process tears down without its CPU quota (0: never lifted)
    wind_down_cap_s: float = WIND_DOWN_CAP_S
    #: stop the tasks when the agent exits (default: leave them running for the next instance)
    stop_tasks_on_exit: bool = False
    #: telemetry every this many seconds (0: off); the copy benchmark's length at start (0: skip)
    sample_interval_s: float = 1.0
    bandwidth_calibration_s: float = 0.3
    #: the agent's own Prometheus /metrics port (0: pick a free one; None: off)
    metrics_port: int | None = 0
    metrics_host: str = "127.0.0.1"
    #: CODA's contention eliminator (None: off): node bandwidth share and training throughput drop
    contention_threshold: float | None = 0.75
    contention_throughput_drop: float = 0.10
    #: whom jobs run as (a root agent; docs/agent.md "Running jobs as their users"): the user of a
    #: job that names none, whether jobs may run as root, or every job as the agent itself
    default_user: str = DEFAULT_USER
    allow_root_jobs: bool = False
    ignore_job_users: bool = False
    log_level: str = "info"
    log_format: str = "json"

    @property
    def task_cores(self) -> tuple[int, ...]:
        """Cores tasks may use: the slice minus the reserved ones."""
        return self.cores[self.reserve_cpus :]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, exit 2 (argparse prints usage too)
        sys.stderr.write(f"synergy-agent: {message} (see synergy-agent --help)\n")
        raise SystemExit(2)


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="synergy-agent",
        description="Node agent of a Synergy cluster: registers this server with synergyd, runs the tasks "
        "it is told to inside cgroups with exclusive cores and memory limits, and reports them. "
        "See docs/agent.md.",
    )
    a = p.add_argument
    a("--daemon", metavar="HOST:PORT", help="synergyd's address (default: the address file in --state-dir)")
    a("--state-dir", metavar="DIR", help="state dir of a synergyd on this machine: its address and cluster "
      "token are read from there (default: $SYNERGY_STATE_DIR or ~/.local/state/synergy)")
    a("--cluster-token-file", metavar="FILE", help="file holding the cluster token (default: cluster.token in "
      "--state-dir)")
    a("--node-id", help="stable, unique id of this node (default: the host name)")
    a("--work-dir", metavar="DIR", help="where task logs (logs/JOB-ATTEMPT-RANK.log) and the agent's state "
      "live (default: ~/.local/state/synergy-agent/NODE_ID)")
    a("--cpus", metavar="LIST", help="cores this agent may use, e.g. 0-3 or 0,2,4-7 (default: every core "
      "the agent may run on)")
    a("--memory", metavar="SIZE", help="memory this agent may hand out, e.g. 8G (default: the machine's)")
    a("--reserve-cpus", type=int, default=0, metavar="N", help="cores of the slice kept back for the system "
      "and the agent (the first N); never given to tasks (default: 0)")
    a("--reserve-mem", default="0", metavar="SIZE", help="memory kept back for the system (default: 0)")
    a("--fake-gpus", type=int, metavar="N", help="present N fake GPUs instead of asking NVML (tests, demos "
      "on CPU-only machines)")
    a("--gpu-type", default="", metavar="NAME", help="the node's GPU type, e.g. T4 or V100 (upper case, as NVML "
      "names models): the type of --fake-gpus; with real GPUs it overrides the type read from NVML, with a "
      "warning in the log (default: NVML's type; fake GPUs: untyped)")
    a("--cgroup-parent", default="synergy", metavar="PATH", help="cgroup under which the agent creates its "
      "own group PATH/NODE_ID and one group per task (default: synergy)")
    a("--no-cgroups", action="store_true", help="do not use cgroups: CPU affinity only, memory not enforced")
    a("--allow-unenforced", action="store_true", help="start even when the cgroups found cannot be set up "
      "(the node then runs with CPU affinity only and shows 'memory not enforced'); without it the agent "
      "refuses to start")
    a("--task-pids-max", type=int, default=DEFAULT_TASK_PIDS_MAX, metavar="N", help="the most processes and "
      f"threads one task may have (cgroup pids controller; 0: no limit; default: {DEFAULT_TASK_PIDS_MAX})")
    a("--task-log-max", default="100M", metavar="SIZE", help="a task's log is rotated when it reaches SIZE "
      "(LOG -> LOG.1, with a line saying so; 0: never) so a chatty job cannot fill the work dir (default: 100M)")
    a("--task-log-files", type=int, default=1, metavar="N", help="rotated logs kept per task besides the "
      "current one (0: drop the old output; default: 1)")
    a("--work-dir-min-free", default="256M", metavar="SIZE", help="below this much free space in --work-dir "
      "(capped at a tenth of its filesystem) the node takes no new tasks and shows why (default: 256M)")
    a("--tls-ca", metavar="FILE", help="CA certificate to verify synergyd's TLS certificate (enables TLS)")
    a("--tls-cert", metavar="FILE", help="client certificate for mutual TLS (with --tls-key)")
    a("--tls-key", metavar="FILE", help="client private key for mutual TLS")
    a("--job-daemon-address", metavar="HOST:PORT", help="address job processes use to reach synergyd "
      "(default: --daemon)")
    a("--stop-grace-s", type=float, default=10.0, metavar="S", help="SIGTERM-to-SIGKILL grace when the agent "
      "itself stops its tasks on shutdown (default: 10)")
    a("--wind-down-cap-s", type=float, default=WIND_DOWN_CAP_S, metavar="S", help="once a job's process says it "
      "is exiting (the SynergyIterator does at exit), its CPU quota is lifted for the interpreter's teardown, "
      "its weight kept, for at most this long, so the next task on its GPUs starts sooner; 0 keeps the quota "
      f"(default: {WIND_DOWN_CAP_S:g})")
    a("--stop-tasks-on-exit", action="store_true", help="stop every task when the agent exits on SIGTERM / "
      "SIGINT (default: tasks keep running and the next agent started with the same --work-dir re-adopts them)")
    a("--sample-interval-s", type=float, default=1.0, metavar="S", help="telemetry sampling interval: CPU, "
      "memory, page faults, I/O, PSI, GPUs, memory bandwidth per task and node (default: 1; 0: off)")
    a("--bandwidth-calibration-s", type=float, default=0.3, metavar="S", help="length of the memory-copy "
      "benchmark that calibrates the node's peak and per-core bandwidth at start, cached in --work-dir "
      "(default: 0.3; 0: skip, no bandwidth estimate)")
    a("--metrics-port", type=int, default=0, metavar="PORT", help="port of the agent's own Prometheus /metrics "
      "on 127.0.0.1 (default: 0 = a free port, written to metrics.address in --work-dir; -1: off)")
    a("--metrics-host", default="127.0.0.1", metavar="HOST", help="address /metrics listens on (default: "
      "127.0.0.1)")
    a("--contention-threshold", type=float, default=0.75, metavar="F", help="CODA contention eliminator: "
      "node memory bandwidth, as a fraction of the calibrated peak, at which a CPU-only task may be throttled "
      "(default: 0.75)")
    a("--contention-throughput-drop", type=float, default=0.10, metavar="F", help="... when a training task's "
      "throughput is this fraction below its baseline (default: 0.10)")
    a("--no-contention-eliminator", action="store_true", help="never throttle CPU-only tasks")
    a("--default-user", default=DEFAULT_USER, metavar="NAME", help="a root agent runs each job as its user "
      "(spec.user, looked up on this node); a job with no user runs as NAME (default: nobody)")
    a("--allow-root-jobs", action="store_true", help="let jobs run as root (uid 0): a job whose user is root, "
      "or every job with --default-user root or --ignore-job-users (default: such a job fails to launch)")
    a("--ignore-job-users", action="store_true", help="run every job as the agent's own user, whatever its "
      "user (as before users existed; test clusters, single-tenant nodes); a root agent needs "
      "--allow-root-jobs with it. An agent that is not root always does this, and says so at start")
    a("--log-level", default="info", choices=["debug", "info", "warning", "error"], help="log level")
    a("--log-format", default="json", choices=["json", "text"], help="log format on stderr (default: json)")
    return p


def _read(path: Path, what: str, flag: str) -> str:
    try:
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot read the {what} from {path}: {exc.strerror}") from None
    if not text:
        raise ConfigError(f"{flag}: the {what} file {path} is empty")
    return text


def _readable(path: str | None, flag: str) -> str:
    if path and not os.access(path, os.R_OK):
        raise ConfigError(f"{flag}: cannot read {path}")
    return path or ""


def from_args(argv: Sequence[str] | None = None) -> AgentConfig:
    """Parse and check the flags; ConfigError names the flag at fault."""
    ns = parser().parse_args(argv)
    state = Path(ns.state_dir) if ns.state_dir else default_state_dir()
    tls_cert = _readable(ns.tls_cert, "--tls-cert")
    tls_key = _readable(ns.tls_key, "--tls-key")
    if bool(tls_cert) != bool(tls_key):
        raise ConfigError("--tls-cert: mutual TLS needs both --tls-cert and --tls-key")
    daemon = ns.daemon
    if not daemon:  # with a client certificate, the mutual-TLS agent port when the daemon has one
        names = [AGENT_ADDRESS_FILE, ADDRESS_FILE] if tls_cert else [ADDRESS_FILE]
        found = [state / n for n in names if (state / n).exists()]
        if not found:
            raise ConfigError(f"--daemon: not given, and {state / ADDRESS_FILE} does not exist (is synergyd "
                              f"running with --state-dir {state}?)")
        daemon = _read(found[0], "synergyd address", "--state-dir")
    if ":" not in daemon:
        raise ConfigError(f"--daemon: {daemon!r} is not HOST:PORT")
    token_path = Path(ns.cluster_token_file) if ns.cluster_token_file else state / CLUSTER_TOKEN_FILE
    token = _read(token_path, "cluster token", "--cluster-token-file")

    available = tuple(sorted(os.sched_getaffinity(0)))
    if ns.cpus:
        try:
            cores = parse_cpu_list(ns.cpus)
        except CoreError as exc:
            raise ConfigError(f"--cpus: {exc}") from None
        outside = [c for c in cores if c not in available]
        if outside:
            raise ConfigError(f"--cpus: cores {format_cpu_list(outside)} are not available here "
                              f"(this machine offers {format_cpu_list(available)})")
        if not cores:
            raise ConfigError("--cpus: empty")
    else:
        cores = available
    if not 0 <= ns.reserve_cpus < len(cores):
        raise ConfigError(f"--reserve-cpus: must be between 0 and {len(cores) - 1} (the slice has {len(cores)} "
                          f"cores), got {ns.reserve_cpus}")
    # The daemon learns sizes in MB steps (RegisterNode sends 3 decimals of GB): the agent keeps
    # the same figure, rounded down, so it never refuses a share the daemon thinks fits.
    machine_gb = psutil.virtual_memory().total / GIB
    mem_gb = parse_size_gb(ns.memory, "--memory") if ns.memory else machine_gb
    mem_gb = math.floor(mem_gb * 1000) / 1000
    if not 0 < mem_gb <= machine_gb + 1e-9:
        raise ConfigError(f"--memory: must be more than 0 and at most the machine's {machine_gb:.1f}G")
    reserve_mem = math.ceil(parse_size_gb(ns.reserve_mem, "--reserve-mem") * 1000) / 1000
    if reserve_mem >= mem_gb:
        raise ConfigError(f"--reserve-mem: {reserve_mem:g}G leaves nothing of --memory {mem_gb:g}G")
    if ns.fake_gpus is not None and not 0 <= ns.fake_gpus <= 64:
        raise ConfigError(f"--fake-gpus: must be between 0 and 64, got {ns.fake_gpus}")
    if ns.gpu_type and (problem := gpu_type_problem(ns.gpu_type)):
        raise ConfigError(f"--gpu-type: {problem}")
    for flag, value in (("--sample-interval-s", ns.sample_interval_s),
                        ("--bandwidth-calibration-s", ns.bandwidth_calibration_s)):
        if not 0 <= value <= 3600:
            raise ConfigError(f"{flag}: must be between 0 and 3600, got {value}")
    for flag, value in (("--contention-threshold", ns.contention_threshold),
                        ("--contention-throughput-drop", ns.contention_throughput_drop)):
        if not 0 < value < 1:
            raise ConfigError(f"{flag}: must be a fraction between 0 and 1, got {value}")
    if not -1 <= ns.metrics_port <= 65535:
        raise ConfigError(f"--metrics-port: must be a port number, 0 (pick one) or -1 (off), got {ns.metrics_port}")
    if not ns.stop_grace_s >= 0:
        raise ConfigError(f"--stop-grace-s: must be >= 0, got {ns.stop_grace_s}")
    if not 0 <= ns.wind_down_cap_s <= 3600:
        raise ConfigError(f"--wind-down-cap-s: must be from 0 to 3600, got {ns.wind_down_cap_s}")
    if not 0 <= ns.task_pids_max <= 4_194_304:
        raise ConfigError(f"--task-pids-max: must be between 0 (no limit) and 4194304, got {ns.task_pids_max}")
    log_max = parse_size_gb(ns.task_log_max, "--task-log-max") if ns.task_log_max != "0" else 0.0
    min_free = parse_size_gb(ns.work_dir_min_free, "--work-dir-min-free") if ns.work_dir_min_free != "0" else 0.0
    if log_max and log_max * GIB < 4096:
        raise ConfigError(f"--task-log-max: must be 0 (no cap) or at least 4K, got {ns.task_log_max!r}")
    if not 0 <= ns.task_log_files <= 100:
        raise ConfigError(f"--task-log-files: must be between 0 and 100, got {ns.task_log_files}")
    cgroup_parent = ns.cgroup_parent.strip("/") or "synergy"
    if not all(re.fullmatch(r"[A-Za-z0-9._-]+", part) and part not in (".", "..")
               for part in cgroup_parent.split("/")):
        raise ConfigError(f"--cgroup-parent: {ns.cgroup_parent!r} must be a relative path of names made of "
                          "letters, digits, '.', '_' or '-' (no '..', '.' or empty parts)")
    node_id = ns.node_id or socket.gethostname()
    if not re.fullmatch(r"[A-Za-z0-9._:-]{1,128}", node_id):
        raise ConfigError(f"--node-id: {node_id!r} must be at most 128 letters, digits, '.', '_', ':' or '-'")
    _check_job_users(ns, node_id)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    work_dir = Path(ns.work_dir) if ns.work_dir else Path(base) / "synergy-agent" / node_id
    try:  # 0700: the agent's alone (jobs run as other users must not read its state or logs)
        work_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        (work_dir / "logs").mkdir(exist_ok=True, mode=0o700)
    except OSError as exc:
        raise ConfigError(f"--work-dir: cannot create {work_dir}: {exc.strerror}") from None
    return AgentConfig(
        daemon=daemon,
        cluster_token=token,
        node_id=node_id,
        hostname=socket.gethostname(),
        work_dir=work_dir,
        cores=cores,
        reserve_cpus=ns.reserve_cpus,
        mem_gb=mem_gb,
        reserve_mem_gb=reserve_mem,
        fake_gpus=ns.fake_gpus,
        gpu_type=ns.gpu_type,
        cgroup_parent=cgroup_parent,
        use_cgroups=not ns.no_cgroups,
        allow_unenforced=ns.allow_unenforced,
        task_pids_max=ns.task_pids_max,
        task_log_max_bytes=int(log_max * GIB),
        task_log_files=ns.task_log_files,
        work_dir_min_free_bytes=int(min_free * GIB),
        tls_ca=_readable(ns.tls_ca, "--tls-ca"),
        tls_cert=tls_cert,
        tls_key=tls_key,
        job_daemon_address=ns.job_daemon_address or daemon,
        stop_grace_s=ns.stop_grace_s,
        wind_down_cap_s=ns.wind_down_cap_s,
        stop_tasks_on_exit=ns.stop_tasks_on_exit,
        sample_interval_s=ns.sample_interval_s,
        bandwidth_calibration_s=ns.bandwidth_calibration_s,
        metrics_port=None if ns.metrics_port == -1 else ns.metrics_port,
        metrics_host=ns.metrics_host,
        contention_threshold=None if ns.no_contention_eliminator else ns.contention_threshold,
        contention_throughput_drop=ns.contention_throughput_drop,
        default_user=ns.default_user,
        allow_root_jobs=ns.allow_root_jobs,
        ignore_job_users=ns.ignore_job_users,
        log_level=ns.log_level,
        log_format=ns.log_format,
    )


def _check_job_users(ns: argparse.Namespace, node_id: str) -> None:
    """A root agent's --default-user must exist here, and root jobs need --allow-root-jobs."""
    if os.geteuid() != 0:
        return  # jobs run as the agent itself (said at start)
    if ns.ignore_job_users:
        if not ns.allow_root_jobs:
            raise ConfigError("--ignore-job-users: the agent runs as root, so every job would run as root: "
                              "add --allow-root-jobs to mean it")
        return
    try:
        who = lookup(ns.default_user, node_id)
    except LaunchError as exc:
        raise ConfigError(f"--default-user: {exc}") from None
    if who.uid == 0 and not ns.allow_root_jobs:
        raise ConfigError(f"--default-user: {ns.default_user!r} is root (uid 0): jobs with no user would run as "
                          "root; add --allow-root-jobs to mean it")
