"""Names users type (`--policy`, `--mechanism`, `--scorer`) mapped to plug-ins, in one place."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.base import Mechanism
from synergy.scheduler.mechanisms.greedy import Greedy
from synergy.scheduler.mechanisms.proportional import Proportional
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.placement.migration import relabel_to_previous
from synergy.scheduler.placement.scorers import SCORERS, alignment
from synergy.scheduler.policies.base import Policy
from synergy.scheduler.policies.drf import Drf
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.policies.ftf import Ftf
from synergy.scheduler.policies.las import Las
from synergy.scheduler.policies.srtf import Srtf
from synergy.scheduler.policies.tetris import Tetris
from synergy.scheduler.profiles.pairs import PairTable

POLICIES: dict[str, Callable[[], Policy]] = {
    "fifo": Fifo, "srtf": Srtf, "las": Las, "ftf": Ftf, "drf": Drf, "tetris": Tetris,
}


def _opt() -> Mechanism:
    from synergy.scheduler.mechanisms.opt import Opt  # OR-Tools loads only when asked for

    return Opt()


MECHANISMS: dict[str, Callable[[], Mechanism]] = {
    "proportional": Proportional, "greedy": Greedy, "tune": Tune, "opt": _opt,
}


class UnknownNameError(ValueError):
    pass


def check_scorer(scorer: str | None) -> None:
    """Raises UnknownNameError unless `scorer` is None/"" (the mechanism's own) or in SCORERS."""
    if scorer and scorer not in SCORERS:
        raise UnknownNameError(f"unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}")


def build_scheduler(
    policy: str, mechanism: str, scorer: str | None = None, migration_matching: bool = True,
    pairs: PairTable | None = None,
) -> Scheduler:
    """The named plug-ins; `scorer` None (or "") keeps each mechanism's own scorer (best fit
    for TUNE and proportional, first fit for GREEDY, alignment for Tetris + GREEDY).
    `migration_matching` False turns off Tesserae's relabelling (placement/migration.py),
    which is on for every mechanism by default. `pairs` turns on Tesserae's packing
    (placement/packing.py) with that pairwise profile; None (the default) never shares a GPU."""
    if policy not in POLICIES:
        raise UnknownNameError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if mechanism not in MECHANISMS:
        raise UnknownNameError(f"unknown mechanism {mechanism!r}; choose one of {', '.join(MECHANISMS)}")
    check_scorer(scorer)
    mech = MECHANISMS[mechanism]()
    if scorer:
        mech = replace(mech, scorer=SCORERS[scorer])  # type: ignore[type-var]
    elif policy == "tetris" and mechanism == "greedy":
        # Naive Tetris places by alignment; the tuned variant keeps TUNE's best fit.
        mech = Greedy(scorer=alignment)
    return Scheduler(POLICIES[policy](), mech, relabel=relabel_to_previous if migration_matching else None,
                     pairs=pairs)
