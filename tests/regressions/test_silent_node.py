"""Defect: a silent node got new work.

When a node stops heartbeating, its jobs' leases expire (~2 s) and they are requeued; the
very next round used to place them straight back on that silent node, a second before it
was declared lost. A node that has missed its heartbeat window is not schedulable (the
core's heartbeat filter), so the job goes to a live node at once.
"""

from __future__ import annotations

from synergyd_harness import wait_for


def test_jobs_of_a_silent_node_are_not_placed_back_on_it(start_daemon, start_agent) -> None:
    d = start_daemon()
    admin = d.admin()
    quiet = start_agent(d, "quiet", gpus=2)  # an exact fit: best fit prefers it
    job = admin.submit("j", gpus=2)
    wait_for(lambda: quiet.running(), what="the job running on quiet")
    start_agent(d, "spare", gpus=4)
    assert [p.node_id for p in admin.describe(job.id).placements] == ["quiet"]

    quiet.paused.set()  # the node falls silent, and so do its job's processes
    with quiet.lock:
        for t in quiet.tasks.values():
            t.killed.set()
    wait_for(lambda: [p.node_id for p in admin.describe(job.id).placements] == ["spare"], timeout=60,
             what="the job to move to spare")
    placed = [t.reason for t in admin.describe(job.id).history if "placed on" in t.reason]
    assert len(placed) == 2 and "quiet" in placed[0] and "spare" in placed[1], placed
