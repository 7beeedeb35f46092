"""The job view against the reference: one training job's history, replayed both into
the collector (as the SDK pushes it over OTLP: activity seconds and progress marks) and
into Google's ``ml-goodput-measurement`` calculator (its recorder's events, run by
``goodput_reference.py`` in the reference's own venv), compared figure by figure.

The history: start-up, accelerator initialisation, a first batch, 27 steps of 2 s with
an evaluation (custom badput) after step 10 and a checkpoint of step 20, a crash 1 s
into step 28, 45 s down, then a restart that restores step 20 (start-up, checkpoint
restore, initialisation, a first batch) and runs steps 21..30 to the job's end.

Where the definitions agree the figures are equal: the job's time, productive time,
initialisation, synchronous data loading and custom badput. Where they differ the test
pins the difference ADR 0021 states: the step in flight at the crash is wasted progress
for us and recovery for the reference (their sum is equal); our start-up and checkpoint
restore seconds are the reference's "other" (it reads restore time from its checkpoint
manager's logs, which a non-JAX job does not write).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from support import collector_running
from support import http_get
from support import repo_root
from support import wait_for

T0 = 1_700_000_000.0
STEP = 2.0
DOWN = 45.0
JOB = 'reference-replay'
EXACT = 1e-6


def history():
    """The reference's events and, per incarnation, our (state, operation, seconds)
    segments in order, with its start time; and the in-flight step's seconds."""
    events: list[list] = []
    segments: dict[int, list[tuple[str, str, float]]] = {0: [], 1: []}
    starts = {}
    t = T0

    def seg(inc, state, op, seconds):
        nonlocal t
        segments[inc].append((state, op, seconds))
        t += seconds

    starts[0] = t
    events.append(['job_start', t])
    seg(0, 'startup', '', 4.0)
    events.append(['init_start', t])
    seg(0, 'warmup', 'init', 6.0)
    events.append(['init_end', t])
    events.append(['data_start', t])
    seg(0, 'io', 'first_batch', 1.5)
    events.append(['data_end', t])
    for step in range(1, 29):
        events.append(['step', step, t])
        if step == 28:
            seg(0, 'gpu', 'train_step', 1.0)  # killed 1 s into step 28
            break
        seg(0, 'gpu', 'train_step', STEP)
        if step == 10:
            events.append(['custom_start', t, 'eval'])
            seg(0, 'cpu', 'badput.eval', 3.0)
            events.append(['custom_end', t, 'eval'])
    t += DOWN
    starts[1] = t
    events.append(['job_start', t])
    seg(1, 'startup', '', 3.0)
    seg(1, 'io', 'checkpoint_restore', 5.0)
    events.append(['init_start', t])
    seg(1, 'warmup', 'init', 4.0)
    events.append(['init_end', t])
    events.append(['data_start', t])
    seg(1, 'io', 'first_batch', 1.0)
    events.append(['data_end', t])
    for step in range(21, 31):
        events.append(['step', step, t])
        seg(1, 'gpu', 'train_step', STEP)
    events.append(['job_end', t])
    return events, segments, starts


def attr(key, value):
    return {'key': key, 'value': {'stringValue': str(value)}}


def otlp_json(inc, begin, seconds, gauges):
    """One export of rank 0's incarnation ``inc``: the activity counter as cumulative
    totals at its last point, and the progress marks."""
    end = begin + sum(seconds.values())
    start_ns, end_ns = str(int(begin * 1e9)), str(int(end * 1e9))
    points = [
        {
            'attributes': [attr('state', state), attr('operation', op)],
            'startTimeUnixNano': start_ns,
            'timeUnixNano': end_ns,
            'asDouble': value,
        }
        for (state, op), value in seconds.items()
    ]
    metrics = [
        {
            'name': 'worker_activity_time_seconds_total',
            'unit': 's',
            'sum': {'aggregationTemporality': 2, 'isMonotonic': True, 'dataPoints': points},
        }
    ]
    for name, value in gauges.items():
        metrics.append(
            {
                'name': name,
                'gauge': {
                    'dataPoints': [
                        {'startTimeUnixNano': start_ns, 'timeUnixNano': end_ns, 'asDouble': value}
                    ]
                },
            }
        )
    resource = [
        attr('service.name', 'trainer'),
        attr('service.instance.id', f'rank0-inc{inc}'),
        attr('rank', 0),
        attr('job.id', JOB),
        attr('job.incarnation', inc),
    ]
    return {
        'resourceMetrics': [
            {'resource': {'attributes': resource}, 'scopeMetrics': [{'metrics': metrics}]}
        ]
    }


def post(collector, body):
    req = urllib.request.Request(
        collector.otlp_endpoint('http/protobuf') + '/v1/metrics',
        data=json.dumps(body).encode(),
        headers={'content-type': 'application/json'},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200, resp.status


def reference_python() -> Path:
    path = Path(
        os.environ.get('HIGGSMETER_GOODPUT_PYTHON', repo_root() / '.venv/goodput/bin/python')
    )
    assert path.exists(), (
        f'no {path}: run `bash .ci/setup` (it installs ml-goodput-measurement in .venv/goodput), '
        'or set HIGGSMETER_GOODPUT_PYTHON'
    )
    return path


def test_the_job_view_agrees_with_ml_goodput_measurement():
    events, segments, starts = history()
    out = subprocess.run(
        [str(reference_python()), str(Path(__file__).with_name('goodput_reference.py'))],
        input=json.dumps(events),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    ref = json.loads(out.stdout.strip().splitlines()[-1])

    totals = {}
    for inc, segs in segments.items():
        acc: dict[tuple[str, str], float] = defaultdict(float)
        for state, op, seconds in segs:
            acc[(state, op)] += seconds
        totals[inc] = dict(acc)
    with collector_running() as collector:
        # Incarnation 0's last export, at the crash: step 27 done, checkpoint of step 20
        # saved at 40 s of gpu.
        post(
            collector,
            otlp_json(
                0,
                starts[0],
                totals[0],
                {
                    'higgsmeter_job_step': 27,
                    'higgsmeter_job_checkpoint_step': 20,
                    'higgsmeter_job_checkpoint_productive_seconds': 20 * STEP,
                },
            ),
        )
        post(
            collector,
            otlp_json(
                1,
                starts[1],
                totals[1],
                {'higgsmeter_job_step': 30, 'higgsmeter_job_restored_step': 20},
            ),
        )

        def ours_now():
            jobs = json.loads(http_get(f'http://{collector.prometheus}/api/jobs'))
            return next((j for j in jobs['jobs'] if j['job_id'] == JOB), None), jobs

        ours, jobs = wait_for(
            ours_now, lambda now: now[0] and len(now[0]['ranks'][0]['incarnations']) == 2
        )
        assert ours and len(ours['ranks'][0]['incarnations']) == 2, jobs
    bad = ours['badput_seconds']
    refbad = ref['badput']

    def same(what, got, want):
        assert abs(got - want) <= EXACT * max(1.0, abs(want)), (
            f'{what}: ours {got}, reference {want}'
        )

    # Where the definitions agree: equal.
    same('job time', ours['time_seconds'], ref['total'])
    same('productive time', ours['goodput_seconds'], ref['productive'])
    same('initialisation', bad['initialization'], refbad['TPU_INITIALIZATION'])
    same('data loading', bad['data_loading'], refbad['DATA_LOADING_SYNC'])
    same('custom badput', bad['custom'], refbad['CUSTOM_BADPUT_EVENTS'])
    assert ours['disruptions'] == ref['disruptions'] == 1
    # Where they differ, exactly as ADR 0021 says.
    in_flight = 1.0
    same(
        'wasted progress',
        bad['wasted_progress'],
        refbad['WASTED_PROGRESS_FROM_DISRUPTION'] + in_flight,
    )
    same('recovery', bad['recovery'], refbad['INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION'] - in_flight)
    same(
        'start-up and restore (the reference: other)',
        bad['startup'] + bad['checkpoint_restore'],
        refbad['OTHER'] + refbad['PROGRAM_STARTUP'],
    )
    # Every second accounted once, in both.
    same('ours: parts', ours['goodput_seconds'] + sum(bad.values()), ours['time_seconds'])
    same('reference: parts', ref['productive'] + sum(refbad.values()), ref['total'])
