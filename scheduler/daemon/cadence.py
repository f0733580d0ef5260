"""How often job processes and agents call in: the round's cadence, stretched when keeping
it would ask synergyd for more calls a second than `--max-rpc-rate`.

Every running rank renews every `renew_interval_s` and every node heartbeats every
`heartbeat_interval_s`, both derived from the round (config.py). 10,000 ranks on a 10 s
round ask for 10,256 calls a second, past what one synergyd process serves on a small head
node (about 4,000 on two cores, docs/daemon.md). Renewals then queue past the lease grace,
leases lapse and nodes look silent because the daemon is late, not because they are, jobs are
requeued and placed again, and the cluster never settles. Chubby's master meets load the same
way: it lengthens the KeepAlive interval it hands out. Here the daemon works out the calls a
second its own cadence asks for (ranks placed / renew interval + nodes up / heartbeat
interval, read from its state rather than measured, so the same cluster always gets the same
cadence) and, past the cap, multiplies both intervals by a stretch, and with them every
timeout counted in those intervals (lease grace, node timeout, heartbeat window, the stop
margin): a stretched cluster is slower to notice a lost job, never quicker to declare one.

The stretch moves in steps of √2, so a cluster near a step does not change its cadence with
each arrival (a change makes every rank's next renewal answered: quiet renewals answer a
changed answer). It rises as soon as the asked rate needs it and falls one step at a time,
once the step below would use at most `FALL_BELOW` of the cap. After a fall, clients keep the
old interval until their next answer, so the timeouts keep the old stretch for `hold_s` more.
Pure: the caller gives the time and the asked rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The stretch is 2 ** (level / 2): steps of √2, exact at the even levels.
MAX_LEVEL = 12  # a stretch of 64: a 1 s renewal becomes about a minute, past that the cap is wrong
#: A stretch falls a step only when the step below would use at most this share of the cap.
FALL_BELOW = 0.8


def stretch_of(level: int) -> float:
    return 2.0 ** (level / 2)


@dataclass
class Cadence:
    """The stretch in force over the round's intervals, and the one the timeouts still honour."""

    #: Calls a second the daemon's cadence may ask for; 0 = no cap, never stretch.
    max_rate: float = 0.0
    #: The step: the stretch is `stretch_of(level)`, kept beside it (read on every renewal).
    level: int = 0
    stretch: float = 1.0
    #: After a fall: the stretch the timeouts keep, and until when.
    held: float = 1.0
    held_until: float = -math.inf

    def needed(self, asked: float) -> int:
        """The lowest level that keeps `asked` calls a second (the unstretched cadence's) within
        the cap."""
        if self.max_rate <= 0:
            return 0
        level = 0
        while level < MAX_LEVEL and asked > self.max_rate * stretch_of(level):
            level += 1
        return level

    def update(self, asked: float, now: float, hold_s: float) -> bool:
        """Set the stretch for a cluster whose unstretched cadence asks `asked` calls a second;
        True when it changed. `hold_s`: how long the timeouts keep a stretch this falls from
        (the longest timeout plus one interval, at that stretch)."""
        need = self.needed(asked)
        if need > self.level:
            self._set(need)
            return True
        if self.level > 0 and asked <= FALL_BELOW * self.max_rate * stretch_of(self.level - 1):
            # One slot for every stretch still held: the highest, until the latest hold ends.
            self.held, self.held_until = self.timeouts(now), max(self.held_until, now + hold_s)
            self._set(self.level - 1)
            return True
        return False

    def _set(self, level: int) -> None:
        self.level, self.stretch = level, stretch_of(level)

    def timeouts(self, now: float) -> float:
        """The stretch timeouts count in at `now`: the one in force, or a higher one it fell
        from less than its hold ago (clients may not have heard the shorter interval yet)."""
        return max(self.stretch, self.held) if now < self.held_until else self.stretch
