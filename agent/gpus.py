"""The node's GPUs through NVML (pynvml from nvidia-ml-py), or N fake ones for CPU-only machines.

A machine without an NVIDIA driver makes `nvmlInit()` raise NVMLError: the agent says so
once and carries on with zero GPUs, or with `--fake-gpus N` presents N fake GPUs so a CPU
server can stand in for a GPU server in tests and demos.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from synergy.scheduler.daemon.logs import event

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


class Gpus:
    """Discovery and sampling; `fake` GPUs report zero utilisation."""

    def __init__(self, gpus: list[Gpu], nvml: Any = None) -> None:
        self.gpus = gpus
        self._nvml = nvml

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


def fake_gpus(n: int, node_id: str) -> Gpus:
    return Gpus([Gpu(i, f"GPU-fake-{node_id}-{i}", "FakeGPU", 80.0) for i in range(n)])


def discover(log: logging.Logger, node_id: str, fake: int | None = None) -> Gpus:
    """Real GPUs through NVML; `fake` (from --fake-gpus) skips NVML altogether."""
    if fake is not None:
        event(log, "gpus.fake", count=fake)
        return fake_gpus(fake, node_id)
    try:
        import pynvml as nv

        nv.nvmlInit()
    except Exception as exc:  # NVMLError without a driver; ImportError without the package
        event(log, "gpus.none", level=logging.WARNING, reason=f"NVML unavailable ({exc}): running with 0 GPUs")
        return Gpus([])
    gpus = []
    for i in range(nv.nvmlDeviceGetCount()):
        h = nv.nvmlDeviceGetHandleByIndex(i)
        name = nv.nvmlDeviceGetName(h)
        uuid = nv.nvmlDeviceGetUUID(h)
        mem = nv.nvmlDeviceGetMemoryInfo(h).total / GIB
        gpus.append(Gpu(i, uuid if isinstance(uuid, str) else uuid.decode(), name if isinstance(name, str) else name.decode(), mem))
    event(log, "gpus.found", count=len(gpus), models=sorted({g.name for g in gpus}))
    return Gpus(gpus, nv)
