from synergy.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_STATE_UNSPECIFIED: _ClassVar[TaskState]
    TASK_STATE_STARTING: _ClassVar[TaskState]
    TASK_STATE_RUNNING: _ClassVar[TaskState]
    TASK_STATE_STOPPING: _ClassVar[TaskState]
    TASK_STATE_EXITED: _ClassVar[TaskState]

class InstructionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INSTRUCTION_KIND_UNSPECIFIED: _ClassVar[InstructionKind]
    INSTRUCTION_KIND_LAUNCH: _ClassVar[InstructionKind]
    INSTRUCTION_KIND_RESIZE: _ClassVar[InstructionKind]
    INSTRUCTION_KIND_STOP: _ClassVar[InstructionKind]
TASK_STATE_UNSPECIFIED: TaskState
TASK_STATE_STARTING: TaskState
TASK_STATE_RUNNING: TaskState
TASK_STATE_STOPPING: TaskState
TASK_STATE_EXITED: TaskState
INSTRUCTION_KIND_UNSPECIFIED: InstructionKind
INSTRUCTION_KIND_LAUNCH: InstructionKind
INSTRUCTION_KIND_RESIZE: InstructionKind
INSTRUCTION_KIND_STOP: InstructionKind

class TaskRef(_message.Message):
    __slots__ = ("job_id", "attempt", "rank")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    job_id: int
    attempt: int
    rank: int
    def __init__(self, job_id: _Optional[int] = ..., attempt: _Optional[int] = ..., rank: _Optional[int] = ...) -> None: ...

class TaskStatus(_message.Message):
    __slots__ = ("ref", "state", "exit_code", "pid", "gpu_indices", "message", "placement", "usage", "oom_killed", "throttle", "cores", "starting_up")
    REF_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    THROTTLE_FIELD_NUMBER: _ClassVar[int]
    CORES_FIELD_NUMBER: _ClassVar[int]
    STARTING_UP_FIELD_NUMBER: _ClassVar[int]
    ref: TaskRef
    state: TaskState
    exit_code: int
    pid: int
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    message: str
    placement: _common_pb2.Placement
    usage: _common_pb2.ResourceUsage
    oom_killed: bool
    throttle: _common_pb2.TaskThrottle
    cores: _containers.RepeatedScalarFieldContainer[int]
    starting_up: bool
    def __init__(self, ref: _Optional[_Union[TaskRef, _Mapping]] = ..., state: _Optional[_Union[TaskState, str]] = ..., exit_code: _Optional[int] = ..., pid: _Optional[int] = ..., gpu_indices: _Optional[_Iterable[int]] = ..., message: _Optional[str] = ..., placement: _Optional[_Union[_common_pb2.Placement, _Mapping]] = ..., usage: _Optional[_Union[_common_pb2.ResourceUsage, _Mapping]] = ..., oom_killed: _Optional[bool] = ..., throttle: _Optional[_Union[_common_pb2.TaskThrottle, _Mapping]] = ..., cores: _Optional[_Iterable[int]] = ..., starting_up: _Optional[bool] = ...) -> None: ...

class LogRequest(_message.Message):
    __slots__ = ("ref", "offset", "max_bytes", "tail")
    REF_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    ref: TaskRef
    offset: int
    max_bytes: int
    tail: bool
    def __init__(self, ref: _Optional[_Union[TaskRef, _Mapping]] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., tail: _Optional[bool] = ...) -> None: ...

class LogChunk(_message.Message):
    __slots__ = ("ref", "offset", "data", "eof", "error")
    REF_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ref: TaskRef
    offset: int
    data: bytes
    eof: bool
    error: str
    def __init__(self, ref: _Optional[_Union[TaskRef, _Mapping]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., eof: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class TaskProgress(_message.Message):
    __slots__ = ("ref", "throughput", "baseline_throughput")
    REF_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    BASELINE_THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    ref: TaskRef
    throughput: float
    baseline_throughput: float
    def __init__(self, ref: _Optional[_Union[TaskRef, _Mapping]] = ..., throughput: _Optional[float] = ..., baseline_throughput: _Optional[float] = ...) -> None: ...

class TaskSpec(_message.Message):
    __slots__ = ("ref", "job_name", "world_size", "command", "working_dir", "env", "placement", "job_token", "checkpoint_dir", "resume_checkpoint_path", "resume_step", "master_node_id", "master_hostname", "packed_with_job_id", "run_as_user")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REF_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    JOB_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIR_FIELD_NUMBER: _ClassVar[int]
    RESUME_CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    RESUME_STEP_FIELD_NUMBER: _ClassVar[int]
    MASTER_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    MASTER_HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    PACKED_WITH_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RUN_AS_USER_FIELD_NUMBER: _ClassVar[int]
    ref: TaskRef
    job_name: str
    world_size: int
    command: _containers.RepeatedScalarFieldContainer[str]
    working_dir: str
    env: _containers.ScalarMap[str, str]
    placement: _common_pb2.Placement
    job_token: str
    checkpoint_dir: str
    resume_checkpoint_path: str
    resume_step: int
    master_node_id: str
    master_hostname: str
    packed_with_job_id: int
    run_as_user: str
    def __init__(self, ref: _Optional[_Union[TaskRef, _Mapping]] = ..., job_name: _Optional[str] = ..., world_size: _Optional[int] = ..., command: _Optional[_Iterable[str]] = ..., working_dir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., placement: _Optional[_Union[_common_pb2.Placement, _Mapping]] = ..., job_token: _Optional[str] = ..., checkpoint_dir: _Optional[str] = ..., resume_checkpoint_path: _Optional[str] = ..., resume_step: _Optional[int] = ..., master_node_id: _Optional[str] = ..., master_hostname: _Optional[str] = ..., packed_with_job_id: _Optional[int] = ..., run_as_user: _Optional[str] = ...) -> None: ...

class Instruction(_message.Message):
    __slots__ = ("kind", "ref", "task", "placement", "stop_grace_s", "reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    STOP_GRACE_S_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    kind: InstructionKind
    ref: TaskRef
    task: TaskSpec
    placement: _common_pb2.Placement
    stop_grace_s: float
    reason: str
    def __init__(self, kind: _Optional[_Union[InstructionKind, str]] = ..., ref: _Optional[_Union[TaskRef, _Mapping]] = ..., task: _Optional[_Union[TaskSpec, _Mapping]] = ..., placement: _Optional[_Union[_common_pb2.Placement, _Mapping]] = ..., stop_grace_s: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class RegisterNodeRequest(_message.Message):
    __slots__ = ("node_id", "hostname", "capacity", "reserved", "gpus", "tasks", "agent_version", "instance_id", "cgroup_mode", "memory_enforced", "gpu_type")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    HOSTNAME_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    RESERVED_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    CGROUP_MODE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_ENFORCED_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    hostname: str
    capacity: _common_pb2.Resources
    reserved: _common_pb2.Resources
    gpus: _containers.RepeatedCompositeFieldContainer[_common_pb2.GpuInfo]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    agent_version: str
    instance_id: str
    cgroup_mode: str
    memory_enforced: bool
    gpu_type: str
    def __init__(self, node_id: _Optional[str] = ..., hostname: _Optional[str] = ..., capacity: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., reserved: _Optional[_Union[_common_pb2.Resources, _Mapping]] = ..., gpus: _Optional[_Iterable[_Union[_common_pb2.GpuInfo, _Mapping]]] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., agent_version: _Optional[str] = ..., instance_id: _Optional[str] = ..., cgroup_mode: _Optional[str] = ..., memory_enforced: _Optional[bool] = ..., gpu_type: _Optional[str] = ...) -> None: ...

class RegisterNodeResponse(_message.Message):
    __slots__ = ("heartbeat_interval_s", "state", "state_reason", "instructions", "daemon_version")
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_s: float
    state: _common_pb2.NodeState
    state_reason: str
    instructions: _containers.RepeatedCompositeFieldContainer[Instruction]
    daemon_version: str
    def __init__(self, heartbeat_interval_s: _Optional[float] = ..., state: _Optional[_Union[_common_pb2.NodeState, str]] = ..., state_reason: _Optional[str] = ..., instructions: _Optional[_Iterable[_Union[Instruction, _Mapping]]] = ..., daemon_version: _Optional[str] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("node_id", "telemetry", "tasks", "instance_id", "log_chunks", "not_ready_reason")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    TELEMETRY_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LOG_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    NOT_READY_REASON_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    telemetry: _common_pb2.NodeTelemetry
    tasks: _containers.RepeatedCompositeFieldContainer[TaskStatus]
    instance_id: str
    log_chunks: _containers.RepeatedCompositeFieldContainer[LogChunk]
    not_ready_reason: str
    def __init__(self, node_id: _Optional[str] = ..., telemetry: _Optional[_Union[_common_pb2.NodeTelemetry, _Mapping]] = ..., tasks: _Optional[_Iterable[_Union[TaskStatus, _Mapping]]] = ..., instance_id: _Optional[str] = ..., log_chunks: _Optional[_Iterable[_Union[LogChunk, _Mapping]]] = ..., not_ready_reason: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ("heartbeat_interval_s", "instructions", "forget", "state", "state_reason", "log_requests", "progress")
    HEARTBEAT_INTERVAL_S_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    FORGET_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STATE_REASON_FIELD_NUMBER: _ClassVar[int]
    LOG_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval_s: float
    instructions: _containers.RepeatedCompositeFieldContainer[Instruction]
    forget: _containers.RepeatedCompositeFieldContainer[TaskRef]
    state: _common_pb2.NodeState
    state_reason: str
    log_requests: _containers.RepeatedCompositeFieldContainer[LogRequest]
    progress: _containers.RepeatedCompositeFieldContainer[TaskProgress]
    def __init__(self, heartbeat_interval_s: _Optional[float] = ..., instructions: _Optional[_Iterable[_Union[Instruction, _Mapping]]] = ..., forget: _Optional[_Iterable[_Union[TaskRef, _Mapping]]] = ..., state: _Optional[_Union[_common_pb2.NodeState, str]] = ..., state_reason: _Optional[str] = ..., log_requests: _Optional[_Iterable[_Union[LogRequest, _Mapping]]] = ..., progress: _Optional[_Iterable[_Union[TaskProgress, _Mapping]]] = ...) -> None: ...
