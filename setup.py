"""Package discovery for our layout; everything else lives in pyproject.toml.

Each top-level folder installs as `synergy.<name>` (`synergy` stays a namespace package),
and every sub-folder with an __init__.py is picked up, so a new plug-in package needs no
edit here. Generated gRPC code lives under protos/synergy/v1 and installs as synergy.v1.
"""
from pathlib import Path

from setuptools import setup

ROOTS = {
    "synergy.scheduler": "scheduler",
    "synergy.agent": "agent",
    "synergy.iterator": "iterator",
    "synergy.profiler": "profiler",
    "synergy.cache": "cache",
    "synergy.common": "common",
    "synergy.v1": "protos/synergy/v1",
}

here = Path(__file__).parent
package_dir: dict[str, str] = {}
packages: list[str] = []
for name, folder in ROOTS.items():
    root = here / folder
    if not (root / "__init__.py").exists():
        continue
    package_dir[name] = folder
    for init in sorted(root.rglob("__init__.py")):
        rel = init.parent.relative_to(root)
        packages.append(".".join([name, *rel.parts]) if rel.parts else name)
    # Folders of data inside a package (the dashboard's static/): listed as packages too, as
    # setuptools asks (a folder it does not list is importable, and its files may be dropped).
    for folder_path in sorted(d for d in root.rglob("*") if d.is_dir() and d.name != "__pycache__"):
        if not (folder_path / "__init__.py").exists() and (folder_path.parent / "__init__.py").exists():
            packages.append(".".join([name, *folder_path.relative_to(root).parts]))

setup(package_dir=package_dir, packages=packages)
