"""The seed users' guide (docs/python-guide.md) runs as written: its three examples, a
DDP training job, a serving engine and a lab session, each checked against what it
claims.

- ``examples/python/ddp_train.py --ranks 3`` (the stand-in for torchrun, batches from
  forked loader processes) through a real collector: one source per rank, none for the
  forked loaders, and the fleet equal to the sum of the ranks' own totals exactly.
- ``examples/python/serving_engine.py`` through a real collector: every step and
  transfer it made arrives as the catalog's histograms, and its API server serves the
  catalog's families, with their help texts and ``model_name``, over HTTP.
- ``examples/python/lab_session.py``: its counters equal the seed's own ``apply_sample``
  over the same samples.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import clean_env
from support import collector_running
from support import settle

EXAMPLES = Path(__file__).resolve().parents[3] / 'examples' / 'python'
W = 'worker_activity_time_seconds_total'
EXACT = 1e-6
SETTLE_DEADLINE_S = 15.0


def example_env(extra: dict[str, str]) -> dict[str, str]:
    """The test's environment without any worker setting, plus ``extra``."""
    env = {k: v for k, v in clean_env().items() if not k.startswith('TORCHELASTIC_')}
    env.pop('MASTER_ADDR', None)
    env['RUST_LOG'] = 'warn'
    env.update(extra)
    return env


def run_example(name: str, args: list[str], env: dict[str, str]) -> list[dict]:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, f'{name} failed ({out.returncode}):\n{out.stderr}'
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith('{')]


def test_ddp_job_one_source_per_rank_and_the_fleet_is_their_sum():
    with collector_running() as collector:
        env = example_env(
            {
                'OTEL_EXPORTER_OTLP_ENDPOINT': collector.otlp_endpoint('http/protobuf'),
                'OTEL_EXPORTER_OTLP_PROTOCOL': 'http/protobuf',
                'OTEL_METRIC_EXPORT_INTERVAL': '200',
                'OTEL_SERVICE_NAME': 'ddp-train',
            }
        )
        ranks = run_example('ddp_train.py', ['--ranks', '3', '--steps', '12'], env)
        assert sorted(r['rank'] for r in ranks) == [0, 1, 2], ranks
        truth: dict[tuple[str, str], float] = defaultdict(float)
        for r in ranks:
            assert r['tracking'] and r['world_size'] == 3, r
            assert abs(sum(r['seconds'].values()) - r['elapsed']) <= EXACT, r
            for op in ('gpu/forward_backward', 'io/next_batch', 'idle/all_reduce'):
                assert r['seconds'].get(op, 0) > 0, (op, r)
            for key, secs in r['seconds'].items():
                state, _, op = key.partition('/')
                truth[(state, op)] += secs

        def ready(_fleet, sources):
            return {s.label('rank') for s in sources if s.name == W} == {'0', '1', '2'}

        fleet, sources = settle(collector, ready, timeout=SETTLE_DEADLINE_S)
        # One source per rank: the forked loader processes never tracked.
        instances = {s.label('instance') for s in sources if s.name == W}
        assert len(instances) == 3, instances
        got = {
            (s.label('state'), s.label('operation')): s.value
            for s in fleet
            if s.name == W and s.label('job') == 'ddp-train'
        }
        assert set(got) == set(truth), (sorted(got), sorted(truth))
        for key, want in truth.items():
            assert abs(got[key] - want) <= EXACT, (key, got[key], want)


def test_serving_engine_steps_reach_the_collector_and_the_api_serves_the_catalog():
    from higgsmeter.catalog import STATUS_FAMILIES
    from prometheus_client.parser import text_string_to_metric_families

    with collector_running() as collector:
        env = example_env(
            {
                'OTEL_EXPORTER_OTLP_ENDPOINT': collector.otlp_endpoint('http/protobuf'),
                'OTEL_EXPORTER_OTLP_PROTOCOL': 'http/protobuf',
                'OTEL_METRIC_EXPORT_INTERVAL': '200',
                'OTEL_SERVICE_NAME': 'engine',
                'RANK': '0',
            }
        )
        (made,) = run_example(
            'serving_engine.py', ['--duration', '0.6', '--status-interval', '0.1'], env
        )
        assert made['steps'] > 0 and made['transfers'] > 0, made
        assert abs(made['tracked'] - made['elapsed']) <= EXACT, made

        def count(fleet, name):
            return sum(s.value for s in fleet if s.name == name)

        def ready(fleet, _sources):
            return count(fleet, 'mstar_step_seconds_count') >= made['steps']

        fleet, _ = settle(collector, ready, timeout=SETTLE_DEADLINE_S)
        assert count(fleet, 'mstar_step_seconds_count') == made['steps']
        assert count(fleet, 'mstar_batch_size_count') == made['steps']
        assert count(fleet, 'mstar_transfer_seconds_count') == made['transfers']
        assert count(fleet, 'mstar_transfers_total') == made['transfers']

    # The API server's exposition, as Prometheus scrapes it: the catalog's families.
    assert made['same_as_registry'] is True
    served = {f.name: f for f in text_string_to_metric_families(made['api_exposition'])}
    for family in STATUS_FAMILIES.values():
        # prometheus_client names a counter's family without its _total
        name = family.name.removesuffix('_total') if family.kind == 'counter' else family.name
        assert name in served, family.name
        assert served[name].documentation == family.help, family.name
        assert served[name].type == family.kind, family.name
    requests = [s for s in served['mstar_conductor_requests'].samples]
    assert {s.labels['state'] for s in requests} == {'waiting', 'running', 'draining'}
    assert all(s.labels['model_name'] == 'llama-3-8b' for s in requests), requests


def test_lab_session_counts_as_the_seed_does():
    from higgsmeter import lab

    spec = importlib.util.spec_from_file_location('lab_session', EXAMPLES / 'lab_session.py')
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    (ours,) = run_example('lab_session.py', ['--synthetic', '80'], example_env({}))
    # The seed's own code (the module's fallback path) over the same samples.
    seed = lab.new_counters(example.START)
    for sample in example.synthetic(80):
        lab._apply_sample_seed(seed, sample)
    want = {k: example.plain(v) for k, v in dataclasses.asdict(seed).items()}
    ours.pop('subject_field')
    assert ours == json.loads(json.dumps(want))
    assert ours['sample_count'] == 80 and ours['seconds_to_first_sleap_train'] is not None
