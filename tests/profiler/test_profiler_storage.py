"""measure_read_bandwidth: real files, page cache dropped per file, within a budget."""
from __future__ import annotations

import io
from pathlib import Path

import pytest

from synergy.profiler import storage


def make_files(tmp_path: Path, count: int, size: int) -> list[Path]:
    paths = []
    for i in range(count):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(bytes([i % 251]) * size)
        paths.append(p)
    return paths


def test_reads_every_file_and_says_the_page_cache_was_dropped(tmp_path):
    files = make_files(tmp_path, 4, 300_000)
    bw = storage.measure_read_bandwidth(files, budget_s=60)
    assert bw.bytes_read == 1_200_000 and bw.files_read == 4 and float(bw) > 0
    assert bw.page_cache_dropped and bw.note == ""


class FakeClock:
    """Each reading advances one second: the test controls time, no sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_stops_at_the_budget_with_an_injected_clock_and_opener(tmp_path):
    files = make_files(tmp_path, 10, 10)
    opened = []

    def opener(path: Path):
        opened.append(path)
        return io.BytesIO(b"x" * (3 * storage.CHUNK_BYTES))

    bw = storage.measure_read_bandwidth(files, budget_s=3.0, opener=opener, clock=FakeClock())
    assert bw.elapsed_s >= 3.0 and len(opened) < 10
    assert float(bw) == pytest.approx(bw.bytes_read / bw.elapsed_s)


def test_says_when_the_page_cache_cannot_be_dropped(tmp_path, monkeypatch):
    monkeypatch.delattr(storage.os, "posix_fadvise")
    bw = storage.measure_read_bandwidth(make_files(tmp_path, 1, 10), budget_s=60)
    assert not bw.page_cache_dropped and "posix_fadvise" in bw.note


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="files"):
        storage.measure_read_bandwidth([], budget_s=1)
    with pytest.raises(ValueError, match="budget_s"):
        storage.measure_read_bandwidth(make_files(tmp_path, 1, 10), budget_s=0)


def _resident_bytes(path: Path) -> int:
    """Bytes of `path` in the page cache (util-linux `fincore`)."""
    import subprocess

    out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def test_a_file_written_moments_ago_is_dropped_too(tmp_path):
    """Issue 14: the image example generates its JPEGs at start, so the profiler measured its
    storage on dirty pages (DONTNEED drops clean ones only) and read "537 MB/s" from memory off a
    disk throttled to 2 MB/s: a memory axis that said the job gains nothing from its cache."""
    import shutil
    import subprocess

    if shutil.which("fincore") is None:
        pytest.skip("util-linux fincore is not installed (it reads what the page cache holds)")
    if subprocess.run(["stat", "-f", "-c", "%T", str(tmp_path)], capture_output=True, text=True).stdout.strip() == "tmpfs":
        pytest.skip("the temp dir is on tmpfs: its pages are the file, nothing to drop")
    (path,) = make_files(tmp_path, 1, 4_000_000)
    assert _resident_bytes(path) > 3_000_000  # just written: in the page cache, dirty
    assert storage.drop_page_cache(path) == ""
    assert _resident_bytes(path) < 400_000
