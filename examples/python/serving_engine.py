"""A serving engine's worker and API server on higgsmeter, as the engine team writes
them: the worker records its steps, transfers, KV pages and prefix cache through
``higgsmeter.engine`` (pushed over OTLP with its state timeline), and the API server
builds its ``prometheus_client`` families from ``higgsmeter.catalog`` exactly as it did
from the engine's own catalog module, ``model_name`` first, refreshed every
``STATUS_INTERVAL_S``.

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 RANK=0 .venv/bin/python examples/python/serving_engine.py --duration 2

Runs both roles in one process for the example (the API server on a thread, serving
``/metrics`` on ``--api-port``, 0 for a port the system picks). At the end it prints one
JSON line: the steps and transfers it made, its tracked time, the API server's address
and the API server's exposition.
"""

import argparse
import json
import random
import threading
import time
from urllib.request import urlopen

from prometheus_client import CollectorRegistry
from prometheus_client import generate_latest
from prometheus_client import start_http_server

from higgsmeter import AppState
from higgsmeter import enable_tracker
from higgsmeter import state_tracker
from higgsmeter.catalog import CONDUCTOR_REQUEST_STATES
from higgsmeter.catalog import STATUS_FAMILIES
from higgsmeter.catalog import STATUS_INTERVAL_S
from higgsmeter.catalog import build_prometheus_metrics
from higgsmeter.engine import EngineRecorders
from higgsmeter.engine import step
from higgsmeter.engine import transfer

MODEL = 'llama-3-8b'


class Conductor:
    """The requests the conductor holds (simulated): what the API server polls."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {state: 0 for state in CONDUCTOR_REQUEST_STATES}

    def update(self, waiting: int, running: int) -> None:
        with self.lock:
            self.counts.update(waiting=waiting, running=running, draining=0)

    def status(self) -> dict[str, int]:
        with self.lock:
            return dict(self.counts)


def api_server(conductor: Conductor, port: int, interval: float, stop: threading.Event):
    """The API server's metrics: one ``prometheus_client`` family per catalog entry,
    built by ``build_prometheus_metrics`` (its own registry here), the conductor's
    request counts set every ``interval`` seconds."""
    registry = CollectorRegistry()
    metrics = build_prometheus_metrics(STATUS_FAMILIES, registry=registry)
    server, _thread = start_http_server(port, addr='127.0.0.1', registry=registry)

    def refresh():
        while True:
            for state, n in conductor.status().items():
                metrics['mstar_conductor_requests'].labels(model_name=MODEL, state=state).set(n)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=refresh, name='api-status', daemon=True)
    thread.start()
    return registry, server, thread


def worker(duration: float, conductor: Conductor) -> dict[str, int]:
    """The engine worker: prefill, a KV transfer to the decoder, decode; every step a
    GPU state scope with the catalog's step and transfer spans inside."""
    rec = EngineRecorders()
    kv = rec.kv_pages('decoder', 'gpu0')
    prefix = rec.prefix_cache('prefill')
    pending = rec.pending_steps('decoder')
    requests = rec.conductor_requests()
    rng = random.Random(7)
    made = {'steps': 0, 'transfers': 0}
    state_tracker.set_state(AppState.IDLE, 'waiting_for_requests')
    deadline = time.monotonic() + duration
    while time.monotonic() < deadline:
        waiting, running = rng.randint(0, 6), rng.randint(1, 8)
        conductor.update(waiting, running)
        requests.set(waiting=waiting, running=running, draining=0)
        pending.set(waiting)
        with state_tracker.scope(AppState.GPU, 'prefill'):
            with step('prefill', 'prefill', batch_size=running):
                prefix.record_lookup(query_tokens=512, hit_tokens=rng.randint(0, 512))
                time.sleep(0.004)
        with state_tracker.scope(AppState.IO, 'kv_transfer'):
            with transfer('prefill', 'decoder', 'nvlink', bytes=running << 20):
                time.sleep(0.001)
        with state_tracker.scope(AppState.GPU, 'decode'):
            with step('decoder', 'decode', batch_size=running):
                time.sleep(0.003)
        kv.set(total=4096, used=256 * running, cached=128)
        made['steps'] += 2
        made['transfers'] += 1
        time.sleep(0.002)  # between batches: idle, waiting for requests
    return made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--duration', type=float, default=5.0, help='seconds of serving')
    parser.add_argument('--api-port', type=int, default=0)
    parser.add_argument(
        '--status-interval',
        type=float,
        default=STATUS_INTERVAL_S,
        help='the API server refresh (the catalog says %(default)s s)',
    )
    args = parser.parse_args()

    enable_tracker()
    state_tracker.set_state(AppState.STARTUP)
    conductor = Conductor()
    stop = threading.Event()
    registry, server, refresher = api_server(conductor, args.api_port, args.status_interval, stop)
    address = f'127.0.0.1:{server.server_address[1]}'
    made = worker(args.duration, conductor)
    state_tracker.set_state(AppState.SHUTDOWN)
    state_tracker.finalize()
    stop.set()
    refresher.join()
    # What Prometheus scrapes from the API server, over HTTP.
    with urlopen(f'http://{address}/metrics', timeout=5) as response:
        served = response.read().decode()
    server.shutdown()
    entries, _code, elapsed = state_tracker.snapshot()
    print(
        json.dumps(
            {
                **made,
                'elapsed': elapsed,
                'tracked': sum(s for _, _, s in entries),
                'api_address': address,
                'api_exposition': served,
                'same_as_registry': served == generate_latest(registry).decode(),
            }
        ),
        flush=True,
    )
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
