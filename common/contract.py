"""The environment contract between the agent and a job's processes: the one place it lives.

The agent writes these variables into every task's environment at launch; the job-side
iterator (`synergy.iterator`) reads them with `JobEnv.from_env()`. Names are constants here
and nowhere else (AdaptDL's `env.py` pattern). The job token travels only this way: it is
never put on a command line, in a log line or in the agent's state file.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields
from typing import Mapping

JOB_ID = "SYNERGY_JOB_ID"
JOB_NAME = "SYNERGY_JOB_NAME"
ATTEMPT = "SYNERGY_ATTEMPT"
RANK = "SYNERGY_RANK"
WORLD_SIZE = "SYNERGY_WORLD_SIZE"
MASTER_ADDR = "SYNERGY_MASTER_ADDR"
MASTER_PORT = "SYNERGY_MASTER_PORT"
JOB_TOKEN = "SYNERGY_JOB_TOKEN"
DAEMON_ADDRESS = "SYNERGY_DAEMON_ADDRESS"
TLS_CA = "SYNERGY_TLS_CA"
NODE_ID = "SYNERGY_NODE_ID"
ALLOC_CPUS = "SYNERGY_ALLOC_CPUS"
ALLOC_CORES = "SYNERGY_ALLOC_CORES"
ALLOC_MEM_GB = "SYNERGY_ALLOC_MEM_GB"
ALLOC_GPUS = "SYNERGY_ALLOC_GPUS"
CHECKPOINT_DIR = "SYNERGY_CHECKPOINT_DIR"
RESUME_CHECKPOINT = "SYNERGY_RESUME_CHECKPOINT"
RESUME_STEP = "SYNERGY_RESUME_STEP"
#: "FD:INODE" of the job's end of its start-up socket (synergy.common.startup); absent: no start-up
#: phase. Not part of `JobEnv`: it belongs to the one process the agent started, which consumes it.
STARTUP_FD = "SYNERGY_STARTUP_FD"

#: gRPC settings every job process gets (the job's own env may override them). A DataLoader
#: forks workers while the iterator's lease channel is live; without gRPC's fork handlers a
#: child can abort in gRPC's poller ("Check failed: next_worker->state == KICKED"). gRPC reads
#: these once, when it is first imported, so they must be in the environment before the
#: script imports grpc (directly, or through any library) in whatever order it imports things.
#: The poller is epoll1 (gRPC's Linux default, named so that an inherited setting cannot
#: change it): fork support works with it, while the `poll` poller logs
#: `FD from fork parent still in poll list` in every child forked beside a live channel
#: (every DataLoader worker of every epoch; issue 15).
GRPC_FORK_ENV = (("GRPC_ENABLE_FORK_SUPPORT", "true"), ("GRPC_POLL_STRATEGY", "epoll1"))

#: Rendezvous ports are derived from (job, attempt) so every rank agrees without a message.
MASTER_PORT_BASE = 29500
MASTER_PORT_SPAN = 20000


def master_port(job_id: int, attempt: int) -> int:
    """The rendezvous port of one attempt (the same on every node, new for every attempt)."""
    return MASTER_PORT_BASE + (job_id * 131 + attempt) % MASTER_PORT_SPAN


@dataclass(frozen=True)
class JobEnv:
    """What a job process learns about itself from its environment."""

    job_id: int
    attempt: int
    rank: int
    world_size: int
    daemon_address: str
    job_token: str = field(repr=False)
    job_name: str = ""
    master_addr: str = ""
    master_port: int = 0
    tls_ca: str = ""
    node_id: str = ""
    alloc_cpus: float = 0.0
    #: The concrete cores the task may run on, as a Linux cpu list ("2-3").
    alloc_cores: str = ""
    alloc_mem_gb: float = 0.0
    alloc_gpus: int = 0
    checkpoint_dir: str = ""
    resume_checkpoint: str = ""
    resume_step: int = 0

    def to_env(self) -> dict[str, str]:
        values = asdict(self)
        return {_NAMES[k]: str(v) for k, v in values.items()}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> JobEnv:
        """Parse the contract; ValueError names the variable that is missing or malformed."""
        env = os.environ if environ is None else environ
        kwargs: dict[str, object] = {}
        for f in fields(cls):
            name = _NAMES[f.name]
            if name not in env:
                if f.name in _REQUIRED:
                    raise ValueError(f"{name} is not set: not started by synergy-agent?")
                continue
            raw = env[name]
            try:
                kwargs[f.name] = _TYPES[f.name](raw)
            except ValueError:
                raise ValueError(f"{name}={raw!r} is not a valid {_TYPES[f.name].__name__}") from None
        return cls(**kwargs)  # type: ignore[arg-type]


_NAMES = {
    "job_id": JOB_ID,
    "attempt": ATTEMPT,
    "rank": RANK,
    "world_size": WORLD_SIZE,
    "daemon_address": DAEMON_ADDRESS,
    "job_token": JOB_TOKEN,
    "job_name": JOB_NAME,
    "master_addr": MASTER_ADDR,
    "master_port": MASTER_PORT,
    "tls_ca": TLS_CA,
    "node_id": NODE_ID,
    "alloc_cpus": ALLOC_CPUS,
    "alloc_cores": ALLOC_CORES,
    "alloc_mem_gb": ALLOC_MEM_GB,
    "alloc_gpus": ALLOC_GPUS,
    "checkpoint_dir": CHECKPOINT_DIR,
    "resume_checkpoint": RESUME_CHECKPOINT,
    "resume_step": RESUME_STEP,
}
_REQUIRED = {"job_id", "attempt", "rank", "world_size", "daemon_address", "job_token"}
_TYPES = {f.name: {"int": int, "float": float, "str": str}[str(f.type)] for f in fields(JobEnv)}
