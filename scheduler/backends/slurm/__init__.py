"""The Slurm backend: synergyd decides, a Slurm partition runs the jobs (docs/slurm.md).

* `commands`: Slurm's client commands with machine-readable output (`sinfo --json`,
  `squeue --json`, `sbatch --parsable`, `scancel`), and nothing else that talks to Slurm;
* `mapping`: Slurm nodes and jobs <-> Synergy nodes, tasks and launches (pure functions);
* `bridge`: the loop that plays the agent for every node of the partition.
"""
