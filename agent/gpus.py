"""The node's GPUs through NVML (pynvml from nvidia-ml-py), or N fake ones for CPU-only machines.

A machine without an NVIDIA driver makes `nvmlInit()` raise NVMLError: the agent says so
once and carries on with zero GPUs, or with `--fake-gpus N` presents N fake GPUs so a CPU
server can stand in for a GPU server in tests and demos.

The node's GPU type (`V100`, `T4`) comes from the NVML product names, or from `--gpu-type`
(fake GPUs have none of their own). One type per node: the scheduler places a job on a
server by its type, so a machine that mixes models is refused at start (`GpuTypeError`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from synergy.common.logs import event
from synergy.scheduler.gpu_type_names import gpu_type_of

GIB = 1024**3


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_gb: float


@dataclass(frozen=True)
class GpuSample:
    index: int
    utilization_pct: float = 0.0
    memory_used_gb: float = 0.0
    temperature_c: float = 0.0


class GpuTypeError(ValueError):
    """The node's GPUs are of more than one type (the agent stops at start: one type per node)."""


def node_gpu_type(gpus: Sequence[Gpu], override: str = "") -> str:
    """The one type of the node's GPUs: `override` (--gpu-type) when given, else NVML's.

    "" = untyped (no GPUs, fake GPUs without --gpu-type, or names with no model in them).
    Raises GpuTypeError for GPUs of two types, whatever `override` says: that node would
    mislead the scheduler either way.
    """
    found = sorted({gpu_type_of(g.name) for g in gpus} - {""})
    if len(found) > 1:
        names = ", ".join(f"{g.index}: {g.name}" for g in gpus)
        raise GpuTypeError(f"this node has GPUs of {len(found)} types ({', '.join(found)}; {names}): one type "
                           "per node, run one agent per type with CUDA_VISIBLE_DEVICES")
    return override or (found[0] if found else "")


class Gpus:
    """Discovery and sampling; `fake` GPUs report zero utilisation."""

    def __init__(self, gpus: list[Gpu], nvml: Any = None, gpu_type: str = "") -> None:
        self.gpus = gpus
        self._nvml = nvml
        #: The node's GPU type ("" = untyped), sent in RegisterNodeRequest.gpu_type.
        self.gpu_type = gpu_type

    @property
    def count(self) -> int:
        return len(self.gpus)

    @property
    def fake(self) -> bool:
        return self._nvml is None

    def sample(self) -> list[GpuSample]:
        if self._nvml is None:
            return [GpuSample(g.index) for g in self.gpus]
        nv = self._nvml
        out = []
        for g in self.gpus:
            try:
                h = nv.nvmlDeviceGetHandleByIndex(g.index)
                util = nv.nvmlDeviceGetUtilizationRates(h)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                temp = nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
                out.append(GpuSample(g.index, float(util.gpu), mem.used / GIB, float(temp)))
            except nv.NVMLError:
                out.append(GpuSample(g.index))
        return out

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass


def fake_gpus(n: int, node_id: str, gpu_type: str = "") -> Gpus:
    return Gpus([Gpu(i, f"GPU-fake-{node_id}-{i}", "FakeGPU", 80.0) for i in range(n)], gpu_type=gpu_type)


def discover(log: logging.Logger, node_id: str, fake: int | None = None, gpu_type: str = "",
             nvml: Any = None) -> Gpus:
    """Real GPUs through NVML (`nvml`: the pynvml module, or a stand-in in tests); `fake`
    (from --fake-gpus) skips NVML altogether. `gpu_type` is --gpu-type ("" = NVML's)."""
    if fake is not None:
        event(log, "gpus.fake", count=fake, gpu_type=gpu_type)
        return fake_gpus(fake, node_id, gpu_type)
    try:
        if nvml is None:
            import pynvml as nvml
        nv = nvml
        nv.nvmlInit()
    except Exception as exc:  # NVMLError without a driver; ImportError without the package
        event(log, "gpus.none", level=logging.WARNING, reason=f"NVML unavailable ({exc}): running with 0 GPUs")
        return Gpus([], gpu_type=gpu_type)
    gpus = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        name = nv.nvmlDeviceGetName(h)
        uuid = nv.nvmlDeviceGetUUID(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h).total / GIB
        gpus.append(Gpu(i, uuid if isinstance(uuid, str) else uuid.decode(), name if isinstance(name, str) else name.decode(), mem))
    try:
        found = node_gpu_type(gpus)
    except GpuTypeError:
        nv.nvmlShutdown()
        raise
    if gpu_type and gpu_type != found:
        event(log, "gpus.type_override", level=logging.WARNING, nvml_type=found, gpu_type=gpu_type,
              reason="--gpu-type overrides the type NVML reports")
    event(log, "gpus.found", count=len(gpus), models=sorted({g.name for g in gpus}), gpu_type=gpu_type or found)
    return Gpus(gpus, nv, gpu_type or found)
