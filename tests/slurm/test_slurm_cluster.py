"""The test cluster itself: its nodes come up with the CPUs, memory and GPUs declared."""

from __future__ import annotations

from slurm_cluster import GPU_TYPE, NODE_CPUS, NODE_GPUS, NODE_MEM_MB, SlurmCluster


def test_the_cluster_starts_with_its_nodes_idle_in_the_partition(slurm: SlurmCluster) -> None:
    nodes = {n["name"]: n for n in slurm.sinfo_nodes()}
    assert sorted(nodes) == slurm.nodes
    for n in nodes.values():
        assert n["state"] == "idle" and n["partitions"] == [slurm.partition]
        assert (n["cpus"], n["real_memory"], n["gres"]) == (NODE_CPUS, NODE_MEM_MB, f"gpu:{GPU_TYPE}:{NODE_GPUS}")
