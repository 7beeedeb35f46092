"""Traces from Python: with OTEL_TRACES_EXPORTER=otlp, state scopes and step spans
arrive at a real OTLP receiver (grpcio + opentelemetry-proto,
tests/tests/python/otlp_trace_receiver.py), nested per asyncio task and per thread as
the code nests them; the state time is counted once all the same."""

import json
import subprocess
import sys

import pytest
from support import repo_root

RECEIVER = repo_root() / 'tests/tests/python/otlp_trace_receiver.py'

WORKER = """
import asyncio, json, threading
from higgsmeter import AppState, enable_tracker, state_tracker
from higgsmeter.engine import step

enable_tracker()
assert state_tracker.pipeline['traces'], state_tracker.pipeline

async def request(name, other_entered, entered):
    with state_tracker.scope(AppState.GPU, name):
        entered.set()
        await other_entered.wait()          # both tasks' scopes are open at once
        with step('decoder', name, batch_size=1):
            await asyncio.sleep(0.01)

async def main():
    a, b = asyncio.Event(), asyncio.Event()
    await asyncio.gather(request('task_a', b, a), request('task_b', a, b))

def in_thread():
    with state_tracker.scope(AppState.IO, 'thread_io'):
        with step('loader', 'thread_step'):
            pass

asyncio.run(main())
t = threading.Thread(target=in_thread)
t.start(); t.join()
state_tracker.finalize()
entries, _, elapsed = state_tracker.snapshot()
print(json.dumps({'sum': sum(s for _, _, s in entries), 'elapsed': elapsed}))
"""


@pytest.mark.parametrize('protocol', ['http/protobuf', 'grpc'])
def test_spans_nest_per_task_and_thread(run_python, protocol):
    receiver = subprocess.Popen(
        [sys.executable, str(RECEIVER), '--deadline', '60'],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ports = json.loads(receiver.stdout.readline())
        port = ports['grpc'] if protocol == 'grpc' else ports['http']
        out = run_python(
            WORKER,
            env={
                'OTEL_TRACES_EXPORTER': 'otlp',
                'OTEL_EXPORTER_OTLP_ENDPOINT': f'http://127.0.0.1:{port}',
                'OTEL_EXPORTER_OTLP_PROTOCOL': protocol,
                'OTEL_BSP_SCHEDULE_DELAY': '100',
                'OTEL_SERVICE_NAME': 'py-traces',
            },
        )
        assert out.returncode == 0, out.stderr
        counted = json.loads(out.stdout.strip().splitlines()[-1])
        assert abs(counted['sum'] - counted['elapsed']) < 1e-6
        receiver.stdin.close()
        received = json.loads(receiver.stdout.readline())
    finally:
        receiver.kill()
        receiver.wait(timeout=10)

    spans = received['spans']
    by_id = {s['span_id']: s for s in spans}

    def named(name, **attrs):
        hits = [
            s
            for s in spans
            if s['name'] == name and all(s['attributes'].get(k) == v for k, v in attrs.items())
        ]
        assert len(hits) == 1, (name, attrs, [(s['name'], s['attributes']) for s in spans])
        return hits[0]

    for task in ('task_a', 'task_b'):
        gpu = named('gpu', operation=task)
        assert gpu['attributes']['state'] == 'gpu'
        assert gpu['parent_span_id'] in ('', '0' * 16)  # a root: no span was open around it
        inner = named('mstar_step', graph_walk=task)
        # Each task's step nests under its own task's scope, although both scopes were
        # open on the one event-loop thread at once.
        assert by_id[inner['parent_span_id']] is gpu
        assert inner['trace_id'] == gpu['trace_id']
    io = named('io', operation='thread_io')
    assert by_id[named('mstar_step', graph_walk='thread_step')['parent_span_id']] is io
    assert (
        named('gpu', operation='task_a')['trace_id'] != named('gpu', operation='task_b')['trace_id']
    )
    assert all(s['resource'].get('service.name') == 'py-traces' for s in spans)
