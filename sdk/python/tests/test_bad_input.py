"""Bad input: a TypeError at the call that says what was expected, and nothing changed."""

import pytest
from higgsmeter import AppState
from higgsmeter import enable_tracker
from higgsmeter import state_tracker
from higgsmeter import track_state
from support import current


@pytest.fixture(autouse=True)
def tracking():
    enable_tracker(rank=0)
    state_tracker.set_state(AppState.IDLE, 'bad_input')


@pytest.mark.parametrize('state', ['gpu', 3, None, 'GPU', object()])
def test_a_state_that_is_not_an_appstate(state):
    with pytest.raises(TypeError, match=r'state must be a higgsmeter\.AppState member'):
        state_tracker.set_state(state)
    with pytest.raises(TypeError, match=r'state must be a higgsmeter\.AppState member'):
        state_tracker.scope(state, 'x')
    with pytest.raises(TypeError, match=r'state must be a higgsmeter\.AppState member'):
        track_state(state)
    assert current() == (AppState.IDLE, 'bad_input')


@pytest.mark.parametrize('operation', [5, b'bytes', ['list'], 1.5])
def test_an_operation_that_is_not_a_str(operation):
    with pytest.raises(TypeError, match=r'operation must be a str'):
        state_tracker.set_state(AppState.GPU, operation)
    with pytest.raises(TypeError, match=r'operation must be a str'):
        state_tracker.scope(AppState.GPU, operation)
    with pytest.raises(TypeError, match=r'operation must be a str'):
        track_state(AppState.GPU, operation)
    assert current() == (AppState.IDLE, 'bad_input')


def test_the_message_names_what_was_given():
    with pytest.raises(TypeError) as err:
        state_tracker.set_state('gpu')
    assert "not str 'gpu'" in str(err.value)
    with pytest.raises(TypeError) as err:
        state_tracker.set_state(AppState.GPU, 7)
    assert 'not int' in str(err.value)


def test_a_rank_that_is_not_an_int():
    with pytest.raises(TypeError, match='rank must be an int'):
        enable_tracker(rank='0')
    assert state_tracker._tracker._enabled


def test_a_bad_setting_is_a_config_error(run_python):
    out = run_python(
        """
        from higgsmeter import ConfigError, enable_tracker, state_tracker
        try:
            enable_tracker()
        except ConfigError as e:
            print('ConfigError:', e)
        """,
        env={
            'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9',
            'OTEL_EXPORTER_OTLP_PROTOCOL': 'carrier-pigeon',
        },
    )
    assert out.returncode == 0, out.stderr
    assert 'ConfigError:' in out.stdout and 'carrier-pigeon' in out.stdout


def test_an_unreachable_collector_never_raises_or_blocks(run_python):
    """Nothing listens on the endpoint: every call returns, finalize waits at most its
    timeout, and the process exits (atexit's final export is bounded too)."""
    out = run_python(
        """
        from higgsmeter import AppState, enable_tracker, state_tracker
        enable_tracker()
        for _ in range(1000):
            with state_tracker.scope(AppState.GPU, 'x'):
                pass
        state_tracker.finalize(timeout=1.0)
        print('ok')
        """,
        env={
            'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9',
            'OTEL_EXPORTER_OTLP_TIMEOUT': '500',
            'OTEL_METRIC_EXPORT_INTERVAL': '100',
        },
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'ok'


def test_a_failed_export_says_where_and_why_at_once():
    """A worker pointed at a port where nothing listens: the first failed export logs,
    while the worker runs, the endpoint, the protocol, the cause and the likely fix
    (not only an `InternalFailure` at exit); and it logs once, not every interval."""
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]
    endpoint = f'http://127.0.0.1:{port}'
    env = {k: v for k, v in os.environ.items() if not k.startswith('OTEL_')}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL='grpc',
        OTEL_METRIC_EXPORT_INTERVAL='200',
    )
    program = (
        'import sys, time\n'
        'from higgsmeter import enable_tracker\n'
        'enable_tracker(0)\n'
        'time.sleep(1.5)\n'
        'print("RUNNING-DONE", file=sys.stderr, flush=True)\n'
    )
    out = subprocess.run(
        [sys.executable, '-c', program],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    while_running = out.stderr.split('RUNNING-DONE')[0]
    first = [line for line in while_running.splitlines() if 'metric export to' in line]
    assert len(first) == 1, out.stderr
    assert endpoint in first[0] and 'over grpc' in first[0], first[0]
    assert 'Nothing accepts connections' in first[0], first[0]
