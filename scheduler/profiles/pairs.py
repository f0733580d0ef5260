"""Pairwise packing profiles (Tesserae §4.2): how fast two jobs run when they share GPUs.

For a pair of models (a, b), the *normalised throughput* of each is its speed packed with the
other divided by its speed alone on the same GPUs (Tesserae's example: PointNet 0.3, GPT3-3B
0.5, sum 0.8). Packing the pair pays when the sum is above 1: together they do more work than
either alone. The packing pass (`placement/packing.py`) reads the sums as edge weights, and
the simulator slows a packed job by its own normalised throughput (`throughput.packed_speed`).

The table lives in the profile file, beside `models`, as a `"pairs"` list (docs/profiles.md)::

    {"format": "synergy-profile/v1",
     "models": {...},
     "pairs": [{"models": ["resnet18", "gpt2"], "throughput": [0.7, 0.6]}, ...]}

`throughput[k]` is the normalised throughput of `models[k]`. Order does not matter: an entry
for (a, b) answers for (b, a) too, and listing both is an error. A model paired with itself
takes two equal numbers. Pairs that are not listed are never packed.

For experiments without measured pairs, `from_class_rule` fills a table for every pair of
models from their task classes (image / language / speech): an assumption, not a measurement.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping

from synergy.scheduler.profiles.format import ProfileError, SensitivityProfile, read_profile_file

#: The profile file's key holding the pair list.
PAIRS_KEY = "pairs"


@dataclass(frozen=True)
class PairEntry:
    """One measured (or assumed) pair: `first` runs at `first_tput` of its solo speed beside
    `second`, which runs at `second_tput` of its own."""

    first: str
    second: str
    first_tput: float
    second_tput: float

    @property
    def combined(self) -> float:
        return self.first_tput + self.second_tput


@dataclass(frozen=True)
class PairTable:
    """Normalised throughputs of model pairs; immutable, looked up in either order."""

    entries: tuple[PairEntry, ...] = ()

    @cached_property
    def _lookup(self) -> dict[tuple[str, str], tuple[float, float]]:
        out: dict[tuple[str, str], tuple[float, float]] = {}
        for e in self.entries:
            out[(e.first, e.second)] = (e.first_tput, e.second_tput)
            out[(e.second, e.first)] = (e.second_tput, e.first_tput)
        return out

    def get(self, a: str, b: str) -> tuple[float, float] | None:
        """(a's normalised throughput beside b, b's beside a), or None when not profiled."""
        return self._lookup.get((a, b))

    def throughput(self, a: str, b: str) -> float | None:
        """a's normalised throughput when packed with b; None when the pair is not profiled."""
        hit = self._lookup.get((a, b))
        return None if hit is None else hit[0]

    def combined(self, a: str, b: str) -> float:
        """The pair's combined normalised throughput; 0 when not profiled (never packed)."""
        hit = self._lookup.get((a, b))
        return 0.0 if hit is None else hit[0] + hit[1]

    def __len__(self) -> int:
        return len(self.entries)

    # -- (de)serialisation ---------------------------------------------------------------
    def to_list(self) -> list[dict[str, Any]]:
        return [{"models": [e.first, e.second], "throughput": [e.first_tput, e.second_tput]} for e in self.entries]


def parse_pairs(items: Any, origin: str = "pairs") -> PairTable:
    """The `"pairs"` list of a profile file; ProfileError names the entry and field."""
    if not isinstance(items, list):
        raise ProfileError(f"{origin}: field {PAIRS_KEY!r} must be a list of pair entries")
    entries: list[PairEntry] = []
    seen: dict[frozenset[str], int] = {}
    for k, item in enumerate(items):
        where = f"{origin}: {PAIRS_KEY}[{k}]"
        if not isinstance(item, Mapping):
            raise ProfileError(f"{where}: expected an object with 'models' and 'throughput'")
        models, tputs = item.get("models"), item.get("throughput")
        if not isinstance(models, list) or len(models) != 2 or not all(isinstance(m, str) and m for m in models):
            raise ProfileError(f"{where}: field 'models' must be two model names")
        where = f"{where} ({models[0]!r}, {models[1]!r})"
        if (not isinstance(tputs, list) or len(tputs) != 2
                or not all(isinstance(t, (int, float)) and not isinstance(t, bool) for t in tputs)
                or not all(math.isfinite(t) and 0.0 <= t <= 1.0 for t in tputs)):
            raise ProfileError(f"{where}: field 'throughput' must be two numbers in [0, 1] "
                               "(each model's packed speed over its speed alone)")
        if models[0] == models[1] and tputs[0] != tputs[1]:
            raise ProfileError(f"{where}: a model paired with itself needs two equal throughputs")
        key = frozenset(models)
        if key in seen:
            raise ProfileError(f"{where}: the pair is already listed at {PAIRS_KEY}[{seen[key]}]")
        seen[key] = k
        entries.append(PairEntry(models[0], models[1], float(tputs[0]), float(tputs[1])))
    return PairTable(tuple(entries))


def load_pairs(path: str | Path) -> PairTable:
    """The pair table of a profile file (empty when it has no `"pairs"`); ProfileError
    names the file, the entry and the field."""
    doc = read_profile_file(path)
    if not isinstance(doc, Mapping):
        raise ProfileError(f"{path}: expected a JSON object")
    return parse_pairs(doc.get(PAIRS_KEY, []), origin=str(path))


#: Assumed normalised throughputs per task class pair, (first class's, second's), for
#: experiments without measured pairs. Loosely shaped by Tesserae §4.2 and Gavel's packing
#: measurements: small-footprint image models leave the GPU half idle and pack well; two
#: large language models contend for memory bandwidth and gain nothing (sum 1.0 or less:
#: never packed). An assumption for experiments, not a measurement.
DEFAULT_CLASS_RULE: Mapping[tuple[str, str], tuple[float, float]] = {
    ("image", "image"): (0.6, 0.6),
    ("image", "language"): (0.7, 0.6),
    ("image", "speech"): (0.65, 0.6),
    ("language", "language"): (0.5, 0.5),
    ("language", "speech"): (0.55, 0.5),
    ("speech", "speech"): (0.48, 0.48),
}


def from_class_rule(
    profiles: Mapping[str, SensitivityProfile],
    rule: Mapping[tuple[str, str], tuple[float, float]] = DEFAULT_CLASS_RULE,
) -> PairTable:
    """A table for every pair of `profiles` (a model with itself included), each pair's
    numbers taken from `rule` by the two models' task classes; class pairs absent from the
    rule (in either order) are left out, so never packed."""
    names = sorted(profiles)
    entries = []
    for i, a in enumerate(names):
        for b in names[i:]:
            ta, tb = profiles[a].task, profiles[b].task
            if (ta, tb) in rule:
                x, y = rule[(ta, tb)]
            elif (tb, ta) in rule:
                y, x = rule[(tb, ta)]
            else:
                continue
            if a == b:
                x = y = min(x, y)
            entries.append(PairEntry(a, b, x, y))
    return PairTable(tuple(entries))
