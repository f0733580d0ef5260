"""`SynergyIterator`: the one line a training script adds.

    loader = SynergyIterator(loader, state={"model": model, "optimizer": opt})

Managed (started by synergy-agent, the contract of `synergy.common.contract` in the
environment): a background `LeaseKeeper` registers and renews; at the daemon's agreed
`stop_at_step` the wrap checkpoints `state` and its `Position` and exits 75; on relaunch it
restores both and continues with the next unconsumed batch. Periodic checkpoints: at the
`checkpoint_at` step the daemon agreed for every rank, the wrap copies `state` and its position
to memory and a `BackgroundWriter` thread writes them while training goes on; rank 0 keeps the
newest `keep_checkpoints` complete ones. Standalone (no contract): batches pass through unchanged.

Profiling lease (docs/iterator.md): when the daemon launched this attempt to profile the job,
a `synergy.profiler.live.LiveProfiler` picks CPU counts; the lease thread asks for each, the
agent RESIZEs the cpuset, and once the reply shows it in force the wrap restarts the loader
iterator at the current position with `workers_for(cpus)` workers (never fewer than the
script's own) and measures a window of real iterations. After the last point the profile
is completed and reported, and the job runs on in the same process at the allocation the
next round gives it (a RESIZE). Outside profiling the loader's workers follow the CPUs in
force the same way (`_fit_workers`), so the job runs with the pipeline its profile measured.

Epochs across a relaunch: the script's own epoch loop starts again from its first epoch, so
the first `epoch` iterations of the wrap after a resume (epochs the job already finished)
yield nothing, the next one continues mid-epoch, and the rest are ordinary.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from synergy.cache import MinioCache, find_caches
from synergy.common import contract, startup
from synergy.common.contract import JobEnv
from synergy.iterator import checkpoint
from synergy.iterator.background import BackgroundWriter, Written, snapshot_copy
from synergy.iterator.checkpoint import CheckpointError
from synergy.iterator.dali import KEY as DALI_KEY
from synergy.iterator.dali import DaliState
from synergy.iterator.lease import LeaseKeeper
from synergy.iterator.lease import say as _say
from synergy.iterator.outcome import exception_line, exit_failure
from synergy.iterator.position import ElasticSampler, IndexCursor, Position, rng_states, set_rng_states
from synergy.profiler import live as live_profiler
from synergy.profiler.refine import Refiner, StepCeiling, optimistic_points

#: Exit code of a checkpointed stop ("restart me later"; docs/daemon.md).
EXIT_PREEMPTED = 75
EXIT_TERMINATED = 143
EXIT_FAILED = 1


_END = object()


class SynergyIterator:
    """Wraps a DataLoader (any sampler) or a DALI-style iterator; see the module docstring."""

    def __init__(self, loader: Any, state: Mapping[str, Any] | None = None,
                 environ: Mapping[str, str] | None = None, keep_checkpoints: int = 2,
                 cache: MinioCache | None = None) -> None:
        """`keep_checkpoints`: how many complete checkpoints to keep in the checkpoint dir
        (older step dirs are deleted once a newer one is complete and reported; at least 1).
        `cache`: the job's MinIO cache, when the loader's objects do not lead to it (a module
        global holds it; see `synergy.cache.find_caches`); by default it is found below `loader`."""
        if keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be at least 1, got {keep_checkpoints}")
        self.loader = loader
        self.keep_checkpoints = keep_checkpoints
        self.state = dict(state or {})
        env_map = sys.modules["os"].environ if environ is None else environ
        self._environ = env_map
        #: the agent was told this process reached its training loop (synergy.common.startup)
        self._loop_reached = False
        #: the line to the agent, kept after its answer for the last word: winding down at exit
        self._agent_line: startup.JobLine | None = None
        self.env: JobEnv | None = None
        self.lease: LeaseKeeper | None = None
        self.position = Position()
        self.stopped_step = 0
        #: DALI hook (iterator/dali.py): its checkpoints and epoch resets; None for other loaders.
        self.dali: DaliState | None = None
        #: Periodic checkpoints (iterator/background.py): the writer, the last agreed step acted
        #: on, and counts for logs and benchmarks.
        self.writer: BackgroundWriter | None = None
        self._periodic_seen = 0
        self.periodic_written = self.periodic_skipped = self.periodic_failed = 0
        self.snapshot_s = 0.0
        #: The last periodic snapshot, whose tensors the next one is copied into (not busy then).
        self._snapshot_buffer: Any = None
        if contract.JOB_ID not in env_map:
            _say("no synergy-agent contract in the environment: running standalone "
                 "(no lease, no checkpoints)")
            return
        try:
            self.env = JobEnv.from_env(env_map)
        except ValueError as exc:
            self._fail(str(exc))
        env = self.env
        assert env is not None
        self.position.world_size = env.world_size
        self.batch_size = int(getattr(loader, "batch_size", None) or 1)
        self.cursor = self._install_cursor(loader)
        #: The script's DataLoader workers: the fewest the loader ever runs with. Managed, the
        #: loader runs with `workers_for(CPUs in force)` of them, as profiling measured each
        #: point (`_fit_workers`): a job given 8 CPUs for the speed its profile showed there
        #: decodes with 7 workers, not the script's 2.
        self._script_workers = getattr(loader, "num_workers", None)
        #: The CPUs in force the loader's workers were last sized for (`_fit_workers`); None
        #: where they stay the script's (Slurm's measured-in-place profiles, DALI).
        self._sized_for: float | None = 0.0
        self.sampler = self._sampler(loader)
        self.dali = DaliState.of(loader)
        self._iterations = 0          # wrap iterations in this process (the script's epochs)
        self._resume: dict[str, Any] | None = None
        self._global_base = 0         # global samples consumed at the resume point
        self._batches_base = 0
        self._failed = False
        self.lease = LeaseKeeper(env, self.batch_size)
        #: The job's cache and the files read through it (docs/iterator.md "The MinIO cache"):
        #: renewals report its statistics, a RESIZE resizes it, the profile's memory axis
        #: models it over these files.
        self.cache_files: list[str] = []
        self.lease.cache = self._find_cache(loader, cache)
        #: The profiling driver (None: no profiling lease, or not known yet); `_profiling`
        #: stays True until the lease's registration said which.
        self.profiler: live_profiler.LiveProfiler | None = None
        #: After profiling (rank 0): measures each new allocation in force (profiler/refine.py).
        self.refiner: Refiner | None = None
        #: Slurm (`in_force_only` terms): the points earlier attempts measured (from the
        #: checkpoint), the terms, and the CPUs this process runs on (a Slurm job is never resized).
        self._measured: list[tuple[float, float]] = []
        self._in_force_terms: live_profiler.ProfilingTerms | None = None
        self._bound_cpus = 0.0
        self._profiling = True
        #: While profiling and refining: the script's steps, whose device time caps the
        #: optimistic guess above the top point (refine.StepCeiling).
        self.step_ceiling = StepCeiling(self.batch_size * self.position.world_size)
        if env.checkpoint_dir:
            self.writer = BackgroundWriter(self._written)
        try:
            if env.checkpoint_dir:
                checkpoint.check_writable(env.checkpoint_dir)
            if env.resume_checkpoint:
                self._load(env.resume_checkpoint)
        except CheckpointError as exc:
            self._fail(str(exc))
        self.lease.start()
        atexit.register(self._at_exit)
        prev_hook = sys.excepthook

        def hook(tp: type[BaseException], value: BaseException, tb: Any) -> None:
            self._failed = True
            if self.lease is not None and env.rank == 0:
                self.lease.report_completion(False, self.lease.step, exception_line(tp, value))
            prev_hook(tp, value, tb)

        sys.excepthook = hook
        # An atexit hook cannot see the exit status: remember what the script passes to
        # sys.exit (also argparse's), so `sys.exit(2)` is reported FAILED, not SUCCEEDED.
        self._exit_code: object = None
        prev_exit = sys.exit

        def exit_hook(code: object = None) -> None:
            self._exit_code = code
            prev_exit(code)

        sys.exit = exit_hook  # type: ignore[assignment]

    # -- setup -------------------------------------------------------------------------------------
    @staticmethod
    def _install_cursor(loader: Any) -> IndexCursor | None:
        """Put an IndexCursor around a DataLoader's index sampler (None for other iterables)."""
        name = "batch_sampler" if getattr(loader, "batch_sampler", None) is not None else "sampler"
        inner = getattr(loader, name, None)
        if inner is None or not hasattr(loader, "_index_sampler"):
            return None
        cursor = IndexCursor(inner)
        object.__setattr__(loader, name, cursor)  # DataLoader forbids it via __setattr__ only
        return cursor

    def _find_cache(self, loader: Any, given: MinioCache | None) -> MinioCache | None:
        """The cache below `loader` (or `given`), said in the log either way."""
        found = find_caches(loader)
        if given is not None:
            self.cache_files = next((f.files for f in found if f.cache.path == given.path), [])
            _say(f"MinIO cache {given.path} (given)" + ("" if self.cache_files else
                 ": no CachedFileDataset reads through it, so the profile treats memory as insensitive"))
            return given
        if not found:
            return None
        first = found[0]
        self.cache_files = first.files
        _say(f"MinIO cache {first.cache.path} found at loader.{first.where}"
             + (f"; {len(found) - 1} more ignored ({', '.join(f.where for f in found[1:])}): "
                "pass SynergyIterator(..., cache=) to choose" if len(found) > 1 else ""))
        return first.cache

    @staticmethod
    def _sampler(loader: Any) -> Any:
        bs = getattr(loader, "batch_sampler", None)
        bs = getattr(bs, "inner", bs)
        return getattr(bs, "sampler", None) or getattr(loader, "sampler", None)

    def _load(self, path: str) -> None:
        assert self.env is not None and self.lease is not None
        data = checkpoint.load(path, self.env.rank)
        shared = data if "state" in data else checkpoint.load(path, 0)
        missing = sorted(set(self.state) - set(shared.get("state", {})))
        if missing:
            raise CheckpointError(f"cannot resume: checkpoint {path} has no state for {', '.join(missing)}")
        for key, obj in self.state.items():
            obj.load_state_dict(shared["state"][key])
        self._measured = [(float(c), float(t)) for c, t in shared.get("profile_points", [])]
        pos = Position.from_dict(data["position"])
        self.position = Position(epoch=pos.epoch, batches=pos.batches, global_samples=pos.global_samples,
                                 step=pos.step, world_size=self.env.world_size)
        self.lease.step = pos.step
        self._resume = data
        _say(f"resuming from {path}: step {pos.step}, epoch {pos.epoch}, batch {pos.batches}"
             + (f" (world size {pos.world_size} -> {self.env.world_size})"
                if pos.world_size != self.env.world_size else ""))

    # -- iteration ---------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name == "loader":
            raise AttributeError(name)
        return getattr(self.loader, name)

    def __iter__(self) -> Iterator[Any]:
        if self.lease is None:
            return iter(self.loader)
        return self._epoch()

    def _start_epoch(self) -> Iterator[Any] | None:
        """The loader iterator for this wrap iteration, positioned; None for an already-done epoch."""
        pos, it_index = self.position, self._iterations
        self._iterations += 1
        resume = self._resume
        if resume is not None and it_index < pos.epoch:
            if self.dali is not None:  # DALI hook: its order advances per epoch; replay done epochs
                self.dali.drop_epoch()
            return None
        if resume is not None:  # the epoch the checkpoint was taken in
            self._resume = None
            old = Position.from_dict(resume["position"])
            elastic = isinstance(self.sampler, ElasticSampler)
            if elastic:
                self.sampler.start = old.global_samples
            skip = 0 if elastic else old.batches
            if self.dali is not None:  # DALI hook: a restored pipeline is already positioned
                if self.dali.restored:
                    return None if self.dali.at_epoch_end else iter(self.loader)
                else:
                    _say(f"DALI pipeline not built from the checkpoint (resume_checkpoint()): "
                         f"reading and dropping {old.epoch} epochs and {skip} batches to get back")
            self._global_base, self._batches_base = old.global_samples, old.batches
            if self.cursor is not None:
                self.cursor.resume(resume.get("epoch_rng"), skip, resume.get("rng"))
                return iter(self.loader)
            it = iter(self.loader)
            for _ in range(skip):  # no index-level skip (e.g. DALI): read and drop
                next(it, None)
            if resume.get("rng") is not None:
                set_rng_states(resume["rng"])
            return it
        pos.epoch, pos.batches = it_index, 0
        self._global_base = self._batches_base = 0
        return iter(self.loader)

    def _epoch(self) -> Iterator[Any]:
        lease = self.lease
        assert lease is not None
        pos = self.position
        if not self._loop_reached:
            self._end_startup()
        if lease.stop_at and lease.step >= lease.stop_at:
            self._stop()
        it = self._start_epoch()
        if it is None:
            return
        while True:
            if self._profiling:
                it = self._profile_step(it)
            else:
                it = self._fit_workers(it)
                if self.refiner is not None:
                    self._refine_step()
            # Checked before the next batch is fetched, so a checkpoint never counts a batch the
            # loader handed out but the script did not get (a DALI checkpoint would skip it).
            if lease.stop_at and lease.step >= lease.stop_at:
                self._stop()
            if lease.checkpoint_at > self._periodic_seen and lease.step >= lease.checkpoint_at:
                self._periodic()
            if lease.terminate:
                _say(f"terminated: {lease.stop_reason}")
                lease.close()
                raise SystemExit(EXIT_TERMINATED)
            batch = next(it, _END)
            if batch is _END:
                return
            pos.batches += 1
            lease.step += 1
            if self._profiling or self.refiner is not None:
                wall0, cpu0 = time.monotonic(), time.process_time()
                yield batch
                self.step_ceiling.add(time.monotonic() - wall0, time.process_time() - cpu0)
            else:
                yield batch

    def _end_startup(self) -> None:
        """The training loop starts: the agent ends the task's start-up phase (no CPU quota until
        now) and answers once the quota is in force. Before any batch, so no profiling window
        (`_profile_step`, in the loop) ever measures the process beyond its allocation."""
        self._loop_reached = True
        self._agent_line = startup.JobLine(self._environ)
        said = self._agent_line.reached_training_loop()
        if said:
            _say(said)

    # -- profiling lease -----------------------------------------------------------------------------
    def _profile_step(self, it: Iterator[Any]) -> Iterator[Any]:
        """Once per iteration while profiling: tick the driver; switch workers when it says."""
        lease = self.lease
        assert lease is not None
        p = self.profiler
        if p is None:
            if not lease.registered.is_set():
                return it
            if lease.profiling is None:
                self._profiling = False  # an ordinary lease: this check never runs again
                return it
            if lease.profiling.in_force_only:  # Slurm: each attempt measures the CPUs it runs on
                self._profiling = False
                self._sized_for = None  # measured with the script's workers: it runs with them
                if self.env is not None and self.env.rank == 0:
                    self._in_force_terms = lease.profiling
                    self._bound_cpus = float(len(os.sched_getaffinity(0)))
                    self.refiner = Refiner(self._measured, self.batch_size * self.position.world_size)
                    _say(f"measuring the profile at the {self._bound_cpus:g} CPUs this process runs on")
                return it
            p = self.profiler = live_profiler.LiveProfiler(lease.profiling, self.batch_size * self.position.world_size,
                                                           cpu_clock=live_profiler.family_cpu_s,
                                                           script_workers=self._script_workers or 0)
            _say(f"profiling lease: {lease.profiling.describe()}")
        cpus, cores, _ = lease.in_force
        workers = p.on_batch(time.monotonic(), cpus, len(cores))
        lease.want_cpus = p.want
        if workers is not None and self.cursor is not None:
            it = self._switch_workers(it, workers)
        if p.done:
            self._profiling = False
            lease.want_cpus = 0
            lease.profile_job = self._profile_job(p.result(), p.terms)
            _say("profiling done: " + ", ".join(f"{c} CPUs {s:.1f} samples/s" for c, s in p.result()))
            assert self.env is not None
            if self.env.rank == 0:  # one rank refines (and reports) for the job
                points, guess = self._optimistic(p.result())
                self.refiner = Refiner(points, self.batch_size * self.position.world_size, guess)
            self._sized_for = cpus  # the last point's workers fit the CPUs still in force
        return it

    def _fit_workers(self, it: Iterator[Any]) -> Iterator[Any]:
        """Outside profiling: the loader's workers follow the CPUs in force, as profiling sized
        them at each point (`workers_for`, never fewer than the script's own). The profile
        promises the speed measured that way, and TUNE hands out CPUs for it; a new count
        takes a new loader iterator at the current position, so only a resize costs one."""
        assert self.lease is not None
        cpus = self.lease.in_force[0]
        if cpus == self._sized_for or self._sized_for is None or self.cursor is None or self._script_workers is None:
            return it
        self._sized_for = cpus
        now, want = getattr(self.loader, "num_workers", None), live_profiler.workers_for(cpus, self._script_workers)
        if want == now:
            return it
        _say(f"{cpus:g} CPUs in force: the loader's workers {now} -> {want}")
        return self._switch_workers(it, want)

    def _switch_workers(self, it: Iterator[Any], workers: int) -> Iterator[Any]:
        """A new loader iterator with `workers` workers at the current position: the same
        in-process resume a relaunch does (same epoch order, consumed batches skipped in the
        sampler), so no batch is repeated or skipped across the switch."""
        assert self.cursor is not None
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        loader, pos = self.loader, self.position
        loader.num_workers = workers
        if workers > 0 and getattr(loader, "prefetch_factor", 2) is None:
            loader.prefetch_factor = 2  # a DataLoader built with 0 workers has None
        if hasattr(loader, "_iterator"):
            loader._iterator = None  # persistent workers: do not reuse the old pool
        skip = pos.batches
        if isinstance(self.sampler, ElasticSampler):
            done = self._global_base + (pos.batches - self._batches_base) * self.batch_size * pos.world_size
            self.sampler.start = done
            self._global_base, self._batches_base, skip = done, pos.batches, 0
        if pos.batches:  # mid-epoch: replay this epoch's order, drop what was consumed
            self.cursor.resume(self.cursor.epoch_rng, skip, rng_states(self.cursor.generator))
        # (at an epoch's start nothing was consumed: the new iterator simply draws the epoch)
        return iter(loader)

    def _refine_step(self) -> None:
        """Once per iteration after profiling: a new point measured at the allocation in force
        is reported with the rest (profiler/refine.py)."""
        assert self.lease is not None and self.refiner is not None
        r = self.refiner
        if r.on_batch(time.monotonic(), self._bound_cpus or self.lease.in_force[0]):
            _say("profile refined: " + ", ".join(f"{c:g} CPUs {s:.1f} samples/s" for c, s in r.points))
            terms = self.profiler.terms if self.profiler is not None else self._in_force_terms
            self.lease.profile_job = self._profile_job(r.points, terms)
        if r.done:
            self._measured, self.refiner = r.points, None

    def _optimistic(self, measured: list[tuple[float, float]]) -> tuple[list[tuple[float, float]], float | None]:
        """`measured` and the optimistic row above it, if any (profiler/refine.py)."""
        return optimistic_points(measured, saturated=self.profiler.saturated if self.profiler else (),
                                 ceiling=self.step_ceiling.samples_per_s)

    def _profile_job(self, measured: list[tuple[float, float]], terms: Any) -> Any:
        """What the lease thread runs to complete the profile: (model name, profile document).
        Above the top point, if the job still climbs there, one optimistic row
        (profiler/refine.py), which the refiner corrects once a round gives it that much."""
        assert self.env is not None
        files = [Path(f) for f in self.cache_files] or None
        rss = live_profiler.process_rss_gb()
        points, guess = self._optimistic(measured)
        if guess is not None:
            ceiling = self.step_ceiling.samples_per_s
            _say(f"above the measured points: {guess:g} CPUs guessed at {points[-1][1]:.1f} samples/s ("
                 + (f"the device time of a step allows {ceiling:.1f}" if ceiling else "no device time seen") + ")")
        model = self.env.job_name or f"job-{self.env.job_id}"
        batch = self.batch_size * self.position.world_size

        def job() -> tuple[str, dict[str, Any]]:
            doc = live_profiler.build_profile(points, terms, model=model, files=files,
                                              batch_size=batch, process_mem_gb=rss)
            if guess is not None:
                doc["source"] += f"; {guess:g} CPUs extrapolated (still climbing at the top), refined online"
            return model, doc
        return job

    # -- stop, checkpoint, completion --------------------------------------------------------------
    def _snapshot(self) -> dict[str, Any]:
        assert self.env is not None and self.lease is not None
        pos = self.position
        pos.step = self.lease.step
        pos.world_size = self.env.world_size
        pos.global_samples = self._global_base + (pos.batches - self._batches_base) * self.batch_size * pos.world_size
        gen = self.cursor.generator if self.cursor is not None else None
        data: dict[str, Any] = {
            "position": pos.to_dict(),
            "epoch_rng": self.cursor.epoch_rng if self.cursor is not None else None,
            "rng": rng_states(gen),
        }
        if self.dali is not None:
            data[DALI_KEY] = self.dali.checkpoints()
        if self.env.rank == 0:
            data["state"] = {k: obj.state_dict() for k, obj in self.state.items()}
            points = self.refiner.points if self.refiner is not None else self._measured
            if points:  # measured profile points travel with the job across attempts (Slurm)
                data["profile_points"] = [list(p) for p in points]
        return data

    def checkpoint(self) -> tuple[Path, int]:
        """Write this rank's checkpoint file for the current step; returns (step dir, bytes)."""
        assert self.env is not None and self.lease is not None
        if not self.env.checkpoint_dir:
            raise CheckpointError("no checkpoint dir in the job spec (checkpoint_dir): cannot stop and resume")
        step_dir = checkpoint.step_dir(self.env.checkpoint_dir, self.lease.step)
        size = checkpoint.atomic_save(self._snapshot(), checkpoint.rank_file(step_dir, self.env.rank))
        return step_dir, size

    def _periodic(self) -> None:
        """At the agreed step: snapshot to memory, write in the background (or skip: busy)."""
        assert self.env is not None and self.lease is not None
        lease, writer = self.lease, self.writer
        self._periodic_seen = lease.checkpoint_at
        if writer is None:
            return
        if writer.busy:
            self.periodic_skipped += 1
            _say(f"periodic checkpoint at step {lease.step} skipped: the one of step {writer.step} "
                 "is still being written")
            return
        t = time.monotonic()
        data = self._snapshot_buffer = snapshot_copy(self._snapshot(), self._snapshot_buffer)
        self.snapshot_s += time.monotonic() - t
        path = checkpoint.rank_file(checkpoint.step_dir(self.env.checkpoint_dir, lease.step), self.env.rank)
        writer.submit(lease.step, data, path)

    def _written(self, done: Written) -> None:
        """The writer thread, after a periodic write: report it (or its failure), then retain."""
        assert self.env is not None and self.lease is not None
        if done.error is not None:
            self.periodic_failed += 1
            _say(f"{done.error}; training goes on (a lost job resumes from its last good checkpoint)")
            self.lease.report_checkpoint(done.step, "", error=str(done.error))
            return
        self.periodic_written += 1
        reported = self.lease.report_checkpoint(done.step, str(done.path))
        _say(f"checkpointed step {done.step} in the background to {done.path} ({done.size} bytes in "
             f"{done.seconds:.2f} s, {done.size / 1e6 / max(done.seconds, 1e-9):.0f} MB/s)")
        if reported:
            self._retain(done.step)

    def _retain(self, newest_reported: int) -> None:
        """Rank 0 deletes step dirs older than the newest `keep_checkpoints` complete ones."""
        assert self.env is not None
        if self.env.rank != 0:
            return
        gone = checkpoint.retain(self.env.checkpoint_dir, self.keep_checkpoints, self.env.world_size,
                                 newest_reported)
        if gone:
            _say(f"deleted the checkpoints of steps {', '.join(map(str, gone))} "
                 f"(keeping the newest {self.keep_checkpoints})")

    def _stop(self) -> None:
        assert self.lease is not None and self.env is not None
        lease = self.lease
        if self.writer is not None and self.writer.busy:
            _say(f"stop: waiting for the background checkpoint of step {self.writer.step}")
            self.writer.wait()
        try:
            path, size = self.checkpoint()
        except CheckpointError as exc:
            if exc.kind not in (checkpoint.FULL, checkpoint.READ_ONLY):
                self._fail(str(exc))
            # The disk, not the job, is at fault: exit 75 without a new checkpoint, so the job is
            # requeued and resumes from its last good one; describe shows why.
            lease.report_checkpoint(lease.step, "", error=str(exc))
            _say(f"error: {exc}; exit 75 without a new checkpoint: the job resumes from its last good one")
            lease.close()
            raise SystemExit(EXIT_PREEMPTED) from None
        if lease.report_checkpoint(lease.step, str(path)):
            self._retain(lease.step)
        waited = time.monotonic() - lease.stop_received_s
        _say(f"checkpointed step {lease.step} to {path} ({size} bytes), {waited:.3f} s after STOP: exit 75")
        self.stopped_step = lease.step
        lease.close()
        raise SystemExit(EXIT_PREEMPTED)

    def _fail(self, message: str) -> None:
        """One line on stderr (the agent's log tail carries it into describe), FAILED, exit 1."""
        _say(f"error: {message}")
        self._failed = True
        if self.lease is not None and self.env is not None and self.env.rank == 0:
            # bounded: a job that cannot start must not hang on a daemon that is down
            self.lease.report_completion(False, self.lease.step, message, patience_s=2.0)
        if self.lease is not None:
            self.lease.close()
        raise SystemExit(EXIT_FAILED)

    def _at_exit(self) -> None:
        # First: what is left is the interpreter's teardown (torch's, the DataLoader workers'),
        # which the agent lets run without the CPU quota (synergy.common.startup.JobLine).
        if self._agent_line is not None:
            self._agent_line.winding_down()
        lease = self.lease
        if lease is None or self.env is None or lease._closed.is_set():
            return
        if self.writer is not None:  # a write in flight finishes (no stray temp file)
            self.writer.wait(timeout=lease.report_patience_s)
        if not self._failed and self.env.rank == 0:
            failure = exit_failure(self._exit_code)
            lease.report_completion(not failure, lease.step, failure)
        lease.close()
