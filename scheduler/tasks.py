"""A task as the daemon and the agent both name it: the one definition lives in
`synergy.common.tasks`; this name stays for the daemon's modules."""

from synergy.common.tasks import IMPOSSIBLE_PLACEMENT, LAUNCH_FAILED, MAX_JOBS_PER_GPU, TaskKey, TaskPhase

__all__ = ["IMPOSSIBLE_PLACEMENT", "LAUNCH_FAILED", "MAX_JOBS_PER_GPU", "TaskKey", "TaskPhase"]
