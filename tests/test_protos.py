"""The checked-in gRPC stubs must match the .proto sources (regenerate with protos/generate.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from synergy.v1 import admin_pb2, common_pb2, job_pb2, node_pb2

ROOT = Path(__file__).resolve().parents[1]


def test_generated_stubs_match_sources() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "protos" / "generate.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_every_enum_starts_with_unspecified() -> None:
    for module in (admin_pb2, common_pb2, job_pb2, node_pb2):
        for enum in module.DESCRIPTOR.enum_types_by_name.values():
            zero = enum.values_by_number[0].name
            assert zero.endswith("_UNSPECIFIED"), f"{enum.full_name}: value 0 is {zero}"


def test_services_live_in_the_versioned_package() -> None:
    names = {s.full_name for m in (admin_pb2, job_pb2, node_pb2) for s in m.DESCRIPTOR.services_by_name.values()}
    assert names == {"synergy.v1.AdminService", "synergy.v1.JobService", "synergy.v1.NodeService"}
