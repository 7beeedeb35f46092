"""Goodput marks (``higgsmeter.job``) through the Python API: the marks in
``prometheus_client``'s registry and the Rust ``/metrics`` once set, the checkpoint's
productive seconds equal to the ``gpu`` seconds at the save, the checkpoint and badput
scopes under their operations, no mark for a save that raised, bad arguments refused at
the call, and the job's identity (``job.id``, ``job.incarnation``) from the environment
in the resource (``target_info`` of the Rust endpoint, in a fresh interpreter).

Durations are never asserted: sleeps only make the order of events certain.
"""

import time

import pytest
from higgsmeter import AppState
from higgsmeter import ConfigError
from higgsmeter import StateTracker
from higgsmeter import enable_tracker
from higgsmeter import job
from higgsmeter import state_tracker
from prometheus_client import REGISTRY
from prometheus_client import generate_latest
from support import client_sample_values as scraped
from support import current
from support import totals

STEP = 'higgsmeter_job_step'
CHECKPOINT_STEP = 'higgsmeter_job_checkpoint_step'
PRODUCTIVE = 'higgsmeter_job_checkpoint_productive_seconds'
RESTORED = 'higgsmeter_job_restored_step'
ROUNDING = 1e-6  # float rounding of nanosecond totals


@pytest.fixture(autouse=True)
def tracking():
    enable_tracker(rank=0)
    state_tracker.set_state(AppState.IDLE, 'job_test')
    yield
    state_tracker.set_state(AppState.IDLE, 'job_test')


def gpu_seconds():
    return sum(s for state, _op, s in state_tracker.snapshot()[0] if state == 'gpu')


def test_the_catalog_s_constants():
    assert job.CHECKPOINT_SAVE_OPERATION == 'checkpoint_save'
    assert job.CHECKPOINT_RESTORE_OPERATION == 'checkpoint_restore'
    assert job.CUSTOM_BADPUT_PREFIX == 'badput.'
    assert job.BADPUT_CAUSES[0] == 'startup'
    assert 'wasted_progress' in job.BADPUT_CAUSES
    assert 'custom' in job.BADPUT_CAUSES


def test_a_training_loop_s_marks_reach_the_registry():
    with job.checkpoint_restore(400):
        assert current() == (AppState.IO, 'checkpoint_restore')
        assert job.marks().get(RESTORED) != 400, 'recorded when the restore finishes'
        time.sleep(0.002)
    assert current() == (AppState.IDLE, 'job_test')
    for step in range(401, 404):
        with state_tracker.scope(AppState.GPU, 'train_step'):
            time.sleep(0.002)
        job.record_step(step)
    with job.checkpoint_save(403):
        assert current() == (AppState.IO, 'checkpoint_save')
        time.sleep(0.002)
    gpu_after_save = gpu_seconds()  # idle since the save ended: no gpu time added
    job.record_step(404)

    marks = job.marks()
    assert marks[STEP] == 404
    assert marks[CHECKPOINT_STEP] == 403
    assert marks[RESTORED] == 400
    assert isinstance(marks[STEP], int)
    assert abs(marks[PRODUCTIVE] - gpu_after_save) < ROUNDING
    assert marks[PRODUCTIVE] > 0

    values = scraped(generate_latest(REGISTRY).decode())
    assert values[(STEP, ())] == 404
    assert values[(CHECKPOINT_STEP, ())] == 403
    assert values[(RESTORED, ())] == 400
    assert values[(PRODUCTIVE, (('step', '403'),))] == marks[PRODUCTIVE]

    entries = totals(state_tracker.snapshot()[0])
    assert entries[('io', 'checkpoint_save')] > 0
    assert entries[('io', 'checkpoint_restore')] > 0


def test_productive_seconds_are_the_gpu_seconds_when_the_save_ends():
    with state_tracker.scope(AppState.GPU, 'train_step'):
        time.sleep(0.002)
        before_save = gpu_seconds()
        # A save inside a gpu scope: the save is io, and the gpu seconds are read when
        # it ends, between the two snapshots.
        with job.checkpoint_save(10):
            time.sleep(0.002)
        after_save = gpu_seconds()
        productive = job.marks()[PRODUCTIVE]
        assert before_save - ROUNDING <= productive <= after_save + ROUNDING
        time.sleep(0.002)
    assert job.marks()[PRODUCTIVE] == productive, 'later gpu time leaves the mark alone'
    assert gpu_seconds() > productive


def test_a_save_or_restore_that_raises_records_nothing():
    with job.checkpoint_save(20):
        pass
    with job.checkpoint_restore(19):
        pass
    before = job.marks()
    with pytest.raises(OSError), job.checkpoint_save(30):
        raise OSError('disk full')
    with pytest.raises(ValueError), job.checkpoint_restore(29):
        raise ValueError('corrupt checkpoint')
    assert current() == (AppState.IDLE, 'job_test')
    after = job.marks()
    assert after[CHECKPOINT_STEP] == before[CHECKPOINT_STEP] == 20
    assert after[PRODUCTIVE] == before[PRODUCTIVE]
    assert after[RESTORED] == before[RESTORED] == 19


def test_badput_scopes_are_badput_operations_in_their_state():
    with job.badput('evaluation'):
        assert current() == (AppState.CPU, 'badput.evaluation')
    with job.badput('evaluation', AppState.GPU):
        assert current() == (AppState.GPU, 'badput.evaluation')
    with job.badput('badput.profiling', state=AppState.IDLE):
        assert current() == (AppState.IDLE, 'badput.profiling')
    assert current() == (AppState.IDLE, 'job_test')
    entries = totals(state_tracker.snapshot()[0])
    for key in (('cpu', 'badput.evaluation'), ('gpu', 'badput.evaluation')):
        assert key in entries
    assert ('idle', 'badput.badput.profiling') not in entries


def test_bad_arguments_are_refused_at_the_call():
    for bad in (1.5, '3', None, True):
        with pytest.raises(TypeError, match='step must be an int'):
            job.record_step(bad)
        with pytest.raises(TypeError, match='step must be an int'):
            job.checkpoint_save(bad)
    for bad in (-1, 2**64):
        with pytest.raises(ValueError, match='whole number >= 0'):
            job.record_step(bad)
        with pytest.raises(ValueError, match='whole number >= 0'):
            job.checkpoint_restore(bad)
    with pytest.raises(TypeError, match='cause must be a str'):
        job.badput(3)
    with pytest.raises(TypeError, match='AppState'):
        job.badput('evaluation', 'gpu')


def test_a_tracker_of_its_own_has_marks_of_its_own():
    own = StateTracker(enabled=True)
    assert own.job_marks() == {}
    own.record_step(7)
    with own.checkpoint_save(7):
        pass
    assert own.job_marks() == {STEP: 7, CHECKPOINT_STEP: 7, PRODUCTIVE: 0.0}
    assert job.marks().get(STEP) != 7


def test_nothing_is_exported_before_a_mark_is_set(run_python):
    out = run_python(
        """
        from prometheus_client import generate_latest
        from higgsmeter import enable_tracker, job
        enable_tracker()
        before = generate_latest().decode()
        job.record_step(5)
        after = generate_latest().decode()
        print('higgsmeter_job' in before, 'higgsmeter_job_step 5.0' in after,
              'higgsmeter_job_checkpoint' in after, job.marks())
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().split(maxsplit=3) == [
        'False',
        'True',
        'False',
        "{'higgsmeter_job_step': 5}",
    ]


RESOURCE_WORKER = """
    import urllib.request
    from higgsmeter import enable_tracker, job, state_tracker
    enable_tracker()
    job.record_step(12)
    with job.checkpoint_restore(10):
        pass
    addr = state_tracker.pipeline['prometheus_addr']
    print(urllib.request.urlopen(f'http://{addr}/metrics', timeout=10).read().decode())
"""


def resource_of(run_python, env):
    """The `target_info` labels (the resource) and the job gauges of a fresh worker's
    Rust endpoint, run with `env`."""
    out = run_python(RESOURCE_WORKER, env={'HIGGSMETER_PROMETHEUS_ADDR': '127.0.0.1:0', **env})
    assert out.returncode == 0, out.stderr
    values = scraped(out.stdout)
    info = [dict(labels) for (name, labels) in values if name == 'target_info']
    assert len(info) == 1, out.stdout
    gauges = {name: v for (name, _labels), v in values.items() if name.startswith('higgsmeter_job')}
    return info[0], gauges


def job_labels(info):
    return info.get('job_id'), info.get('job_incarnation')


def test_the_job_identity_comes_from_the_environment(run_python):
    torch = {'TORCHELASTIC_RUN_ID': 'run-7f3a', 'TORCHELASTIC_RESTART_COUNT': '2'}
    ours = {'HIGGSMETER_JOB_ID': 'llama-pretrain', 'HIGGSMETER_JOB_INCARNATION': '5'}

    info, gauges = resource_of(run_python, {})
    assert job_labels(info) == (None, None)
    assert gauges == {STEP: 12, RESTORED: 10}, 'the marks reach the Rust endpoint too'

    assert job_labels(resource_of(run_python, ours)[0]) == ('llama-pretrain', '5')
    assert job_labels(resource_of(run_python, torch)[0]) == ('run-7f3a', '2')
    assert job_labels(resource_of(run_python, {**ours, **torch})[0]) == ('run-7f3a', '2')
    otel = {'OTEL_RESOURCE_ATTRIBUTES': 'job.id=from-otel,job.incarnation=9'}
    info, _ = resource_of(run_python, {**ours, **torch, **otel})
    assert job_labels(info) == ('from-otel', '9')
    unnamed = {'TORCHELASTIC_RUN_ID': 'none', 'HIGGSMETER_JOB_ID': 'named'}
    assert job_labels(resource_of(run_python, unnamed)[0]) == ('named', None)


def test_a_bad_incarnation_is_a_config_error_naming_the_variable(run_python):
    for var in ('TORCHELASTIC_RESTART_COUNT', 'HIGGSMETER_JOB_INCARNATION'):
        out = run_python(
            """
            from higgsmeter import ConfigError, enable_tracker
            try:
                enable_tracker()
            except ConfigError as e:
                print('ConfigError', e)
            """,
            env={var: '-1'},
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f'ConfigError invalid {var}="-1"'), out.stdout
    assert issubclass(ConfigError, ValueError)
