"""Regenerate the Python gRPC stubs of synergy.v1 from the .proto sources, in one step.

    python protos/generate.py          # rewrite protos/synergy/v1/*_pb2*.py and *.pyi
    python protos/generate.py --check  # exit 1 (listing the files) when checked-in stubs drift

The stubs are committed next to their sources so the package installs as `synergy.v1`
without a build step; `--check` (run by tests/test_protos.py) keeps them honest. Uses the
pinned grpcio-tools, so the output is reproducible for a given environment.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from importlib import resources
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = Path("synergy") / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def sources() -> list[Path]:
    return sorted((HERE / PACKAGE).glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Run protoc over every source into `out_dir`; returns the files written."""
    from grpc_tools import protoc

    well_known = resources.files("grpc_tools") / "_proto"
    rel = [str(p.relative_to(HERE)) for p in sources()]
    args = [
        "grpc_tools.protoc",
        f"-I{HERE}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *rel,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed (see the message above)")
    return sorted(p for p in (out_dir / PACKAGE).iterdir() if p.name.endswith(GENERATED_SUFFIXES))


def drift() -> list[str]:
    """Names of generated files whose checked-in copy differs from a fresh generation."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_bytes() for p in generate(Path(tmp))}
    here = {p.name: p.read_bytes() for p in (HERE / PACKAGE).iterdir() if p.name.endswith(GENERATED_SUFFIXES)}
    return sorted(n for n in fresh.keys() | here.keys() if fresh.get(n) != here.get(n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when stubs are stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = drift()
        if stale:
            print("stale generated stubs (run `python protos/generate.py`): " + ", ".join(stale), file=sys.stderr)
            return 1
        print("generated stubs are up to date")
        return 0
    for old in (HERE / PACKAGE).iterdir():
        if old.name.endswith(GENERATED_SUFFIXES):
            old.unlink()
    written = generate(HERE)
    print("wrote " + ", ".join(str(p.relative_to(HERE.parent)) for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
