"""The job spec dataclass and the error every rule about it raises."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


#: Job kinds a spec may name ("" = training).
KIND_TRAINING = "training"
KIND_CPU = "cpu"
KINDS = ("", KIND_TRAINING, KIND_CPU)

#: How a job's profile is found ("" = auto): see `JobSpec.profiler`.
PROFILER_AUTO = "auto"
PROFILER_SYNERGY = "synergy"
PROFILER_CODA = "coda"
PROFILER_NONE = "none"
PROFILERS = ("", PROFILER_AUTO, PROFILER_SYNERGY, PROFILER_CODA, PROFILER_NONE)


class SpecError(ValueError):
    """A spec field breaks a rule.

    `field` is the field's proto path (`spec.gpus`, `spec.env[HOME]`, `job`): the daemon
    answers INVALID_ARGUMENT with `str(exc)` and the CLI prints the same sentence, so a
    user finds the culprit in admin.proto whichever side refused it. `field` is "" for a
    problem with the whole document (an unreadable file).
    """

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


@dataclass(frozen=True)
class JobSpec:
    """What a user asks for (field meanings: `JobSpec` in protos/synergy/v1/admin.proto).

    Zero values mean "not given", as on the wire. Frozen and made of tuples so a stored
    job's spec can never change under it.
    """

    name: str
    #: argv of the training process; executed directly by the agent, never via a shell.
    command: tuple[str, ...]
    gpus: int
    #: Directory on the node ("" = the agent's default); the CLI sends an absolute path.
    working_dir: str = ""
    #: Extra environment, as sorted (name, value) pairs.
    env: tuple[tuple[str, str], ...] = ()
    #: Optional totals for the whole job (not per GPU); 0 = no hint, the profile decides.
    cpus_hint: float = 0.0
    mem_gb_hint: float = 0.0
    #: Profile-zoo model name and task class, used to pick a profile before profiling.
    model: str = ""
    task: str = ""
    checkpoint_dir: str = ""
    #: Reserved: stored, ignored by the paper's policies.
    priority: int = 0
    #: Total training steps, for remaining-time policies (SRTF, FTF); 0 = unknown.
    iterations: int = 0
    #: Lyra-style elastic range in GPUs; 0 = unset (a fixed-size job). The core sizes an
    #: elastic job each round within it (scheduler/elastic/).
    min_gpus: int = 0
    max_gpus: int = 0
    #: A profile measured beforehand, in the JSON profile format's per-model form.
    profile: Mapping[str, Any] | None = None
    #: "" or "training" (GPU training) or "cpu" (CPU-only: gpus 0, cpus_hint and mem_gb_hint
    #: are then its request, not hints).
    kind: str = ""
    #: "" / "auto": profile live only when no profile is known; "synergy" / "coda": always
    #: profile live with that search; "none": never (stand-in or proportional share).
    profiler: str = ""
    #: GPU types the job accepts ("T4", "V100"; synergy.scheduler.gpu_type_names), empty = any.
    gpu_types: tuple[str, ...] = ()
    #: May it run on loaned servers (Lyra)? None = the core's default rule (elastic or short).
    loanable: bool | None = None
    #: Never share a GPU with another job (Tesserae's packing pairs at most two jobs per GPU
    #: and skips this one): for jobs that must not be slowed by a partner.
    no_share: bool = False
    #: Who the job belongs to: CODA's CPU array shares CPUs between users by DRF. "" = the
    #: job is its own user. A label, not an identity (the admin token names no user).
    user: str = ""
    #: Seconds between periodic background checkpoints (docs/iterator.md); 0 = the cluster's
    #: default (synergyd --checkpoint-every-s).
    checkpoint_every_s: float = 0.0

    @property
    def cpu_only(self) -> bool:
        return self.kind == KIND_CPU

    @property
    def profile_search(self) -> str:
        """The live search a profiling lease runs: "coda" when asked for, else "synergy"."""
        return PROFILER_CODA if self.profiler == PROFILER_CODA else PROFILER_SYNERGY

    @property
    def env_dict(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def elastic(self) -> bool:
        return bool(self.min_gpus or self.max_gpus)
