from synergy.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LeaseAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LEASE_ACTION_UNSPECIFIED: _ClassVar[LeaseAction]
    LEASE_ACTION_CONTINUE: _ClassVar[LeaseAction]
    LEASE_ACTION_STOP: _ClassVar[LeaseAction]
    LEASE_ACTION_TERMINATE: _ClassVar[LeaseAction]

class CompletionOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPLETION_OUTCOME_UNSPECIFIED: _ClassVar[CompletionOutcome]
    COMPLETION_OUTCOME_SUCCEEDED: _ClassVar[CompletionOutcome]
    COMPLETION_OUTCOME_FAILED: _ClassVar[CompletionOutcome]
LEASE_ACTION_UNSPECIFIED: LeaseAction
LEASE_ACTION_CONTINUE: LeaseAction
LEASE_ACTION_STOP: LeaseAction
LEASE_ACTION_TERMINATE: LeaseAction
COMPLETION_OUTCOME_UNSPECIFIED: CompletionOutcome
COMPLETION_OUTCOME_SUCCEEDED: CompletionOutcome
COMPLETION_OUTCOME_FAILED: CompletionOutcome

class Lease(_message.Message):
    __slots__ = ("job_id", "attempt", "expires_at_unix_s", "placements", "round_index")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    ROUND_INDEX_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    expires_at_unix_s: float
    placements: _containers.RepeatedCompositeFieldContainer[_common_pb2.Placement]
    round_index: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., expires_at_unix_s: _Optional[float] = ..., placements: _Optional[_Iterable[_Union[_common_pb2.Placement, _Mapping]]] = ..., round_index: _Optional[int] = ...) -> None: ...

class Allocation(_message.Message):
    __slots__ = ("cpus", "cores", "mem_gb", "known")
    CPUS_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    MEM_GB_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    cpus: float
    cores: _containers.RepeatedScalarFieldContainer[int]
    mem_gb: float
    known: bool
    def __init__(self, cpus: _Optional[float] = ..., cores: _Optional[_Iterable[int]] = ..., mem_gb: _Optional[float] = ..., known: _Optional[bool] = ...) -> None: ...

class ProfilingLease(_message.Message):
    __slots__ = ("search", "max_cpus", "task", "gpus", "max_mem_gb", "sub_core", "in_force_only")
    SEARCH_FIELD_NUMBER: _ClassVar[int]
    MAX_CPUS_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    MAX_MEM_GB_FIELD_NUMBER: _ClassVar[int]
    SUB_CORE_FIELD_NUMBER: _ClassVar[int]
    IN_FORCE_ONLY_FIELD_NUMBER: _ClassVar[int]
    search: str
    max_cpus: int
    task: str
    gpus: int
    max_mem_gb: float
    sub_core: bool
    in_force_only: bool
    def __init__(self, search: _Optional[str] = ..., max_cpus: _Optional[int] = ..., task: _Optional[str] = ..., gpus: _Optional[int] = ..., max_mem_gb: _Optional[float] = ..., sub_core: _Optional[bool] = ..., in_force_only: _Optional[bool] = ...) -> None: ...

class RegisterJobProcessRequest(_message.Message):
    __slots__ = ("job_id", "attempt", "rank", "world_size", "node_id", "hostname", "pid")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    rank: int
    world_size: int
    node_id: str
    hostname: str
    pid: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., node_id: _Optional[str] = ..., hostname: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class RegisterJobProcessResponse(_message.Message):
    __slots__ = ("lease", "renew_interval_s", "resume_checkpoint_path", "resume_step", "profiling")
    LEASE_FIELD_NUMBER: _ClassVar[int]
    RENEW_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    RESUME_CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    RESUME_STEP_FIELD_NUMBER: _ClassVar[int]
    PROFILING_FIELD_NUMBER: _ClassVar[int]
    lease: Lease
    renew_interval_s: float
    resume_checkpoint_path: str
    resume_step: int
    profiling: ProfilingLease
    def __init__(self, lease: _Optional[_Union[Lease, _Mapping]] = ..., renew_interval_s: _Optional[float] = ..., resume_checkpoint_path: _Optional[str] = ..., resume_step: _Optional[int] = ..., profiling: _Optional[_Union[ProfilingLease, _Mapping]] = ...) -> None: ...

class ReportProfileRequest(_message.Message):
    __slots__ = ("job_id", "profile")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    profile: _common_pb2.SensitivityProfile
    def __init__(self, job_id: _Optional[int] = ..., profile: _Optional[_Union[_common_pb2.SensitivityProfile, _Mapping]] = ...) -> None: ...

class ReportProfileResponse(_message.Message):
    __slots__ = ("profile_source",)
    PROFILE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    profile_source: str
    def __init__(self, profile_source: _Optional[str] = ...) -> None: ...

class RenewLeaseRequest(_message.Message):
    __slots__ = ("job_id", "attempt", "rank", "step", "samples_per_s", "steps_per_s", "profile_cpus", "cache", "profile_sub_cpus", "answer_every")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_S_FIELD_NUMBER: _ClassVar[int]
    PROFILE_CPUS_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_SUB_CPUS_FIELD_NUMBER: _ClassVar[int]
    ANSWER_EVERY_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    rank: int
    step: int
    samples_per_s: float
    steps_per_s: float
    profile_cpus: int
    cache: _common_pb2.CacheStats
    profile_sub_cpus: float
    answer_every: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ..., step: _Optional[int] = ..., samples_per_s: _Optional[float] = ..., steps_per_s: _Optional[float] = ..., profile_cpus: _Optional[int] = ..., cache: _Optional[_Union[_common_pb2.CacheStats, _Mapping]] = ..., profile_sub_cpus: _Optional[float] = ..., answer_every: _Optional[int] = ...) -> None: ...

class RenewLeaseResponse(_message.Message):
    __slots__ = ("action", "lease", "stop_at_step", "reason", "renew_interval_s", "in_force", "profiling", "checkpoint_at_step")
    ACTION_FIELD_NUMBER: _ClassVar[int]
    LEASE_FIELD_NUMBER: _ClassVar[int]
    STOP_AT_STEP_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RENEW_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    IN_FORCE_FIELD_NUMBER: _ClassVar[int]
    PROFILING_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_AT_STEP_FIELD_NUMBER: _ClassVar[int]
    action: LeaseAction
    lease: Lease
    stop_at_step: int
    reason: str
    renew_interval_s: float
    in_force: Allocation
    profiling: ProfilingLease
    checkpoint_at_step: int
    def __init__(self, action: _Optional[_Union[LeaseAction, str]] = ..., lease: _Optional[_Union[Lease, _Mapping]] = ..., stop_at_step: _Optional[int] = ..., reason: _Optional[str] = ..., renew_interval_s: _Optional[float] = ..., in_force: _Optional[_Union[Allocation, _Mapping]] = ..., profiling: _Optional[_Union[ProfilingLease, _Mapping]] = ..., checkpoint_at_step: _Optional[int] = ...) -> None: ...

class RenewLeaseStreamResponse(_message.Message):
    __slots__ = ("reply", "code", "message")
    REPLY_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    reply: RenewLeaseResponse
    code: int
    message: str
    def __init__(self, reply: _Optional[_Union[RenewLeaseResponse, _Mapping]] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReportCheckpointRequest(_message.Message):
    __slots__ = ("job_id", "attempt", "step", "path", "error")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    step: int
    path: str
    error: str
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., step: _Optional[int] = ..., path: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ReportCheckpointResponse(_message.Message):
    __slots__ = ("resume_step",)
    RESUME_STEP_FIELD_NUMBER: _ClassVar[int]
    resume_step: int
    def __init__(self, resume_step: _Optional[int] = ...) -> None: ...

class ReportCompletionRequest(_message.Message):
    __slots__ = ("job_id", "attempt", "outcome", "step", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    outcome: CompletionOutcome
    step: int
    message: str
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., outcome: _Optional[_Union[CompletionOutcome, str]] = ..., step: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReportCompletionResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.JobState
    def __init__(self, state: _Optional[_Union[_common_pb2.JobState, str]] = ...) -> None: ...
