"""Execution backends: what carries out synergyd's decisions on the machines.

The default is Synergy's own `synergy-agent` on every node (it calls synergyd's NodeService
itself, so it needs nothing here). `slurm/` plays that agent for every node of a Slurm
partition, inside synergyd's process, and lets Slurm run the jobs (docs/slurm.md).
"""
