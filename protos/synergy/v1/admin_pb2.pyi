from synergy.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobSpec(_message.Message):
    __slots__ = ("name", "command", "working_dir", "env", "gpus", "cpus_hint", "mem_gb_hint", "model", "task", "checkpoint_dir", "priority", "iterations", "min_gpus", "max_gpus", "profile", "kind", "profiler", "gpu_types", "loanable", "no_share", "user", "checkpoint_every_s")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_HINT_FIELD_NUMBER: _ClassVar[int]
    MEM_GB_HINT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MIN_GPUS_FIELD_NUMBER: _ClassVar[int]
    MAX_GPUS_FIELD_NUMBER: _ClassVar[int]
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PROFILER_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPES_FIELD_NUMBER: _ClassVar[int]
    LOANABLE_FIELD_NUMBER: _ClassVar[int]
    NO_SHARE_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    command: _containers.RepeatedScalarFieldContainer[str]
    working_dir: str
    env: _containers.ScalarMap[str, str]
    gpus: int
    cpus_hint: float
    mem_gb_hint: float
    model: str
    task: str
    checkpoint_dir: str
    priority: int
    iterations: int
    min_gpus: int
    max_gpus: int
    profile: _common_pb2.SensitivityProfile
    kind: str
    profiler: str
    gpu_types: _containers.RepeatedScalarFieldContainer[str]
    loanable: bool
    no_share: bool
    user: str
    checkpoint_every_s: float
    def __init__(self, name: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., working_dir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., gpus: _Optional[int] = ..., cpus_hint: _Optional[float] = ..., mem_gb_hint: _Optional[float] = ..., model: _Optional[str] = ..., task: _Optional[str] = ..., checkpoint_dir: _Optional[str] = ..., priority: _Optional[int] = ..., iterations: _Optional[int] = ..., min_gpus: _Optional[int] = ..., max_gpus: _Optional[int] = ..., profile: _Optional[_Union[_common_pb2.SensitivityProfile, _Mapping]] = ..., kind: _Optional[str] = ..., profiler: _Optional[str] = ..., gpu_types: _Optional[_Iterable[str]] = ..., loanable: _Optional[bool] = ..., no_share: _Optional[bool] = ..., user: _Optional[str] = ..., checkpoint_every_s: _Optional[float] = ...) -> None: ...

class JobTransition(_message.Message):
    __slots__ = ("from_state", "to_state", "reason", "at_unix_s")
    FROM_STATE_FIELD_NUMBER: _ClassVar[int]
    TO_STATE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    from_state: _common_pb2.JobState
    to_state: _common_pb2.JobState
    reason: str
    at_unix_s: float
    def __init__(self, from_state: _Optional[_Union[_common_pb2.JobState, str]] = ..., to_state: _Optional[_Union[_common_pb2.JobState, str]] = ..., reason: _Optional[str] = ..., at_unix_s: _Optional[float] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("id", "name", "spec", "state", "state_reason", "waiting_reason", "history", "submitted_at_unix_s", "started_at_unix_s", "finished_at_unix_s", "placements", "attempt", "steps_done", "samples_per_s", "attained_gpu_s", "preemptions", "last_checkpoint_path", "last_checkpoint_step", "exit_code", "profile_source", "lease_expires_at_unix_s", "stop_at_step", "tasks", "proportional_share", "cache", "packed_with_job_id", "last_checkpoint_unix_s", "last_checkpoint_error")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    WAITING_REASON_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    PLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    STEPS_DONE_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_PER_S_FIELD_NUMBER: _ClassVar[int]
    ATTAINED_GPU_S_FIELD_NUMBER: _ClassVar[int]
    PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_STEP_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PROFILE_SOURCE_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    STOP_AT_STEP_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    PROPORTIONAL_SHARE_FIELD_NUMBER: _ClassVar[int]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    PACKED_WITH_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_ERROR_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    spec: JobSpec
    state: _common_pb2.JobState
    state_reason: str
    waiting_reason: str
    history: _containers.RepeatedCompositeFieldContainer[JobTransition]
    submitted_at_unix_s: float
    started_at_unix_s: float
    finished_at_unix_s: float
    placements: _containers.RepeatedCompositeFieldContainer[_common_pb2.Placement]
    attempt: int
    steps_done: int
    samples_per_s: float
    attained_gpu_s: float
    preemptions: int
    last_checkpoint_path: str
    last_checkpoint_step: int
    exit_code: int
    profile_source: str
    lease_expires_at_unix_s: float
    stop_at_step: int
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    proportional_share: _common_pb2.Resources
    cache: _common_pb2.CacheStats
    packed_with_job_id: int
    last_checkpoint_unix_s: float
    last_checkpoint_error: str
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[_common_pb2.JobState, str]] = ..., state_reason: _Optional[str] = ..., waiting_reason: _Optional[str] = ..., history: _Optional[_Iterable[_Union[JobTransition, _Mapping]]] = ..., submitted_at_unix_s: _Optional[float] = ..., started_at_unix_s: _Optional[float] = ..., finished_at_unix_s: _Optional[float] = ..., placements: _Optional[_Iterable[_Union[_common_pb2.Placement, _Mapping]]] = ..., attempt: _Optional[int] = ..., steps_done: _Optional[int] = ..., samples_per_s: _Optional[float] = ..., attained_gpu_s: _Optional[float] = ..., preemptions: _Optional[int] = ..., last_checkpoint_path: _Optional[str] = ..., last_checkpoint_step: _Optional[int] = ..., exit_code: _Optional[int] = ..., profile_source: _Optional[str] = ..., lease_expires_at_unix_s: _Optional[float] = ..., stop_at_step: _Optional[int] = ..., tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ..., proportional_share: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., cache: _Optional[_Union[_common_pb2.CacheStats, _Mapping]] = ..., packed_with_job_id: _Optional[int] = ..., last_checkpoint_unix_s: _Optional[float] = ..., last_checkpoint_error: _Optional[str] = ...) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("rank", "node_id", "state", "pid", "usage", "throttle", "backend_job")
    RANK_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_JOB_FIELD_NUMBER: _ClassVar[int]
    rank: int
    node_id: str
    state: str
    pid: int
    usage: _common_pb2.ResourceUsage
    throttle: _common_pb2.TaskThrottle
    backend_job: str
    def __init__(self, rank: _Optional[int] = ..., node_id: _Optional[str] = ..., state: _Optional[str] = ..., pid: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.ResourceUsage, _Mapping]] = ..., throttle: _Optional[_Union[_common_pb2.TaskThrottle, _Mapping]] = ..., backend_job: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobInfo
    def __init__(self, job: _Optional[_Union[JobInfo, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "limit", "page_size", "page_token", "all_users")
    STATES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ALL_USERS_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[_common_pb2.JobState]
    limit: int
    page_size: int
    page_token: str
    all_users: bool
    def __init__(self, states: _Optional[_Iterable[_Union[_common_pb2.JobState, str]]] = ..., limit: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., all_users: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class DescribeJobRequest(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: str
    def __init__(self, job: _Optional[str] = ...) -> None: ...

class DescribeJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobInfo
    def __init__(self, job: _Optional[_Union[JobInfo, _Mapping]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job", "reason")
    JOB_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job: str
    reason: str
    def __init__(self, job: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobInfo
    def __init__(self, job: _Optional[_Union[JobInfo, _Mapping]] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("node_id", "hostname", "state", "state_reason", "capacity", "reserved", "allocatable", "allocated", "free", "gpus", "telemetry", "last_heartbeat_unix_s", "registered_at_unix_s", "job_ids", "agent_version", "cgroup_mode", "memory_enforced", "throttled_tasks", "pool", "gpu_type", "backend_jobs")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    ALLOCATABLE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_FIELD_NUMBER: _ClassVar[int]
    LAST_HEARTBEAT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CGROUP_MODE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ENFORCED_FIELD_NUMBER: _ClassVar[int]
    THROTTLED_TASKS_FIELD_NUMBER: _ClassVar[int]
    POOL_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    BACKEND_JOBS_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    hostname: str
    state: _common_pb2.NodeState
    state_reason: str
    capacity: _common_pb2.Resources
    reserved: _common_pb2.Resources
    allocatable: _common_pb2.Resources
    allocated: _common_pb2.Resources
    free: _common_pb2.Resources
    gpus: _containers.RepeatedCompositeFieldContainer[_common_pb2.GpuInfo]
    telemetry: _common_pb2.NodeTelemetry
    last_heartbeat_unix_s: float
    registered_at_unix_s: float
    job_ids: _containers.RepeatedScalarFieldContainer[int]
    agent_version: str
    cgroup_mode: str
    memory_enforced: bool
    throttled_tasks: int
    pool: str
    gpu_type: str
    backend_jobs: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_id: _Optional[str] = ..., hostname: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.NodeState, str]] = ..., state_reason: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., reserved: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., allocatable: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., allocated: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., free: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., gpus: _Optional[_Iterable[_Union[_common_pb2.GpuInfo, _Mapping]]] = ..., telemetry: _Optional[_Union[_common_pb2.NodeTelemetry, _Mapping]] = ..., last_heartbeat_unix_s: _Optional[float] = ..., registered_at_unix_s: _Optional[float] = ..., job_ids: _Optional[_Iterable[int]] = ..., agent_version: _Optional[str] = ..., cgroup_mode: _Optional[str] = ..., memory_enforced: _Optional[bool] = ..., throttled_tasks: _Optional[int] = ..., pool: _Optional[str] = ..., gpu_type: _Optional[str] = ..., backend_jobs: _Optional[_Iterable[str]] = ...) -> None: ...

class LoanNodesRequest(_message.Message):
    __slots__ = ("node_ids",)
    NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    node_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, node_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class LoanNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class ReclaimNodesRequest(_message.Message):
    __slots__ = ("count", "deadline_s", "reason")
    COUNT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_S_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    count: int
    deadline_s: float
    reason: str
    def __init__(self, count: _Optional[int] = ..., deadline_s: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class ReclaimNodesResponse(_message.Message):
    __slots__ = ("nodes", "preempted_job_ids", "shrunk")
    NODES_FIELD_NUMBER: _ClassVar[int]
    PREEMPTED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    SHRUNK_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    preempted_job_ids: _containers.RepeatedScalarFieldContainer[int]
    shrunk: _containers.RepeatedCompositeFieldContainer[ShrunkJob]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ..., preempted_job_ids: _Optional[_Iterable[int]] = ..., shrunk: _Optional[_Iterable[_Union[ShrunkJob, _Mapping]]] = ...) -> None: ...

class ShrunkJob(_message.Message):
    __slots__ = ("job_id", "gpus")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    gpus: int
    def __init__(self, job_id: _Optional[int] = ..., gpus: _Optional[int] = ...) -> None: ...

class ListNodesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListNodesResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class CordonNodeRequest(_message.Message):
    __slots__ = ("node_id", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CordonNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: NodeInfo
    def __init__(self, node: _Optional[_Union[NodeInfo, _Mapping]] = ...) -> None: ...

class DrainNodeRequest(_message.Message):
    __slots__ = ("node_id", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class DrainNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: NodeInfo
    def __init__(self, node: _Optional[_Union[NodeInfo, _Mapping]] = ...) -> None: ...

class ResumeNodeRequest(_message.Message):
    __slots__ = ("node_id", "reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    reason: str
    def __init__(self, node_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResumeNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: NodeInfo
    def __init__(self, node: _Optional[_Union[NodeInfo, _Mapping]] = ...) -> None: ...

class JobStateCount(_message.Message):
    __slots__ = ("state", "count")
    STATE_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    state: _common_pb2.JobState
    count: int
    def __init__(self, state: _Optional[_Union[_common_pb2.JobState, str]] = ..., count: _Optional[int] = ...) -> None: ...

class GetClusterStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetClusterStatusResponse(_message.Message):
    __slots__ = ("policy", "mechanism", "round_s", "round_index", "next_round_at_unix_s", "last_decision_ms", "capacity", "allocated", "free", "nodes_total", "nodes_ready", "job_counts", "daemon_version", "started_at_unix_s", "max_job_gpus", "cpu_array", "users")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ROUND_S_FIELD_NUMBER: _ClassVar[int]
    ROUND_INDEX_FIELD_NUMBER: _ClassVar[int]
    NEXT_ROUND_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    LAST_DECISION_MS_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    FREE_FIELD_NUMBER: _ClassVar[int]
    NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    NODES_READY_FIELD_NUMBER: _ClassVar[int]
    JOB_COUNTS_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    MAX_JOB_GPUS_FIELD_NUMBER: _ClassVar[int]
    CPU_ARRAY_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    policy: str
    mechanism: str
    round_s: float
    round_index: int
    next_round_at_unix_s: float
    last_decision_ms: float
    capacity: _common_pb2.Resources
    allocated: _common_pb2.Resources
    free: _common_pb2.Resources
    nodes_total: int
    nodes_ready: int
    job_counts: _containers.RepeatedCompositeFieldContainer[JobStateCount]
    daemon_version: str
    started_at_unix_s: float
    max_job_gpus: int
    cpu_array: CpuArraySettings
    users: _containers.RepeatedCompositeFieldContainer[UserUsage]
    def __init__(self, policy: _Optional[str] = ..., mechanism: _Optional[str] = ..., round_s: _Optional[float] = ..., round_index: _Optional[int] = ..., next_round_at_unix_s: _Optional[float] = ..., last_decision_ms: _Optional[float] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., allocated: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., free: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., nodes_total: _Optional[int] = ..., nodes_ready: _Optional[int] = ..., job_counts: _Optional[_Iterable[_Union[JobStateCount, _Mapping]]] = ..., daemon_version: _Optional[str] = ..., started_at_unix_s: _Optional[float] = ..., max_job_gpus: _Optional[int] = ..., cpu_array: _Optional[_Union[CpuArraySettings, _Mapping]] = ..., users: _Optional[_Iterable[_Union[UserUsage, _Mapping]]] = ...) -> None: ...

class UserUsage(_message.Message):
    __slots__ = ("user", "running_jobs", "waiting_jobs", "allocated")
    USER_FIELD_NUMBER: _ClassVar[int]
    RUNNING_JOBS_FIELD_NUMBER: _ClassVar[int]
    WAITING_JOBS_FIELD_NUMBER: _ClassVar[int]
    ALLOCATED_FIELD_NUMBER: _ClassVar[int]
    user: str
    running_jobs: int
    waiting_jobs: int
    allocated: _common_pb2.Resources
    def __init__(self, user: _Optional[str] = ..., running_jobs: _Optional[int] = ..., waiting_jobs: _Optional[int] = ..., allocated: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ...) -> None: ...

class CpuArraySettings(_message.Message):
    __slots__ = ("borrow_fraction", "trim_training")
    BORROW_FRACTION_FIELD_NUMBER: _ClassVar[int]
    TRIM_TRAINING_FIELD_NUMBER: _ClassVar[int]
    borrow_fraction: float
    trim_training: bool
    def __init__(self, borrow_fraction: _Optional[float] = ..., trim_training: _Optional[bool] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("policy", "mechanism")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    policy: str
    mechanism: str
    def __init__(self, policy: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class SetPolicyResponse(_message.Message):
    __slots__ = ("policy", "mechanism")
    POLICY_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    policy: str
    mechanism: str
    def __init__(self, policy: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class BackupDatabaseRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BackupDatabaseChunk(_message.Message):
    __slots__ = ("data", "total_bytes", "jobs", "nodes", "schema_version")
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    total_bytes: int
    jobs: int
    nodes: int
    schema_version: str
    def __init__(self, data: _Optional[bytes] = ..., total_bytes: _Optional[int] = ..., jobs: _Optional[int] = ..., nodes: _Optional[int] = ..., schema_version: _Optional[str] = ...) -> None: ...

class TailLogsRequest(_message.Message):
    __slots__ = ("job", "rank", "lines", "follow")
    JOB_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    LINES_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    job: str
    rank: int
    lines: int
    follow: bool
    def __init__(self, job: _Optional[str] = ..., rank: _Optional[int] = ..., lines: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class LogData(_message.Message):
    __slots__ = ("data", "node_id", "attempt")
    DATA_FIELD_NUMBER: _ClassVar[int]
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    node_id: str
    attempt: int
    def __init__(self, data: _Optional[bytes] = ..., node_id: _Optional[str] = ..., attempt: _Optional[int] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("user", "role", "via")
    USER_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    user: str
    role: str
    via: str
    def __init__(self, user: _Optional[str] = ..., role: _Optional[str] = ..., via: _Optional[str] = ...) -> None: ...

class UserInfo(_message.Message):
    __slots__ = ("name", "role", "has_token", "created_at_unix_s", "created_by", "revoked_at_unix_s", "revoked_by")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    HAS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    REVOKED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    REVOKED_BY_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    has_token: bool
    created_at_unix_s: float
    created_by: str
    revoked_at_unix_s: float
    revoked_by: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., has_token: _Optional[bool] = ..., created_at_unix_s: _Optional[float] = ..., created_by: _Optional[str] = ..., revoked_at_unix_s: _Optional[float] = ..., revoked_by: _Optional[str] = ...) -> None: ...

class AddUserRequest(_message.Message):
    __slots__ = ("name", "role", "no_token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NO_TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    no_token: bool
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., no_token: _Optional[bool] = ...) -> None: ...

class AddUserResponse(_message.Message):
    __slots__ = ("user", "token")
    USER_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    user: UserInfo
    token: str
    def __init__(self, user: _Optional[_Union[UserInfo, _Mapping]] = ..., token: _Optional[str] = ...) -> None: ...

class ListUsersRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListUsersResponse(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedCompositeFieldContainer[UserInfo]
    def __init__(self, users: _Optional[_Iterable[_Union[UserInfo, _Mapping]]] = ...) -> None: ...

class RevokeUserRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class RevokeUserResponse(_message.Message):
    __slots__ = ("user",)
    USER_FIELD_NUMBER: _ClassVar[int]
    user: UserInfo
    def __init__(self, user: _Optional[_Union[UserInfo, _Mapping]] = ...) -> None: ...
