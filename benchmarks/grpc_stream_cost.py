"""Server-side CPU per message: a grpc.aio unary call vs a message on a long-lived stream.

Why: about 80% of synergyd's CPU under a thousand renewals a second is gRPC's own per-call
machinery (docs/daemon.md, "CPU per RPC"). A renewal sent as one message on a stream the job
keeps open skips most of it (no new HTTP/2 stream, no call object, no metadata, no handler
lookup). This measures how much, with nothing else in the way: a bare grpc.aio server on
uvloop (as synergyd's), RenewLease-sized request and reply (the real messages), N clients
each sending one message every --interval seconds, and the server process's CPU (user +
system, psutil) per message over --duration seconds.

    python benchmarks/grpc_stream_cost.py [--clients 1000] [--interval 1] [--duration 10]

Prints CPU per message for unary and for bidirectional streams, and their ratio.
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time

import grpc
import psutil
import uvloop

from synergy.v1 import job_pb2

METHOD_UNARY = "/bench.Bench/Unary"
METHOD_STREAM = "/bench.Bench/Stream"


def _reply() -> job_pb2.RenewLeaseResponse:
    """A typical RenewLease reply: CONTINUE, a lease with one placement, the allocation in force."""
    r = job_pb2.RenewLeaseResponse(action=job_pb2.LEASE_ACTION_CONTINUE, renew_interval_s=1.0)
    r.lease.job_id, r.lease.attempt, r.lease.expires_at_unix_s, r.lease.round_index = 123, 1, time.time() + 30, 7
    p = r.lease.placements.add()
    p.node_id, p.gpus, p.cpus, p.mem_gb = "node-0042", 1, 3.0, 62.5
    r.in_force.cpus, r.in_force.mem_gb, r.in_force.known = 3.0, 62.5, True
    r.in_force.cores.extend([12, 13, 14])
    return r


def serve(port_q: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    async def main() -> None:
        reply = _reply()

        async def unary(request: job_pb2.RenewLeaseRequest, context: grpc.aio.ServicerContext) -> job_pb2.RenewLeaseResponse:
            return reply

        async def stream(requests, context):  # type: ignore[no-untyped-def]
            async for _ in requests:
                yield reply

        handlers = {
            "Unary": grpc.unary_unary_rpc_method_handler(
                unary, request_deserializer=job_pb2.RenewLeaseRequest.FromString,
                response_serializer=job_pb2.RenewLeaseResponse.SerializeToString),
            "Stream": grpc.stream_stream_rpc_method_handler(
                stream, request_deserializer=job_pb2.RenewLeaseRequest.FromString,
                response_serializer=job_pb2.RenewLeaseResponse.SerializeToString),
        }
        server = grpc.aio.server(maximum_concurrent_rpcs=8192)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Bench", handlers),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        port_q.put(port)
        await server.wait_for_termination()

    uvloop.run(main())


def _request(i: int, step: int) -> bytes:
    return job_pb2.RenewLeaseRequest(job_id=i + 1, attempt=1, rank=0, step=step,
                                     samples_per_s=812.5, steps_per_s=3.17).SerializeToString()


async def load(port: int, mode: str, clients: int, interval: float, duration: float,
               server: psutil.Process) -> tuple[int, float]:
    """Messages sent in the measured window and the server's CPU seconds over it."""
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(max(1, clients // 100))]
    done = 0
    measuring = asyncio.Event()
    stop = asyncio.Event()

    async def client(i: int) -> None:
        nonlocal done
        ch = channels[i % len(channels)]
        await asyncio.sleep(interval * i / clients)
        step = 0
        if mode == "unary":
            call = ch.unary_unary(METHOD_UNARY, request_serializer=None,
                                  response_deserializer=job_pb2.RenewLeaseResponse.FromString)
            while not stop.is_set():
                await call(_request(i, step), timeout=10)
                done += measuring.is_set()
                step += 1
                await asyncio.sleep(interval)
            return
        s = ch.stream_stream(METHOD_STREAM, request_serializer=None,
                             response_deserializer=job_pb2.RenewLeaseResponse.FromString)()
        while not stop.is_set():
            await s.write(_request(i, step))
            await s.read()
            done += measuring.is_set()
            step += 1
            await asyncio.sleep(interval)
        await s.done_writing()

    tasks = [asyncio.create_task(client(i)) for i in range(clients)]
    await asyncio.sleep(interval * 3)  # every client started and warm
    t0 = server.cpu_times()
    measuring.set()
    await asyncio.sleep(duration)
    measuring.clear()
    t1 = server.cpu_times()
    stop.set()
    await asyncio.gather(*tasks)
    for ch in channels:
        await ch.close()
    return done, (t1.user + t1.system) - (t0.user + t0.system)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=1, help="alternate unary/stream this many times")
    a = ap.parse_args()
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    proc = ctx.Process(target=serve, args=(q,), daemon=True)
    proc.start()
    port = q.get(timeout=30)
    server = psutil.Process(proc.pid)
    print(f"load average {psutil.getloadavg()[0]:.2f}; {a.clients} clients, one message every {a.interval} s each")
    per = {"unary": [], "stream": []}  # type: dict[str, list[float]]
    try:
        for _ in range(a.repeat):
            for mode in ("unary", "stream"):
                n, cpu = uvloop.run(load(port, mode, a.clients, a.interval, a.duration, server))
                per[mode].append(cpu / max(n, 1) * 1e3)
                print(f"{mode:>6}: {n} messages, server CPU {cpu:.2f} s, {per[mode][-1]:.3f} ms per message")
    finally:
        proc.kill()
    u, s = min(per["unary"]), min(per["stream"])
    print(f"stream / unary = {s / u:.2f} (best of each)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
