from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_SUBMITTED: _ClassVar[JobState]
    JOB_STATE_PROFILING: _ClassVar[JobState]
    JOB_STATE_QUEUED: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_PREEMPTED: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]

class NodeState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_STATE_UNSPECIFIED: _ClassVar[NodeState]
    NODE_STATE_READY: _ClassVar[NodeState]
    NODE_STATE_CORDONED: _ClassVar[NodeState]
    NODE_STATE_DRAINING: _ClassVar[NodeState]
    NODE_STATE_LOST: _ClassVar[NodeState]
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_SUBMITTED: JobState
JOB_STATE_PROFILING: JobState
JOB_STATE_QUEUED: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_PREEMPTED: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
NODE_STATE_UNSPECIFIED: NodeState
NODE_STATE_READY: NodeState
NODE_STATE_CORDONED: NodeState
NODE_STATE_DRAINING: NodeState
NODE_STATE_LOST: NodeState

class Resources(_message.Message):
    __slots__ = ("gpus", "cpus", "mem_gb")
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEM_GB_FIELD_NUMBER: _ClassVar[int]
    gpus: float
    cpus: float
    mem_gb: float
    def __init__(self, gpus: _Optional[float] = ..., cpus: _Optional[float] = ..., mem_gb: _Optional[float] = ...) -> None: ...

class Placement(_message.Message):
    __slots__ = ("node_id", "gpus", "cpus", "mem_gb")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEM_GB_FIELD_NUMBER: _ClassVar[int]
    node_id: str
    gpus: int
    cpus: float
    mem_gb: float
    def __init__(self, node_id: _Optional[str] = ..., gpus: _Optional[int] = ..., cpus: _Optional[float] = ..., mem_gb: _Optional[float] = ...) -> None: ...

class CacheStats(_message.Message):
    __slots__ = ("hits", "hit_bytes", "misses", "miss_bytes", "items", "used_bytes", "capacity_bytes")
    HITS_FIELD_NUMBER: _ClassVar[int]
    HIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MISSES_FIELD_NUMBER: _ClassVar[int]
    MISS_BYTES_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_BYTES_FIELD_NUMBER: _ClassVar[int]
    hits: int
    hit_bytes: int
    misses: int
    miss_bytes: int
    items: int
    used_bytes: int
    capacity_bytes: int
    def __init__(self, hits: _Optional[int] = ..., hit_bytes: _Optional[int] = ..., misses: _Optional[int] = ..., miss_bytes: _Optional[int] = ..., items: _Optional[int] = ..., used_bytes: _Optional[int] = ..., capacity_bytes: _Optional[int] = ...) -> None: ...

class ProfileRow(_message.Message):
    __slots__ = ("throughput",)
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    throughput: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, throughput: _Optional[_Iterable[float]] = ...) -> None: ...

class SensitivityProfile(_message.Message):
    __slots__ = ("model", "task", "cpus_per_gpu", "mem_gb_per_gpu", "throughput", "reference_cpus_per_gpu", "reference_mem_gb_per_gpu", "iter_time_s", "source")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    CPUS_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    MEM_GB_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    THROUGHPUT_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_CPUS_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    REFERENCE_MEM_GB_PER_GPU_FIELD_NUMBER: _ClassVar[int]
    ITER_TIME_S_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    model: str
    task: str
    cpus_per_gpu: _containers.RepeatedScalarFieldContainer[float]
    mem_gb_per_gpu: _containers.RepeatedScalarFieldContainer[float]
    throughput: _containers.RepeatedCompositeFieldContainer[ProfileRow]
    reference_cpus_per_gpu: float
    reference_mem_gb_per_gpu: float
    iter_time_s: float
    source: str
    def __init__(self, model: _Optional[str] = ..., task: _Optional[str] = ..., cpus_per_gpu: _Optional[_Iterable[float]] = ..., mem_gb_per_gpu: _Optional[_Iterable[float]] = ..., throughput: _Optional[_Iterable[_Union[ProfileRow, _Mapping]]] = ..., reference_cpus_per_gpu: _Optional[float] = ..., reference_mem_gb_per_gpu: _Optional[float] = ..., iter_time_s: _Optional[float] = ..., source: _Optional[str] = ...) -> None: ...

class GpuInfo(_message.Message):
    __slots__ = ("index", "uuid", "name", "memory_gb")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    MEMORY_GB_FIELD_NUMBER: _ClassVar[int]
    index: int
    uuid: str
    name: str
    memory_gb: float
    def __init__(self, index: _Optional[int] = ..., uuid: _Optional[str] = ..., name: _Optional[str] = ..., memory_gb: _Optional[float] = ...) -> None: ...

class GpuTelemetry(_message.Message):
    __slots__ = ("index", "utilization_pct", "memory_used_gb", "temperature_c")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_PCT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_USED_GB_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_C_FIELD_NUMBER: _ClassVar[int]
    index: int
    utilization_pct: float
    memory_used_gb: float
    temperature_c: float
    def __init__(self, index: _Optional[int] = ..., utilization_pct: _Optional[float] = ..., memory_used_gb: _Optional[float] = ..., temperature_c: _Optional[float] = ...) -> None: ...

class NodeTelemetry(_message.Message):
    __slots__ = ("collected_at_unix_s", "cpu_util_pct", "mem_used_gb", "load_avg_1m", "gpus", "usage", "peak_mem_bandwidth", "sampled_by")
    COLLECTED_AT_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    CPU_UTIL_PCT_FIELD_NUMBER: _ClassVar[int]
    MEM_USED_GB_FIELD_NUMBER: _ClassVar[int]
    LOAD_AVG_1M_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    PEAK_MEM_BANDWIDTH_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_BY_FIELD_NUMBER: _ClassVar[int]
    collected_at_unix_s: float
    cpu_util_pct: float
    mem_used_gb: float
    load_avg_1m: float
    gpus: _containers.RepeatedCompositeFieldContainer[GpuTelemetry]
    usage: ResourceUsage
    peak_mem_bandwidth: MemoryBandwidth
    sampled_by: str
    def __init__(self, collected_at_unix_s: _Optional[float] = ..., cpu_util_pct: _Optional[float] = ..., mem_used_gb: _Optional[float] = ..., load_avg_1m: _Optional[float] = ..., gpus: _Optional[_Iterable[_Union[GpuTelemetry, _Mapping]]] = ..., usage: _Optional[_Union[ResourceUsage, _Mapping]] = ..., peak_mem_bandwidth: _Optional[_Union[MemoryBandwidth, _Mapping]] = ..., sampled_by: _Optional[str] = ...) -> None: ...

class TaskThrottle(_message.Message):
    __slots__ = ("level", "action", "since_unix_s", "reason")
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    SINCE_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    level: int
    action: str
    since_unix_s: float
    reason: str
    def __init__(self, level: _Optional[int] = ..., action: _Optional[str] = ..., since_unix_s: _Optional[float] = ..., reason: _Optional[str] = ...) -> None: ...

class MemoryBandwidth(_message.Message):
    __slots__ = ("gb_per_s", "source")
    GB_PER_S_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    gb_per_s: float
    source: str
    def __init__(self, gb_per_s: _Optional[float] = ..., source: _Optional[str] = ...) -> None: ...

class Pressure(_message.Message):
    __slots__ = ("some_avg10", "full_avg10")
    SOME_AVG10_FIELD_NUMBER: _ClassVar[int]
    FULL_AVG10_FIELD_NUMBER: _ClassVar[int]
    some_avg10: float
    full_avg10: float
    def __init__(self, some_avg10: _Optional[float] = ..., full_avg10: _Optional[float] = ...) -> None: ...

class ResourceUsage(_message.Message):
    __slots__ = ("cpu_cores", "rss_bytes", "page_faults", "io_read_bytes", "io_write_bytes", "cpu_pressure", "memory_pressure", "io_pressure", "mem_bandwidth", "gpu_util_pct", "gpu_memory_used_gb", "sampled_by")
    CPU_CORES_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    PAGE_FAULTS_FIELD_NUMBER: _ClassVar[int]
    IO_READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    IO_WRITE_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    IO_PRESSURE_FIELD_NUMBER: _ClassVar[int]
    MEM_BANDWIDTH_FIELD_NUMBER: _ClassVar[int]
    GPU_UTIL_PCT_FIELD_NUMBER: _ClassVar[int]
    GPU_MEMORY_USED_GB_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_BY_FIELD_NUMBER: _ClassVar[int]
    cpu_cores: float
    rss_bytes: int
    page_faults: int
    io_read_bytes: int
    io_write_bytes: int
    cpu_pressure: Pressure
    memory_pressure: Pressure
    io_pressure: Pressure
    mem_bandwidth: MemoryBandwidth
    gpu_util_pct: float
    gpu_memory_used_gb: float
    sampled_by: str
    def __init__(self, cpu_cores: _Optional[float] = ..., rss_bytes: _Optional[int] = ..., page_faults: _Optional[int] = ..., io_read_bytes: _Optional[int] = ..., io_write_bytes: _Optional[int] = ..., cpu_pressure: _Optional[_Union[Pressure, _Mapping]] = ..., memory_pressure: _Optional[_Union[Pressure, _Mapping]] = ..., io_pressure: _Optional[_Union[Pressure, _Mapping]] = ..., mem_bandwidth: _Optional[_Union[MemoryBandwidth, _Mapping]] = ..., gpu_util_pct: _Optional[float] = ..., gpu_memory_used_gb: _Optional[float] = ..., sampled_by: _Optional[str] = ...) -> None: ...
