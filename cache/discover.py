"""Find a job's MinIO cache however its dataset is wrapped.

A script hands `SynergyIterator` its DataLoader; the cache sits somewhere below it: in
``loader.dataset`` only when the `CachedFileDataset` is the loader's dataset itself. Real
scripts wrap it: a (sample, label) dataset holding it in an attribute (the image example), a
`torch.utils.data.Subset` or a torchvision-style wrapper (``.dataset``), a `ConcatDataset`
(``.datasets``), a dict or list of datasets, a DALI external source's callable that the
iterator holds. The lease's statistics and resizes and the profiler's memory axis all need the
cache, so they all ask this one function.

`find_caches(root)` walks the object graph below `root` breadth first, through instance
attributes (``vars()``, never properties: reading a property may do work) and the first
`CONTAINER_ITEMS` items of lists, tuples, sets and dicts, the cells of closures (a lambda
that reads through the cache), bound methods' objects and `functools.partial` arguments, to
depth `MAX_DEPTH`, each object once. It stops at a `CachedFileDataset` (its cache and files)
and at a bare `MinioCache`. Scalars, strings, tensors, arrays, nn modules, types, modules and
functions' globals are never entered, so a dataset of a million paths costs a few dozen steps.
What the walk cannot reach (a cache only a module global or a DALI pipeline's C++ side holds)
is passed explicitly: ``SynergyIterator(loader, cache=...)``.
"""

from __future__ import annotations

import functools
import types
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from synergy.cache.dataset import CachedFileDataset
from synergy.cache.minio import MinioCache

#: How deep below the root the walk goes (loader -> dataset -> wrapper -> ... -> cache).
MAX_DEPTH = 8
#: Items of one list, tuple, set or dict looked at: datasets sit at their front (ConcatDataset),
#: and a list of a million paths or labels must not cost a million steps.
CONTAINER_ITEMS = 64

_LEAVES = (str, bytes, bytearray, memoryview, int, float, complex, bool, type(None), type,
           types.ModuleType, types.BuiltinFunctionType, range)
#: Types from these modules (tensors, generators, nn modules, arrays) never hold a dataset;
#: torch.utils.data's do (DataLoader, Subset, ConcatDataset) and are entered.
_OPAQUE_MODULES = ("torch", "numpy")
_OPAQUE_PREFIXES = ("torch._", "torch.nn.", "numpy.")


@dataclass
class FoundCache:
    """One cache below the root, with the files read through it."""

    cache: MinioCache
    #: Where it was found, as an attribute path from the root (``dataset.images.cache``).
    where: str
    #: The files of every `CachedFileDataset` reading through it (empty: the cache was found
    #: bare, so its dataset's files are unknown; the profiler then treats memory as insensitive).
    files: list[str] = field(default_factory=list)


def find_caches(root: Any, max_depth: int = MAX_DEPTH) -> list[FoundCache]:
    """Every distinct `MinioCache` below `root` (one per segment), nearest first."""
    found: dict[str, FoundCache] = {}
    seen: set[int] = set()
    queue: deque[tuple[Any, str, int]] = deque([(root, "", 0)])
    while queue:
        obj, where, depth = queue.popleft()
        if id(obj) in seen or _leaf(obj):
            continue
        seen.add(id(obj))
        if isinstance(obj, MinioCache):
            found.setdefault(obj.path, FoundCache(obj, where or "."))
            continue
        if isinstance(obj, CachedFileDataset):
            entry = found.setdefault(obj.cache.path, FoundCache(obj.cache, _join(where, "cache")))
            known = set(entry.files)
            entry.files.extend(p for p in obj.paths if p not in known)
            continue
        if depth < max_depth:
            for name, child in _children(obj):
                queue.append((child, _join(where, name), depth + 1))
    return list(found.values())


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where and not name.startswith("[") else f"{where}{name}"


def _leaf(obj: Any) -> bool:
    if isinstance(obj, _LEAVES):
        return True
    # Tensors, generators, modules, arrays: recognised by their module (no torch/numpy import).
    module = type(obj).__module__ or ""
    return module in _OPAQUE_MODULES or module.startswith(_OPAQUE_PREFIXES)


def _children(obj: Any) -> list[tuple[str, Any]]:
    if isinstance(obj, types.FunctionType):  # a closure's cells (never its globals)
        cells = obj.__closure__ or ()
        out = []
        for name, cell in zip(obj.__code__.co_freevars, cells):
            try:
                out.append((f"<{obj.__name__}>.{name}", cell.cell_contents))
            except ValueError:  # an empty cell
                pass
        return out
    if isinstance(obj, types.MethodType):
        return [("__self__", obj.__self__), ("__func__", obj.__func__)]
    if isinstance(obj, functools.partial):
        return [("func", obj.func), ("args", obj.args), ("keywords", obj.keywords)]
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in list(obj.items())[:CONTAINER_ITEMS]]
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(obj[:CONTAINER_ITEMS])]
    if isinstance(obj, (set, frozenset)):
        return [("[]", v) for v in list(obj)[:CONTAINER_ITEMS]]
    try:
        attrs = dict(vars(obj))
    except TypeError:  # no __dict__: __slots__ only, or a C object
        attrs = {}
    for cls in type(obj).__mro__:
        for name in getattr(cls, "__slots__", ()):
            if isinstance(name, str) and name not in attrs:
                try:
                    attrs[name] = object.__getattribute__(obj, name)
                except AttributeError:
                    pass
    return list(attrs.items())
