"""Names users type (`--policy`, `--mechanism`) mapped to plug-ins, in one place."""
from __future__ import annotations

from typing import Callable

from synergy.scheduler.core import Scheduler
from synergy.scheduler.mechanisms.base import Mechanism
from synergy.scheduler.mechanisms.greedy import Greedy
from synergy.scheduler.mechanisms.proportional import Proportional
from synergy.scheduler.mechanisms.tune import Tune
from synergy.scheduler.placement.scorers import alignment
from synergy.scheduler.policies.base import Policy
from synergy.scheduler.policies.drf import Drf
from synergy.scheduler.policies.fifo import Fifo
from synergy.scheduler.policies.ftf import Ftf
from synergy.scheduler.policies.las import Las
from synergy.scheduler.policies.srtf import Srtf
from synergy.scheduler.policies.tetris import Tetris

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


def build_scheduler(policy: str, mechanism: str) -> Scheduler:
    if policy not in POLICIES:
        raise UnknownNameError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}")
    if mechanism not in MECHANISMS:
        raise UnknownNameError(f"unknown mechanism {mechanism!r}; choose one of {', '.join(MECHANISMS)}")
    mech = MECHANISMS[mechanism]()
    if policy == "tetris" and mechanism == "greedy":
        # Naive Tetris places by alignment; the tuned variant keeps TUNE's best fit.
        mech = Greedy(scorer=alignment)
    return Scheduler(POLICIES[policy](), mech)
