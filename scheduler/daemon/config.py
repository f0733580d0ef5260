"""synergyd's settings: flags, an optional TOML file, and the timings derived from the round.

Precedence: command-line flag > `--config FILE.toml` > default. TOML keys are the flag names
without dashes prefix, with `-` or `_` (`round-s = 60` or `round_s = 60`). Every setting is
validated here, so a bad value stops the daemon with one line naming the flag.
"""

from __future__ import annotations

import argparse
import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Sequence

from synergy.scheduler.arrays import settings as array_settings
from synergy.scheduler.arrays.cpu_array import CpuArray
from synergy.scheduler.jobspec import SpecError, rules
from synergy.scheduler.placement.scorers import SCORERS
from synergy.scheduler.profiles.format import ProfileError, read_profile_file
from synergy.scheduler.profiles.pairs import PAIRS_KEY, load_pairs
from synergy.scheduler.registry import MECHANISMS, POLICIES
from synergy.scheduler.statedir import SOCKET_FILE, default_state_dir


class ConfigError(ValueError):
    """One line naming the flag (or TOML key) and what is wrong with it."""


#: gRPC takes message limits as a signed 32-bit byte count: 2047 MiB is the largest whole MiB.
MAX_MESSAGE_MB_RANGE = (1, 2047)


@dataclass(frozen=True)
class DaemonConfig:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 50051
    metrics_port: int | None = None
    #: The read-only web dashboard (scheduler/dashboard; docs/dashboard.md): off by default.
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    policy: str = "fifo"
    mechanism: str = "tune"
    #: Placement scorer by name ("" = the mechanism's own: best fit for tune).
    scorer: str = ""
    #: Tesserae's migration-minimising relabelling after the mechanism (placement/migration.py).
    migration_matching: bool = True
    #: CODA's CPU array (arrays/cpu_array.py): share of each GPU node's CPUs CPU-only jobs may
    #: borrow, and whether they may take training's CPUs above its GPU-proportional share.
    borrow_fraction: float = 1.0
    trim_training: bool = True
    round_s: float = 300.0
    max_job_gpus: int = 64
    profiles: Path | None = None
    #: A profile file whose "pairs" list turns on Tesserae's packing (placement/packing.py);
    #: None = packing off.
    pairs: Path | None = None
    cluster_token_file: Path | None = None
    admin_token_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    agent_port: int = 0
    #: The local Unix socket (unixsocket.py): None = STATE_DIR/synergyd.sock; "off" = none.
    unix_socket: Path | None = None
    lease_grace_s: float | None = None
    node_timeout_s: float | None = None
    launch_timeout_s: float | None = None
    stop_timeout_s: float | None = None
    plan_lead_s: float | None = None
    #: Periodic checkpoints of jobs that set none themselves (spec.checkpoint_every_s); 0 = none.
    checkpoint_every_s: float = 0.0
    max_message_mb: float = 4.0
    #: Renewal streams open at once (one per running job rank; RenewLeaseStream). Beyond it a
    #: job renews by unary calls; gRPC's own limit on concurrent calls is this plus
    #: `server.CALL_HEADROOM`, so heartbeats and other calls always find room.
    max_renewal_streams: int = 32768
    #: Calls a second (renewals + heartbeats) the round's cadence may ask of synergyd before
    #: both intervals are stretched (cadence.py); 0 = no cap.
    max_rpc_rate: float = 2000.0
    #: Ended jobs whose records stay in memory, those that ended last; older ones are read
    #: from the state dir's database when asked for (store/sqlite.py).
    finished_jobs_in_memory: int = 10_000
    log_level: str = "info"
    log_format: str = "json"
    #: What runs the jobs: "agent" (synergy-agent on every node) or "slurm" (docs/slurm.md).
    backend: str = "agent"
    slurm_partition: str = ""
    slurm_work_dir: Path | None = None
    slurm_job_daemon_address: str = ""
    slurm_pending_s: float = 60.0
    #: Start on a partition anyone may submit to (every group, account and QOS allowed).
    slurm_allow_open_partition: bool = False

    @property
    def resizes_in_place(self) -> bool:
        """Whether a running task's CPU / memory share can change under it (our agent: yes;
        Slurm: no, a resize is a stop and a new Slurm job)."""
        return self.backend == "agent"

    @property
    def unix_socket_path(self) -> Path | None:
        """Where the local Unix socket listens (None: --unix-socket off)."""
        if self.unix_socket is None:
            return self.state_dir / SOCKET_FILE
        return None if str(self.unix_socket) == "off" else self.unix_socket

    @property
    def cpu_array(self) -> CpuArray:
        """The core's CPU-array setting (checked by `load_config`)."""
        return array_settings.cpu_array(self.borrow_fraction, self.trim_training)

    # -- timings derived from the round length (each overridable) ------------------------
    @property
    def renew_interval_s(self) -> float:
        """How often job processes renew: ten times a round, between 0.1 s and 30 s."""
        return min(30.0, max(0.1, self.round_s / 10))

    @property
    def heartbeat_interval_s(self) -> float:
        return min(10.0, max(0.1, self.round_s / 10))

    @property
    def lease_grace(self) -> float:
        """A rank silent this long is lost (three missed renewals, at least 2 s)."""
        return self.lease_grace_s if self.lease_grace_s is not None else max(3 * self.renew_interval_s, 2.0)

    @property
    def node_timeout(self) -> float:
        return self.node_timeout_s if self.node_timeout_s is not None else max(3 * self.heartbeat_interval_s, 3.0)

    @property
    def heartbeat_window(self) -> float:
        """A node silent this long gets no new work (two missed heartbeats, at least 1 s, at
        most the node timeout): shorter than the lease grace, so the jobs of a silent node
        are not placed back on it between their lease expiry and the node's timeout."""
        return min(self.node_timeout, max(2 * self.heartbeat_interval_s, 1.0))

    @property
    def launch_timeout(self) -> float:
        """Time from a launch decision to the first renewal of every rank."""
        return self.launch_timeout_s if self.launch_timeout_s is not None else max(120.0, self.round_s)

    @property
    def stop_timeout(self) -> float:
        """Time a job has to checkpoint and exit before its agent kills it."""
        return self.stop_timeout_s if self.stop_timeout_s is not None else max(120.0, self.round_s / 2)

    @property
    def plan_lead(self) -> float:
        """How long before the boundary the next round is decided."""
        return self.plan_lead_s if self.plan_lead_s is not None else min(30.0, self.round_s / 10)


HELP: dict[str, str] = {
    "state_dir": "directory for the SQLite state, tokens, lock and address files "
    "(default: $SYNERGY_STATE_DIR or ~/.local/state/synergy)",
    "host": "interface to listen on (default 127.0.0.1; use 0.0.0.0 for agents on other machines)",
    "port": "gRPC port; 0 picks a free one, printed and written to STATE_DIR/address (default 50051)",
    "metrics_port": "HTTP port for Prometheus /metrics and /healthz; 0 picks a free one, written to "
    "STATE_DIR/metrics_address (default: off)",
    "dashboard_port": "HTTP port of the read-only web dashboard (docs/dashboard.md); 0 picks a free one, "
    "written to STATE_DIR/dashboard_address; it asks for a user token (or the admin token) once (default: off)",
    "dashboard_host": "interface the dashboard listens on (default 127.0.0.1: loopback only)",
    "config": "TOML file with any of these settings (keys are flag names); flags win over the file",
    "policy": f"scheduling policy: {', '.join(POLICIES)} (default fifo; changeable at runtime)",
    "mechanism": f"allocation mechanism: {', '.join(MECHANISMS)} (default tune)",
    "scorer": f"placement scorer: {', '.join(SCORERS)} (default: the mechanism's own, best_fit for tune)",
    "migration_matching": "relabel interchangeable nodes after each round's placement so the fewest running jobs "
    "move (Tesserae; on by default; --no-migration-matching, or migration-matching = false in the TOML, turns it off)",
    "borrow_fraction": array_settings.BORROW_FRACTION_HELP,
    "trim_training": array_settings.TRIM_TRAINING_HELP + "; TOML: trim-training = false",
    "round_s": "round length in seconds: allocations are decided and leases expire per round (default 300)",
    "max_job_gpus": "largest GPU count one job may request; larger requests are rejected (default 64)",
    "profiles": "JSON sensitivity-profile file merged over the built-in model zoo",
    "pairs": "JSON profile file whose \"pairs\" list (docs/profiles.md) turns on GPU sharing: Tesserae's packing "
    "runs a waiting job on the GPUs of a placed one (two jobs per GPU at most) when the pair's combined "
    "normalised throughput is above 1; may be the --profiles file (default: off)",
    "cluster_token_file": "file holding the token agents present (default STATE_DIR/cluster.token, "
    "generated on first start)",
    "admin_token_file": "file holding the token of the built-in admin user 'admin' (default "
    "STATE_DIR/admin.token, generated on first start)",
    "tls_cert": "PEM server certificate: serve TLS instead of plaintext (needs --tls-key)",
    "tls_key": "PEM private key of --tls-cert",
    "tls_client_ca": "PEM CA: agents must present a client certificate it signed (mutual TLS)",
    "agent_port": "with --tls-client-ca: port where agents connect presenting client certificates "
    "(0 picks a free one, written to STATE_DIR/agent_address; default 0)",
    "unix_socket": "local Unix socket where users of this machine call synergyd with no token: the kernel's peer "
    "credentials name the Unix user (root and synergyd's own user are admins); mode 0666; 'off' for none "
    "(default STATE_DIR/synergyd.sock; the state dir is then 0711 so others can reach it)",
    "lease_grace_s": "a job rank that has not renewed for this long is lost and requeued "
    "(default: 3 renew intervals, at least 2 s)",
    "node_timeout_s": "a node without heartbeat for this long is lost and its jobs requeued "
    "(default: 3 heartbeat intervals, at least 3 s)",
    "launch_timeout_s": "time from a launch decision to every rank's first renewal (default: max(120, round))",
    "stop_timeout_s": "time a job asked to stop has to checkpoint and exit before its agent kills it "
    "(default: max(120, round/2))",
    "plan_lead_s": "decide the next round this long before its boundary (default: round/10, at most 30)",
    "checkpoint_every_s": "seconds between periodic background checkpoints of jobs with a checkpoint_dir that "
    "set no checkpoint_every_s of their own (default 0: none; 1 to 604800)",
    "max_message_mb": f"largest gRPC message accepted, in MiB, {MAX_MESSAGE_MB_RANGE[0]} to "
    f"{MAX_MESSAGE_MB_RANGE[1]} (default 4)",
    "max_renewal_streams": "renewal streams open at once, one per running job rank (default 32768, 1 to 1000000); "
    "beyond it a job renews by separate calls; gRPC admits this many calls at once plus 8192 for heartbeats "
    "and everything else",
    "max_rpc_rate": "renewals and heartbeats a second the round's cadence may ask of synergyd (ranks placed / renew "
    "interval + nodes / heartbeat interval); past it synergyd stretches both intervals, and the lease and node "
    "timeouts with them, in steps of 1.41x until it fits, so an overloaded daemon slows its clients down rather "
    "than losing them (docs/daemon.md, \"Cadence under load\"; 0 = no cap; default 2000)",
    "finished_jobs_in_memory": "records of ended jobs kept in memory, those that ended last (default 10000, "
    "0 to 10000000); older ones stay in the database and are read back when listed or described, so a "
    "long-lived synergyd does not grow with its history (5-11 KB per ended job in memory)",
    "log_level": "debug, info, warning or error (default info)",
    "log_format": "json (one object per line, default) or text",
    "backend": "what runs the jobs: agent (synergy-agent on every node, the default) or slurm (a Slurm partition "
    "runs them as Slurm jobs; needs --slurm-partition; docs/slurm.md)",
    "slurm_partition": "with --backend slurm: the Slurm partition whose nodes are Synergy's alone",
    "slurm_work_dir": "with --backend slurm: where task logs go, visible to every node (default STATE_DIR/slurm)",
    "slurm_job_daemon_address": "with --backend slurm: HOST:PORT the jobs use to reach synergyd "
    "(default: the address synergyd listens on)",
    "slurm_pending_s": "with --backend slurm: a launch Slurm keeps pending this long is cancelled and the job "
    "requeued with Slurm's reason (default 60)",
    "slurm_allow_open_partition": "with --backend slurm: start even though every group, account and QOS may "
    "submit to the partition (refused by default: Slurm could put other work on Synergy's resources)",
}

_PATHS = {"state_dir", "slurm_work_dir", "profiles", "pairs", "cluster_token_file", "admin_token_file", "tls_cert",
          "tls_key", "tls_client_ca", "unix_socket"}
_TYPES: dict[str, type] = {f.name: f.type for f in fields(DaemonConfig)}  # type: ignore[misc]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="synergyd",
        description="Synergy scheduler daemon: resource-sensitive rounds over gRPC "
        "(services JobService, NodeService, AdminService; see docs/daemon.md).",
        argument_default=argparse.SUPPRESS,
    )
    for name, text in HELP.items():
        flag = "--" + name.replace("_", "-")
        if name == "config":
            parser.add_argument(flag, metavar="FILE.toml", help=text)
            continue
        kind = str(_TYPES[name])
        if kind == "bool":  # on by default: --no-NAME turns it off; off by default: --NAME turns it on
            if getattr(DaemonConfig, name):
                parser.add_argument("--no-" + name.replace("_", "-"), dest=name, action="store_false", help=text)
            else:
                parser.add_argument(flag, dest=name, action="store_true", help=text)
            continue
        convert: Any = float if "float" in kind else int if "int" in kind else str
        metavar = (
            "DIR"
            if name in ("state_dir", "slurm_work_dir")
            else "FILE"
            if name in _PATHS
            else "SECONDS"
            if name.endswith("_s")
            else "NAME"
            if name in ("policy", "mechanism", "scorer")
            else "F"
            if name == "borrow_fraction"
            else "N"
            if convert is not str
            else name.split("_")[-1].upper()
        )
        parser.add_argument(flag, dest=name, type=convert, metavar=metavar, help=text)
    return parser


def load_config(argv: Sequence[str] | None = None) -> DaemonConfig:
    """Flags over TOML over defaults; raises ConfigError naming the bad setting."""
    args = vars(build_parser().parse_args(argv))
    values: dict[str, Any] = {}
    config_file = args.pop("config", None)
    if config_file is not None:
        values.update(_read_toml(Path(config_file)))
    values.update(args)
    values.setdefault("state_dir", str(default_state_dir()))
    for key in _PATHS:
        if values.get(key) is not None:
            values[key] = Path(str(values[key])).expanduser()
    config = DaemonConfig(**values)
    _validate(config)
    return config


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        doc = tomllib.loads(path.read_text())
    except OSError as exc:
        raise ConfigError(f"--config {path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config {path}: not valid TOML ({exc})") from None
    out: dict[str, Any] = {}
    for key, value in doc.items():
        name = key.replace("-", "_")
        if name not in HELP or name == "config":
            raise ConfigError(f"--config {path}: unknown key {key!r}")
        kind = str(_TYPES[name])
        ok = (
            isinstance(value, bool)
            if kind == "bool"
            else isinstance(value, str)
            if name in _PATHS or kind.startswith("str")
            else isinstance(value, (int, float)) and not isinstance(value, bool)
        )
        if not ok:
            raise ConfigError(f"--config {path}: key {key!r} has the wrong type ({type(value).__name__})")
        out[name] = value
    return out


def _validate(c: DaemonConfig) -> None:
    def positive(flag: str, v: float | None) -> None:
        if v is not None and (not math.isfinite(v) or v <= 0):
            raise ConfigError(f"--{flag} must be a positive number, got {v}")

    if c.policy not in POLICIES:
        raise ConfigError(f"--policy: unknown policy {c.policy!r}; choose one of {', '.join(POLICIES)}")
    if c.mechanism not in MECHANISMS:
        raise ConfigError(f"--mechanism: unknown mechanism {c.mechanism!r}; choose one of {', '.join(MECHANISMS)}")
    if c.scorer and c.scorer not in SCORERS:
        raise ConfigError(f"--scorer: unknown scorer {c.scorer!r}; choose one of {', '.join(SCORERS)}")
    for flag, port in (("port", c.port), ("metrics-port", c.metrics_port), ("agent-port", c.agent_port),
                       ("dashboard-port", c.dashboard_port)):
        if port is not None and not 0 <= int(port) <= 65535:
            raise ConfigError(f"--{flag} must be between 0 and 65535, got {port}")
    try:
        array_settings.cpu_array(c.borrow_fraction, c.trim_training)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    positive("round-s", c.round_s)
    positive("lease-grace-s", c.lease_grace_s)
    positive("node-timeout-s", c.node_timeout_s)
    positive("launch-timeout-s", c.launch_timeout_s)
    positive("stop-timeout-s", c.stop_timeout_s)
    try:
        rules.checkpoint_every_s(c.checkpoint_every_s, "--checkpoint-every-s")
    except SpecError as exc:
        raise ConfigError(str(exc)) from None
    if not 1 <= c.max_renewal_streams <= 1_000_000:
        raise ConfigError(f"--max-renewal-streams must be from 1 to 1000000, got {c.max_renewal_streams}")
    if not 0 <= c.finished_jobs_in_memory <= 10_000_000:
        raise ConfigError(f"--finished-jobs-in-memory must be from 0 to 10000000, got {c.finished_jobs_in_memory}")
    if not (math.isfinite(c.max_rpc_rate) and c.max_rpc_rate >= 0):
        raise ConfigError(f"--max-rpc-rate must be a number >= 0 (0: no cap), got {c.max_rpc_rate:g}")
    low, high = MAX_MESSAGE_MB_RANGE
    if not (math.isfinite(c.max_message_mb) and low <= c.max_message_mb <= high):
        raise ConfigError(
            f"--max-message-mb must be between {low} and {high} (gRPC's limit is 2 GiB), got {c.max_message_mb:g}"
        )
    if c.plan_lead_s is not None and not (0 <= c.plan_lead_s < c.round_s):
        raise ConfigError(f"--plan-lead-s must be >= 0 and below --round-s, got {c.plan_lead_s}")
    if c.max_job_gpus < 1:
        raise ConfigError(f"--max-job-gpus must be at least 1, got {c.max_job_gpus}")
    if (c.tls_cert is None) != (c.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    if c.tls_client_ca is not None and c.tls_cert is None:
        raise ConfigError("--tls-client-ca needs --tls-cert and --tls-key")
    if c.log_level not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"--log-level must be debug, info, warning or error, got {c.log_level!r}")
    if c.log_format not in ("json", "text"):
        raise ConfigError(f"--log-format must be json or text, got {c.log_format!r}")
    if c.backend not in ("agent", "slurm"):
        raise ConfigError(f"--backend must be agent or slurm, got {c.backend!r}")
    if c.backend == "slurm" and not c.slurm_partition:
        raise ConfigError("--backend slurm needs --slurm-partition NAME (the partition Synergy runs jobs on)")
    positive("slurm-pending-s", c.slurm_pending_s)
    if c.pairs is not None and c.pairs.is_file():
        _check_pairs(c.pairs)
    for name in ("profiles", "pairs", "tls_cert", "tls_key", "tls_client_ca", "cluster_token_file", "admin_token_file"):
        path = getattr(c, name)
        if path is not None and name not in ("cluster_token_file", "admin_token_file") and not path.is_file():
            raise ConfigError(f"--{name.replace('_', '-')}: no such file {path}")


def _check_pairs(path: Path) -> None:
    """A --pairs file must load and hold at least one pair: packing that can never pair is a
    mistake worth stopping for, not a silent no-op."""
    try:
        table = load_pairs(path)
    except ProfileError as exc:
        raise ConfigError(f"--pairs: {exc}") from None
    if not len(table):
        has_list = PAIRS_KEY in (read_profile_file(path) or {})
        what = f"its {PAIRS_KEY!r} list is empty" if has_list else f"the file has no {PAIRS_KEY!r} list"
        raise ConfigError(f"--pairs {path}: {what}: nothing could ever be packed (docs/profiles.md)")
