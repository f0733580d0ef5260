"""What every Synergy process shares: synergyd, synergy-agent, the CLI and a training job.

Each module here loads only the standard library (and grpc, for the channel), so that a
training process (`synergy.iterator`) never loads the agent's supervisor, telemetry or psutil,
and the agent never loads the daemon or the CLI (tests/regressions/test_import_boundaries.py):

* `logs`: structured logs (one JSON object or text line per event);
* `contract`: the environment contract between the agent and a job's processes;
* `channel`: a gRPC channel to synergyd with its reconnect settings, and the jittered back-off;
* `tlsprobe`: why a connection failed when TLS is the reason, in one sentence;
* `tasks`: a task's key and phases as the daemon and the agent both name them;
* `files`: atomic writes and lock files.
"""
