"""complete_profile: a CPU curve measured at full memory, completed by the MinIO model.

The reference is `synergy.scheduler.profiles.minio`: a curve generated from a MinioModel,
profiled by OptimisticSearch and completed, must give back the model's own throughput at
every measured CPU count and any memory size, within 1%.
"""
from __future__ import annotations

import pytest

from synergy.profiler.fill import complete_profile
from synergy.profiler.search import OptimisticSearch
from synergy.scheduler.profiles import minio
from synergy.scheduler.profiles.format import FORMAT, SensitivityProfile, parse_profiles

MODELS = {
    # CPU-bound knee at ~11 CPUs, storage-bound below ~90% cached.
    "image": minio.MinioModel(gpu_samples_per_s=400, cpu_samples_per_s_one_core=60, cpu_alpha=0.8,
                              dataset_gb=100, sample_kb=110, process_mem_gb=20, storage_mb_s=20,
                              batch_size=32),
    # Fast storage: memory barely matters.
    "fast-storage": minio.MinioModel(gpu_samples_per_s=1000, cpu_samples_per_s_one_core=100,
                                     cpu_alpha=0.7, dataset_gb=5, sample_kb=500,
                                     process_mem_gb=4, storage_mb_s=2000, batch_size=64),
    # Slow storage, tiny dataset (the benchmark's scale: MB, not GB).
    "small": minio.MinioModel(gpu_samples_per_s=300, cpu_samples_per_s_one_core=120, cpu_alpha=0.9,
                              dataset_gb=0.02, sample_kb=20, process_mem_gb=0.5, storage_mb_s=1.5,
                              batch_size=16),
}


def profiled(p: minio.MinioModel, gpus: int, max_cpus: int = 24) -> tuple[dict, list]:
    s = OptimisticSearch(max_cpus * gpus)
    while (c := s.next_cpus()) is not None:  # the job's CPUs; per GPU c / gpus
        s.record(c, gpus * minio.fully_cached_rate(p, c / gpus))
    full = p.process_mem_gb + p.dataset_gb * 1.1
    entry = complete_profile(
        s.points, gpus=gpus, dataset_bytes=int(p.dataset_gb * 1e9 * gpus), sample_bytes=p.sample_kb * 1e3,
        storage_bytes_per_s=p.storage_mb_s * 1e6 * gpus, process_mem_gb=p.process_mem_gb * gpus,
        max_mem_gb=full * gpus, model="m", task="image", batch_size=p.batch_size,
    )
    return entry, s.points


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("gpus", [1, 4])
def test_a_minio_model_comes_back_within_1_percent(name, gpus):
    p = MODELS[name]
    entry, points = profiled(p, gpus)
    prof = parse_profiles({"format": FORMAT, "models": {"m": entry}})["m"]
    full = p.process_mem_gb + p.dataset_gb * 1.1
    mems = [p.process_mem_gb + p.dataset_gb * f for f in (0, 0.05, 0.13, 0.25, 0.4, 0.5, 0.63, 0.75,
                                                          0.8, 0.9, 0.95, 0.99, 1.0)] + [full]
    for c, _ in points:
        for m in mems:
            modelled = prof.speed(c / gpus, m) / prof.iter_time_s * p.batch_size
            assert modelled == pytest.approx(minio.rate(p, c / gpus, m), rel=0.01), (c, m)
    assert entry["source"].startswith(f"profiled: {len(points)} points")


def test_the_entry_is_the_docs_profiles_format():
    entry, points = profiled(MODELS["image"], 1)
    prof = SensitivityProfile.from_dict("m", entry)
    assert prof.cpus_per_gpu == tuple(float(c) for c, _ in points)
    assert prof.mem_gb_per_gpu[0] == 20 and prof.mem_gb_per_gpu[-1] == pytest.approx(130)
    assert prof.speed(*prof.reference) == 1.0 and prof.saturated == 1.0
    # Best case: the CPU knee (11-12 CPUs) and the exact memory where storage keeps up with 400/s.
    cpus, mem = prof.best_case()
    assert cpus == 12 and mem == pytest.approx(20 + 100 * (1 - 20e6 / (400 * 110e3)), rel=1e-4)


def test_a_single_point_gives_the_format_its_two_rows():
    entry = complete_profile([(1, 50.0)], gpus=1, dataset_bytes=10**9, sample_bytes=1e5,
                             storage_bytes_per_s=1e7, process_mem_gb=1, max_mem_gb=3,
                             model="m", task="language")
    prof = SensitivityProfile.from_dict("m", entry)
    assert prof.cpus_per_gpu == (0.5, 1.0) and prof.speed(1, 3) == 1.0


GOOD = dict(gpus=1, dataset_bytes=10**9, sample_bytes=1e5, storage_bytes_per_s=1e7,
            process_mem_gb=1.0, max_mem_gb=3.0, model="m", task="image")


@pytest.mark.parametrize("points, over, message", [
    ([], {}, "points"),
    ([(1, 1.0), (1, 2.0)], {}, "twice"),
    ([(1, -1.0)], {}, r"points\[0\] samples_per_s"),
    ([(0, 1.0)], {}, r"points\[0\] cpus"),
    ([(1, 0.0)], {}, "zero"),
    ([(1, 1.0)], {"gpus": 0}, "gpus"),
    ([(1, 1.0)], {"task": "video"}, "task"),
    ([(1, 1.0)], {"max_mem_gb": 1.0}, "max_mem_gb"),
    ([(1, 1.0)], {"storage_bytes_per_s": float("nan")}, "storage_bytes_per_s"),
    ([(1, 1.0)], {"sample_bytes": 0}, "sample_bytes"),
])
def test_bad_input_is_a_clear_error(points, over, message):
    with pytest.raises(ValueError, match=message):
        complete_profile(points, **{**GOOD, **over})


@pytest.mark.parametrize("process_mem_gb", [0.5857751, 0.4133445626700781, 0.25])
def test_a_dataset_of_kilobytes_keeps_its_columns_distinct(process_mem_gb):
    """Issue 14: the image example's live profile (172 kB of JPEGs read at 3.3 MB/s) failed
    with "mem_gb_per_gpu must be strictly increasing" for about half of all process memories:
    a column less than 1 kB above the process memory rounded onto it."""
    entry = complete_profile([(1, 2823.7), (2, 945.5)], gpus=1, dataset_bytes=172031, sample_bytes=1344,
                             storage_bytes_per_s=3.306e6, process_mem_gb=process_mem_gb, max_mem_gb=2.0,
                             model="img", task="image")
    mems = entry["mem_gb_per_gpu"]
    assert mems == sorted(set(mems)) and mems[0] == round(process_mem_gb, 6) and mems[-1] == 2.0
