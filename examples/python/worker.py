"""A Python GPU worker instrumented with higgsmeter: the seed README's patterns
(service lifecycle, nested operations, client decorators) plus an asyncio request
handler and the engine catalog's recorders, on simulated work.

    .venv/bin/python examples/python/worker.py --duration 5

Push to a collector (every rank tracks then), e.g. the demo's or
`cargo run -p higgsmeter-collector`:

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 RANK=1 .venv/bin/python examples/python/worker.py

or serve `/metrics` in-process with HIGGSMETER_PROMETHEUS_ADDR=127.0.0.1:9470. At the end
it prints where its time went.
"""

import argparse
import asyncio
import os
import random
import time

from higgsmeter import AppState
from higgsmeter import enable_tracker
from higgsmeter import state_tracker
from higgsmeter import track_state
from higgsmeter.engine import EngineRecorders
from higgsmeter.engine import step
from higgsmeter.engine import transfer


class Storage:
    """Pattern 3: client decorators."""

    @track_state(AppState.IO)  # operation = "Storage.fetch_metadata"
    def fetch_metadata(self, job):
        time.sleep(0.004)
        return {'job': job}

    @track_state(AppState.IO, operation='upload_result')
    def upload(self, result):
        time.sleep(0.003)


@track_state(AppState.CPU)  # Pattern 2: nested operations
def process_job(storage, job):
    metadata = storage.fetch_metadata(job)
    with state_tracker.scope(AppState.GPU, 'inference'):
        with step('decoder', 'decode', batch_size=8):
            time.sleep(0.006)
    with transfer('decoder', 'api_server', 'tcp', bytes=4096):
        time.sleep(0.001)
    storage.upload(metadata)


@track_state(AppState.IO)
async def handle_request(i):
    """An asyncio request: in io for its whole life, its GPU part nested inside."""
    await asyncio.sleep(0.005)
    with state_tracker.scope(AppState.GPU, 'async_inference'):
        await asyncio.sleep(0.004)
    return i


async def serve_batch(n):
    return await asyncio.gather(*(handle_request(i) for i in range(n)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--duration', type=float, default=5.0, help='seconds of work')
    args = parser.parse_args()

    rank = int(os.environ.get('RANK', '0'))
    enable_tracker(rank)  # Pattern 1: service lifecycle
    state_tracker.set_state(AppState.STARTUP)
    with state_tracker.scope(AppState.WARMUP, 'model_loading'):
        time.sleep(0.05)
    recorders = EngineRecorders()
    kv = recorders.kv_pages('decoder', f'gpu{rank}')

    storage = Storage()
    state_tracker.set_state(AppState.IDLE, 'consuming_messages')
    deadline = time.monotonic() + args.duration
    job = 0
    while time.monotonic() < deadline:
        job += 1
        if job % 5 == 0:
            asyncio.run(serve_batch(4))
        else:
            process_job(storage, job)
        kv.set(4096, random.randint(512, 4096), 256)
        time.sleep(0.002)  # idle: waiting for the next message

    state_tracker.set_state(AppState.SHUTDOWN)
    state_tracker.finalize()
    entries, _, elapsed = state_tracker.snapshot()
    print(f'rank {rank}: {job} jobs in {elapsed:.2f} s')
    for state, operation, seconds in sorted(entries, key=lambda e: -e[2]):
        print(f'  {state:<8} {operation or "-":<28} {seconds:7.3f} s {100 * seconds / elapsed:5.1f} %')
    print(f'  sum {sum(e[2] for e in entries):.6f} s = elapsed {elapsed:.6f} s')


if __name__ == '__main__':
    main()
