"""Slurm's client commands, the one place synergyd runs them.

Slurm 22.05's supported machine-readable interfaces are the JSON output of `sinfo` and
`squeue` (OpenAPI data_parser v0.0.38, the same documents slurmrestd serves), `sbatch
--parsable` (the job id) and `scancel`'s exit status. We use the commands rather than
slurmrestd because every Slurm site has them, they authenticate with the site's own munge
set-up, and they need no extra daemon or JWT key (docs/slurm.md, "Which interface").
The partition's own settings (checked once, at start) are the exception 22.05 leaves: `sinfo
--Format` gives OverSubscribe, AllowGroups and RootOnly as documented fields with an explicit
separator, but no form but `scontrol --oneliner show partition` (one line of slurm.conf's
`Key=Value` pairs) gives AllowAccounts and AllowQos, so those two are read from it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

#: The commands the backend runs (checked at start).
COMMANDS = ("sinfo", "squeue", "sbatch", "scancel", "sstat", "scontrol")
#: `sinfo --Format` fields of a partition read at start, and slurm.conf's names for them.
_SINFO_PARTITION = (("OverSubscribe", "OverSubscribe"), ("Groups", "AllowGroups"), ("Root", "RootOnly"))
#: Partition settings only `scontrol --oneliner show partition` gives in 22.05.
_SCONTROL_PARTITION = ("AllowAccounts", "AllowQos")


class SlurmError(RuntimeError):
    """A Slurm command failed; the message is its first line of stderr (or why it did not run)."""


@dataclass(frozen=True)
class Slurm:
    """Runs Slurm's commands with a timeout; `env` None = synergyd's own (SLURM_CONF and all)."""

    env: Mapping[str, str] | None = None
    timeout_s: float = 30.0

    def missing(self) -> list[str]:
        path = (self.env or {}).get("PATH")
        return [c for c in COMMANDS if shutil.which(c, path=path) is None]

    def run(self, argv: Sequence[str], stdin: str = "", env: Mapping[str, str] | None = None) -> str:
        try:
            done = subprocess.run(
                list(argv), input=stdin, env=dict(env) if env is not None else self.env, capture_output=True,
                text=True, timeout=self.timeout_s,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SlurmError(f"{argv[0]}: {exc}") from None
        if done.returncode != 0:
            first = next((ln.strip() for ln in done.stderr.splitlines() if ln.strip()), f"exit code {done.returncode}")
            raise SlurmError(f"{argv[0]}: {first}")
        return done.stdout

    def json(self, argv: Sequence[str]) -> dict[str, Any]:
        out = self.run(argv)
        try:
            doc = json.loads(out)
        except ValueError:
            raise SlurmError(f"{argv[0]}: output is not JSON (Slurm 22.05 or later is needed)") from None
        errors = [e for e in doc.get("errors", []) if e]
        if errors:
            raise SlurmError(f"{argv[0]}: {errors[0]}")
        return doc

    # -- reading ----------------------------------------------------------------------------------
    def nodes(self) -> tuple[list[dict[str, Any]], str]:
        """Every node Slurm knows (sinfo's JSON), and Slurm's version."""
        doc = self.json(["sinfo", "--json"])
        version = doc.get("meta", {}).get("Slurm", {}).get("release", "")
        return list(doc.get("nodes", [])), version

    def jobs(self, partition: str) -> list[dict[str, Any]]:
        """Every job of the partition Slurm still remembers, finished ones included (MinJobAge)."""
        return list(self.json(["squeue", "--json", "--states=all", f"--partition={partition}"]).get("jobs", []))

    def usage(self, slurm_ids: Sequence[int]) -> dict[int, tuple[float, int]]:
        """(CPU seconds, RSS bytes) of running jobs' batch steps, from Slurm's accounting
        (`sstat --parsable2`; jobacct_gather samples every JobAcctGatherFrequency)."""
        if not slurm_ids:
            return {}
        out = self.run(["sstat", "--allsteps", "--noheader", "--parsable2", "--format=JobID,TRESUsageInTot",
                        "--jobs", ",".join(f"{i}.batch" for i in slurm_ids)])
        usage: dict[int, tuple[float, int]] = {}
        for line in out.splitlines():
            step, _, tres = line.partition("|")
            if not step.endswith(".batch"):
                continue
            fields = dict(kv.split("=", 1) for kv in tres.split(",") if "=" in kv)
            try:
                usage[int(step.split(".")[0])] = (duration_s(fields.get("cpu", "0")), size_bytes(fields.get("mem", "0")))
            except ValueError:
                continue
        return usage

    def partition(self, name: str) -> dict[str, str]:
        """Who may submit to the partition and whether jobs may share cores, by slurm.conf's names
        (OverSubscribe `NO`/`EXCLUSIVE`/`YES:4`/`FORCE:4`, AllowGroups `all` or a list, RootOnly,
        AllowAccounts, AllowQos); {} when Slurm has no such partition."""
        fmt = ",".join(f"{field}:0|" for field, _ in _SINFO_PARTITION)  # unpadded, '|' after each field
        out = self.run(["sinfo", "--noheader", f"--partition={name}", f"--Format={fmt}"])
        line = next((ln for ln in out.splitlines() if ln.strip()), "")
        if not line:
            return {}
        settings = {key: value.strip() for (_, key), value in zip(_SINFO_PARTITION, line.split("|"))}
        for item in self.run(["scontrol", "--oneliner", "show", "partition", name]).split():
            key, sep, value = item.partition("=")
            if sep and key in _SCONTROL_PARTITION:
                settings[key] = value
        return settings

    # -- acting -----------------------------------------------------------------------------------
    def submit(self, flags: Sequence[str], script: str, env: Mapping[str, str]) -> int:
        """sbatch a batch script given on stdin; the Slurm job id."""
        out = self.run(["sbatch", "--parsable", *flags], stdin=script, env=env).strip()
        try:
            return int(out.split(";")[0])
        except ValueError:
            raise SlurmError(f"sbatch: unexpected reply {out[:80]!r}") from None

    def signal(self, job_id: int, signal: str) -> None:
        """Signal the job's batch process (the job's own: its script `exec`s it)."""
        self.run(["scancel", "--batch", f"--signal={signal}", str(job_id)])

    def cancel(self, job_id: int) -> None:
        """Cancel the job outright (SIGTERM, then SIGKILL after Slurm's KillWait)."""
        self.run(["scancel", "--full", "--signal=KILL", str(job_id)])


def duration_s(text: str) -> float:
    """Slurm's `[DD-][HH:]MM:SS[.mmm]` as seconds."""
    days, _, clock = text.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    h, m, sec = parts[-3:]
    return (int(days) if days else 0) * 86400 + h * 3600 + m * 60 + sec


def size_bytes(text: str) -> int:
    """Slurm's `109268K` (K, M, G, T: powers of 1024; no suffix: bytes) as bytes."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(float(text or 0))
