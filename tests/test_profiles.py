"""The MinIO throughput model, the built-in zoo and the profile file format.

The zoo tests assert the facts the paper states (Synergy, OSDI'22, §1, §2.1, Fig. 2, Table 3);
each test names the fact. Tolerances are loose where the paper says "almost" or "around".
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from synergy.scheduler.model import Cluster
from synergy.scheduler.profiles import minio, zoo, zoo_models
from synergy.scheduler.profiles.format import (
    FORMAT,
    ProfileError,
    SensitivityProfile,
    dump_profiles,
)

ALL_MODELS = (
    "shufflenet_v2", "alexnet", "resnet18", "mobilenet_v2", "resnet50",
    "gnmt", "lstm", "transformer_xl", "m5", "deepspeech",
)
FULL = 500.0  # GB/GPU: the whole 500 GB server, where every image model is GPU- or CPU-bound


@pytest.fixture(scope="module")
def zoo_profiles() -> dict[str, SensitivityProfile]:
    return zoo.default_profiles()


def cpu_gain(p: SensitivityProfile, cpus_to: float, cpus_from: float = 3, mem: float = FULL) -> float:
    return p.speed(cpus_to, mem) / p.speed(cpus_from, mem)


def fully_cached_gain(name: str, cpus_to: float, cpus_from: float = 3) -> float:
    """The Fig. 2 measurement: CPU speedup with the whole dataset cached."""
    m = next(e.model for e in zoo_models.ZOO if e.name == name)
    return minio.fully_cached_rate(m, cpus_to) / minio.fully_cached_rate(m, cpus_from)


# -- the MinIO model --------------------------------------------------------------------------

def small_model(**over: float) -> minio.MinioModel:
    fields = dict(
        gpu_samples_per_s=1000.0, cpu_samples_per_s_one_core=100.0, cpu_alpha=1.0,
        dataset_gb=100.0, sample_kb=100.0, process_mem_gb=20.0, storage_mb_s=50.0, batch_size=100,
    )
    fields.update(over)
    return minio.MinioModel(**fields)


def test_hit_rate_counts_only_memory_above_process_memory() -> None:
    m = small_model()
    assert minio.hit_rate(m, 10) == 0.0
    assert minio.hit_rate(m, 20) == 0.0
    assert minio.hit_rate(m, 70) == pytest.approx(0.5)
    assert minio.hit_rate(m, 500) == 1.0


def test_storage_rate_is_bandwidth_over_missed_bytes_and_infinite_when_cached() -> None:
    m = small_model()
    # 50 MB/s over 100 KB samples = 500 samples/s when every sample misses.
    assert minio.storage_rate(m, 20) == pytest.approx(500.0)
    assert minio.storage_rate(m, 70) == pytest.approx(1000.0)  # half the samples miss
    assert math.isinf(minio.storage_rate(m, 120))


def test_rate_is_the_slowest_stage() -> None:
    m = small_model(cpu_alpha=0.5)
    assert minio.cpu_rate(m, 4) == pytest.approx(200.0)
    assert minio.rate(m, 4, 500) == pytest.approx(200.0)  # CPU-bound
    assert minio.rate(m, 400, 20) == pytest.approx(500.0)  # storage-bound
    assert minio.rate(m, 400, 500) == pytest.approx(1000.0)  # GPU-bound
    assert minio.fully_cached_rate(m, 400) == pytest.approx(1000.0)


def test_inverse_helpers_reproduce_their_facts() -> None:
    alpha = minio.alpha_for_speedup(3.1, 3, 12)
    m = small_model(cpu_alpha=alpha, cpu_samples_per_s_one_core=minio.one_core_rate_for(1000.0, 12, alpha))
    assert minio.fully_cached_rate(m, 12) == pytest.approx(1000.0)
    assert minio.fully_cached_rate(m, 12) / minio.fully_cached_rate(m, 3) == pytest.approx(3.1)
    share = minio.storage_share_for_memory_speedup(1000.0, 100.0, 100.0, 20.0, mem_from_gb=62.5, speedup=2.0)
    m = small_model(storage_mb_s=share, cpu_samples_per_s_one_core=1e6)
    assert minio.rate(m, 24, 500) / minio.rate(m, 24, 62.5) == pytest.approx(2.0)


def test_model_rejects_nonpositive_parameters_naming_the_field() -> None:
    with pytest.raises(ValueError, match="'dataset_gb'"):
        small_model(dataset_gb=0)
    with pytest.raises(ValueError, match="'process_mem_gb'"):
        small_model(process_mem_gb=-1)


def test_build_profile_normalises_the_reference_and_derives_iter_time() -> None:
    m = small_model(cpu_alpha=0.5)
    p = minio.build_profile("toy", "image", m, source="test")
    assert p.cpus_per_gpu == minio.CPUS_PER_GPU
    assert p.mem_gb_per_gpu == minio.MEM_GB_PER_GPU
    assert p.reference == (3.0, 62.5)
    assert p.speed(3, 62.5) == 1.0
    ref_rate = minio.rate(m, 3, 62.5)
    assert p.iter_time_s == pytest.approx(100 / ref_rate, rel=1e-3)
    assert p.speed(24, 500) == pytest.approx(minio.rate(m, 24, 500) / ref_rate, rel=1e-3)


# -- the zoo: every fact the paper states -----------------------------------------------------

def test_zoo_has_the_ten_models_of_table_4(zoo_profiles: dict[str, SensitivityProfile]) -> None:
    assert tuple(zoo_profiles) == ALL_MODELS
    assert zoo.MODELS_BY_TASK == {
        "image": ("shufflenet_v2", "alexnet", "resnet18", "mobilenet_v2", "resnet50"),
        "language": ("gnmt", "lstm", "transformer_xl"),
        "speech": ("m5", "deepspeech"),
    }
    for task, names in zoo.MODELS_BY_TASK.items():
        assert all(zoo_profiles[n].task == task for n in names)


def test_every_zoo_profile_is_well_formed(zoo_profiles: dict[str, SensitivityProfile]) -> None:
    for name, p in zoo_profiles.items():
        assert p.reference == minio.REFERENCE
        assert p.speed(*p.reference) == 1.0, name
        assert 0.005 <= p.iter_time_s <= 2.0, name
        assert "§" in p.source and "Table 4" in p.source, name
        rows = p.throughput
        # More CPUs or more memory never slows a job down.
        for i, row in enumerate(rows):
            assert all(b >= a for a, b in zip(row, row[1:])), name
            if i:
                assert all(b >= a for a, b in zip(rows[i - 1], row)), name


def test_resnet18_is_2_3x_faster_from_3_to_9_cpus_and_saturated_there(zoo_profiles) -> None:
    """§2.1: "increasing it to 9 results in 2.3x faster training for ResNet18";
    "ShuffleNet and ResNet18 require 9-24 CPU cores per GPU"."""
    p = zoo_profiles["resnet18"]
    assert fully_cached_gain("resnet18", 9) == pytest.approx(2.3, abs=0.1)
    assert cpu_gain(p, 9) == pytest.approx(2.3, abs=0.1)
    assert p.speed(24, FULL) / p.speed(9, FULL) <= 1.01
    assert p.speed(6, FULL) < 0.9 * p.speed(9, FULL)
    assert p.best_case()[0] in (8, 9, 10)


def test_resnet18_is_almost_2x_faster_from_62_5_to_500_gb(zoo_profiles) -> None:
    """§2.1: "increasing the memory from 62GB ... to 500GB (max) for ResNet18 speeds up
    training by almost 2x" (OpenImages, CPUs not the bottleneck)."""
    p = zoo_profiles["resnet18"]
    for cpus in (9, 12, 24):
        assert p.speed(cpus, 500) / p.speed(cpus, 62.5) == pytest.approx(2.0, abs=0.15)


def test_alexnet_is_3_1x_faster_from_3_to_12_cpus(zoo_profiles) -> None:
    """§2.1: "Increasing the CPU:GPU ratio from 3 to 12 results in 3.1x faster training for AlexNet"."""
    assert fully_cached_gain("alexnet", 12) == pytest.approx(3.1, abs=0.15)
    assert cpu_gain(zoo_profiles["alexnet"], 12) == pytest.approx(3.1, abs=0.15)


def test_shufflenet_needs_more_than_12_cpus(zoo_profiles) -> None:
    """Fig. 2 caption: "others like ShuffleNet need more than 12 CPU cores per GPU"."""
    p = zoo_profiles["shufflenet_v2"]
    assert cpu_gain(p, 16, 12) >= 1.1
    assert p.best_case()[0] > 12


def test_image_cpu_gains_stay_within_3x(zoo_profiles) -> None:
    """§1: image models "achieve up to 3x speedup" when CPUs exceed the proportional share."""
    for name in zoo.MODELS_BY_TASK["image"]:
        p = zoo_profiles[name]
        assert p.saturated / p.speed(3, FULL) <= 3.1 + 0.05, name


def test_mobilenet_and_resnet50_are_moderately_cpu_sensitive(zoo_profiles) -> None:
    """Fig. 2a(i): most image models are CPU-sensitive; the large ones less than the small."""
    gains = {n: zoo_profiles[n].saturated / zoo_profiles[n].speed(3, FULL) for n in zoo.MODELS_BY_TASK["image"]}
    for name in ("mobilenet_v2", "resnet50"):
        assert 1.1 <= gains[name] <= 2.0, (name, gains[name])
    assert min(gains, key=gains.get) == "resnet50"


def test_language_models_are_cpu_insensitive(zoo_profiles) -> None:
    """Fig. 2a(ii) and caption: "Transformers need as few as 1 CPU core per GPU"."""
    for name in zoo.MODELS_BY_TASK["language"]:
        p = zoo_profiles[name]
        for mem in (20, 62.5, FULL):
            assert p.speed(1, mem) >= 0.99, (name, mem)
        assert p.saturated <= 1.01, name


def test_gnmt_is_unaffected_at_20_gb(zoo_profiles) -> None:
    """§2.1: "even if only 20GB memory is allocated ... the training throughput is unaffected"."""
    p = zoo_profiles["gnmt"]
    assert p.speed(3, 20) >= 0.99
    assert p.speed(1, 20) >= 0.99


def test_speech_models_are_cpu_sensitive(zoo_profiles) -> None:
    """Fig. 2a(i): "most image and speech models are sensitive to CPU allocations"."""
    for name in zoo.MODELS_BY_TASK["speech"]:
        p = zoo_profiles[name]
        assert p.speed(1, FULL) <= 0.9 * p.saturated, name
    assert cpu_gain(zoo_profiles["deepspeech"], 6) >= 1.2


def test_m5_is_memory_sensitive_and_matches_table_3(zoo_profiles) -> None:
    """§2.1: speech models "benefit from larger DRAM caches"; Table 3: the resource-sensitive
    schedule gives Audio-M5 (4 GPUs) 12 CPUs and 450 GB, i.e. 3 CPUs and 112.5 GB per GPU."""
    p = zoo_profiles["m5"]
    assert p.speed(3, 125) / p.speed(3, 62.5) >= 1.2
    m5 = next(e.model for e in zoo_models.ZOO if e.name == "m5")
    # The Table 3 allocation saturates it (checked on the model: 112.5 lies between columns).
    assert minio.rate(m5, 3, 112.5) >= 0.99 * minio.rate(m5, 24, 500)
    assert p.best_case(floor=1.0) == (3.0, 125.0)


def test_language_jobs_can_give_cpu_and_memory_to_sensitive_ones(zoo_profiles) -> None:
    """The §5 setting (16 servers x 8 GPUs, 24 CPUs, 500 GB): insensitive jobs need ~1 CPU and
    ~20 GB per GPU, and the sensitive ones speed up well past their proportional share."""
    share = Cluster.homogeneous(16, 8, 24, 500).proportional_share(1)
    assert (share.cpus, share.mem_gb) == minio.REFERENCE
    rows = {r["model"]: r for r in zoo.summary(zoo_profiles, (share.cpus, share.mem_gb))}
    for name in zoo.MODELS_BY_TASK["language"]:
        assert rows[name]["best_cpus_per_gpu"] <= 2 and rows[name]["best_mem_gb_per_gpu"] <= 31.25, name
    image = [rows[n]["speedup"] for n in zoo.MODELS_BY_TASK["image"]]
    assert 2.0 <= sum(image) / len(image) <= 3.0
    assert all(r["speedup"] >= 1.0 for r in rows.values())


# -- interpolation and best case --------------------------------------------------------------

def test_speed_interpolates_bilinearly_between_grid_points(zoo_profiles) -> None:
    p = zoo_profiles["resnet18"]
    rows, cols, t = p.cpus_per_gpu, p.mem_gb_per_gpu, p.throughput
    i6, i8, j62, j125 = rows.index(6), rows.index(8), cols.index(62.5), cols.index(125)
    assert p.speed(7, 62.5) == pytest.approx((t[i6][j62] + t[i8][j62]) / 2)
    assert p.speed(6, 93.75) == pytest.approx((t[i6][j62] + t[i6][j125]) / 2)
    corners = t[i6][j62] + t[i6][j125] + t[i8][j62] + t[i8][j125]
    assert p.speed(7, 93.75) == pytest.approx(corners / 4)
    assert p.speed(6.5, 78.125) == pytest.approx(
        0.75 * (0.75 * t[i6][j62] + 0.25 * t[i6][j125]) + 0.25 * (0.75 * t[i8][j62] + 0.25 * t[i8][j125])
    )


def test_speed_outside_the_grid(zoo_profiles) -> None:
    p = zoo_profiles["alexnet"]
    assert p.speed(40, 800) == p.speed(24, 500)  # clamped above
    assert p.speed(3, 5) == p.speed(3, 20)  # never below the process-memory column
    assert p.speed(0.5, 62.5) == pytest.approx(0.5 * p.speed(1, 62.5))  # linear to 0 CPUs


def test_best_case_is_the_smallest_cell_within_1_percent(zoo_profiles) -> None:
    for name, p in zoo_profiles.items():
        c, m = p.best_case()
        target = 0.99 * p.saturated
        assert p.speed(c, m) >= target - 1e-9, name
        smaller = [(cc, mm) for cc, mm, v in p.cells() if v >= target - 1e-9 and (cc, mm) < (c, m)]
        assert not smaller, (name, smaller)


def test_best_case_is_never_slower_than_the_floor() -> None:
    # Flat but for a 0.5% dip at the smallest cells: without a floor the dip is "within 1%".
    rows, cols = (1.0, 2.0, 3.0), (20.0, 62.5)
    p = SensitivityProfile(
        "flat", "language", rows, cols, ((0.995, 0.995), (0.995, 1.0), (1.0, 1.0)), (3.0, 62.5), 0.1,
    )
    assert p.best_case() == (1.0, 20.0)
    assert p.best_case(floor=p.speed(3, 62.5)) == (2.0, 62.5)


# -- the file format and user files -----------------------------------------------------------

def write_doc(tmp_path: Path, doc: object, name: str = "p.json") -> str:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def one_model_doc(**over: object) -> dict:
    entry = zoo.default_profiles()["resnet18"].to_dict()
    entry.update(over)
    return {"format": FORMAT, "models": {"mine": entry}}


def test_get_profiles_without_a_file_is_the_zoo(zoo_profiles) -> None:
    assert zoo.get_profiles(None) == zoo_profiles


def test_user_file_is_merged_over_the_zoo(tmp_path: Path, zoo_profiles) -> None:
    doc = one_model_doc(iter_time_s=9.0)
    doc["models"]["gnmt"] = dict(doc["models"]["mine"], task="language", iter_time_s=0.5)
    merged = zoo.get_profiles(write_doc(tmp_path, doc))
    assert set(merged) == set(ALL_MODELS) | {"mine"}
    assert merged["mine"].iter_time_s == 9.0
    assert merged["gnmt"].iter_time_s == 0.5 and merged["gnmt"].task == "language"
    assert merged["alexnet"] == zoo_profiles["alexnet"]


@pytest.mark.parametrize(
    "doc, field",
    [
        ('{"format": "synergy-profile/v1", "models": {', "not valid JSON"),
        ("missing", "'iter_time_s'"),
        ("rows", "'throughput'"),
        ("grid", "'cpus_per_gpu'"),
        ({"format": "v0", "models": {}}, "'format'"),
    ],
    ids=["bad-json", "missing-field", "row-count", "non-increasing-grid", "format"],
)
def test_malformed_file_raises_a_one_line_error_naming_the_field(tmp_path: Path, doc: object, field: str) -> None:
    if doc == "missing":
        doc = one_model_doc()
        del doc["models"]["mine"]["iter_time_s"]
    elif doc == "rows":
        doc = one_model_doc()
        doc["models"]["mine"]["throughput"] = doc["models"]["mine"]["throughput"][:-1]
    elif doc == "grid":
        doc = one_model_doc()
        cpus = list(doc["models"]["mine"]["cpus_per_gpu"])
        cpus[4], cpus[5] = cpus[5], cpus[4]
        doc["models"]["mine"]["cpus_per_gpu"] = cpus
    path = write_doc(tmp_path, doc)
    with pytest.raises(ProfileError) as err:
        zoo.get_profiles(path)
    msg = str(err.value)
    assert field in msg and "\n" not in msg
    if field.startswith("'") and field != "'format'":
        assert "'mine'" in msg  # names the model too


def test_unreadable_file_raises_profile_error(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="cannot read"):
        zoo.get_profiles(str(tmp_path / "absent.json"))


def test_profiles_round_trip_through_the_format(zoo_profiles) -> None:
    from synergy.scheduler.profiles.format import parse_profiles

    assert parse_profiles(json.loads(json.dumps(dump_profiles(zoo_profiles)))) == zoo_profiles


# -- generated file ---------------------------------------------------------------------------

def test_checked_in_zoo_json_matches_the_generator() -> None:
    """zoo.json is generated: after editing zoo_models.py run
    `python -m synergy.scheduler.profiles.zoo --write`."""
    packaged = (Path(zoo.__file__).parent / zoo.ZOO_FILE).read_text(encoding="utf-8")
    assert packaged == zoo.render(zoo.build_zoo()), "zoo.json is stale: run python -m synergy.scheduler.profiles.zoo --write"
    assert zoo.main(["--check"]) == 0


def test_cli_prints_the_zoo_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert zoo.main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ALL_MODELS)
