"""The state contract (docs/state-contract.md) through the Python API: what the seed
got wrong.

Every test reads the process-wide tracker's exact snapshot: `(entries, current code,
elapsed seconds)`, the entries summing to the elapsed time. Timings are never asserted:
sleeps only make the order of events certain, and amounts are compared with `>=` or
with the tracker's own elapsed time.
"""

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from higgsmeter import AppState
from higgsmeter import enable_tracker
from higgsmeter import state_tracker
from higgsmeter import track_state
from prometheus_client import REGISTRY
from prometheus_client import generate_latest
from support import client_sample_values
from support import client_samples
from support import current
from support import totals

SUM_TOLERANCE = 1e-6  # float rounding of nanosecond totals


@pytest.fixture(autouse=True)
def tracking():
    enable_tracker(rank=0)
    state_tracker.set_state(AppState.IDLE, 'contract')
    yield
    state_tracker.set_state(AppState.IDLE, 'contract')


def assert_sums_to_wall_time():
    entries, _code, elapsed = state_tracker.snapshot()
    assert abs(sum(s for _, _, s in entries) - elapsed) < SUM_TOLERANCE


def scraped(name, **labels):
    """The value of one sample in prometheus_client's default registry, or None."""
    for sample in client_samples(generate_latest(REGISTRY).decode()):
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
            return sample.value
    return None


def test_a_scope_opens_at_enter_not_when_made():
    scope = state_tracker.scope(AppState.GPU, 'later')
    state_tracker.set_state(AppState.IO, 'meanwhile')
    with scope:
        assert current() == (AppState.GPU, 'later')
    # The seed restored what was current when scope() was called (IDLE/contract).
    assert current() == (AppState.IO, 'meanwhile')


def test_set_state_inside_a_scope_changes_that_scope_only():
    with state_tracker.scope(AppState.CPU, 'outer'):
        state_tracker.set_state(AppState.GPU, 'kernel')
        assert current() == (AppState.GPU, 'kernel')
    assert current() == (AppState.IDLE, 'contract')


def test_an_exception_closes_the_scope():
    with pytest.raises(ZeroDivisionError), state_tracker.scope(AppState.GPU, 'boom'):
        _ = 1 / 0
    assert current() == (AppState.IDLE, 'contract')


class Model:
    """A class whose methods are decorated (module level, so pickle finds them)."""

    def __init__(self, scale):
        self.scale = scale

    @track_state(AppState.GPU, 'forward')
    def forward(self, x, *, bias=0):
        """Scales x."""
        return self.scale * x + bias, current()


@track_state(AppState.CPU)
def countdown(n):
    """Recursion: each call nests its own scope in the same state."""
    if n == 0:
        return [current()]
    return [current(), *countdown(n - 1)]


@track_state(AppState.IO, 'fails')
def fails(error):
    raise error


def test_a_decorated_function_is_a_function_in_its_state_for_its_call():
    import inspect
    import pickle

    # In the state for the call, with its arguments (keywords included) and its
    # result; bound as a method like any function.
    model = Model(3)
    assert model.forward(2, bias=1) == (7, (AppState.GPU, 'forward'))
    assert current() == (AppState.IDLE, 'contract')
    assert countdown(2) == [(AppState.CPU, 'countdown')] * 3
    assert current() == (AppState.IDLE, 'contract')

    # Still a plain Python function: named, documented, introspectable, pickled by
    # reference.
    assert inspect.isfunction(Model.forward) and inspect.isfunction(countdown)
    assert Model.forward.__name__ == 'forward' and Model.forward.__doc__ == 'Scales x.'
    assert str(inspect.signature(Model.forward)) == '(self, x, *, bias=0)'
    assert pickle.loads(pickle.dumps(countdown)) is countdown

    # An exception leaves unchanged (the same object, its frame in the traceback), the
    # state closed, and the time counted.
    before = totals(state_tracker.snapshot()[0]).get(('io', 'fails'), 0.0)
    error = KeyError('x')
    with pytest.raises(KeyError) as raised:
        fails(error)
    assert raised.value is error
    assert raised.traceback[-1].name == 'fails'
    assert current() == (AppState.IDLE, 'contract')
    assert totals(state_tracker.snapshot()[0])[('io', 'fails')] > before
    assert_sums_to_wall_time()


def test_a_scope_object_can_be_entered_again_and_nested():
    scope = state_tracker.scope(AppState.IO, 'again')
    with scope:
        with scope:
            assert current() == (AppState.IO, 'again')
        assert current() == (AppState.IO, 'again')
    with scope:
        assert current() == (AppState.IO, 'again')
    assert current() == (AppState.IDLE, 'contract')


def test_thread_pool_scopes_never_restore_a_stale_state():
    """Scopes on 8 pool threads overlap and close out of order; when all are closed the
    tracker is back in the base state, and no time was counted twice."""
    start = totals(state_tracker.snapshot()[0])
    barrier = threading.Barrier(8)

    def work(i):
        barrier.wait()
        for j in range(200):
            with state_tracker.scope(AppState.GPU if i % 2 else AppState.IO, f'task{i % 4}'):
                if j % 50 == 0:
                    time.sleep(0.001)
        return i

    with ThreadPoolExecutor(max_workers=8) as pool:
        assert sorted(pool.map(work, range(8))) == list(range(8))
    assert current() == (AppState.IDLE, 'contract')
    assert_sums_to_wall_time()
    end = totals(state_tracker.snapshot()[0])
    for key, seconds in end.items():
        assert seconds >= start.get(key, 0.0)  # counters never go back


def test_eight_threads_hammering_set_state():
    states = [AppState.IDLE, AppState.IO, AppState.CPU, AppState.GPU]
    barrier = threading.Barrier(8)
    errors = []

    def hammer(i):
        try:
            barrier.wait()
            for j in range(2000):
                state_tracker.set_state(states[(i + j) % 4], f'hammer{i}')
        except Exception as e:
            errors.append(e)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    state, op = current()
    assert state in states and op.startswith('hammer')
    assert_sums_to_wall_time()
    entries = state_tracker.snapshot()[0]
    assert {op for _, op, _ in entries} >= {f'hammer{i}' for i in range(8)}


def test_overlapping_asyncio_tasks():
    """Task A opens GPU, task B opens IO, A closes first: the tracker stays in IO (the
    seed went back to what was current before A, while B was still running)."""
    seen = {}

    async def main():
        a_entered, b_entered, a_done = asyncio.Event(), asyncio.Event(), asyncio.Event()

        async def task_a():
            with state_tracker.scope(AppState.GPU, 'a'):
                a_entered.set()
                await b_entered.wait()
            a_done.set()

        async def task_b():
            await a_entered.wait()
            with state_tracker.scope(AppState.IO, 'b'):
                b_entered.set()
                await a_done.wait()
                seen['after_a'] = current()
            seen['after_b'] = current()

        await asyncio.gather(task_a(), task_b())

    before = totals(state_tracker.snapshot()[0])
    asyncio.run(main())
    assert seen['after_a'] == (AppState.IO, 'b')
    assert seen['after_b'] == (AppState.IDLE, 'contract')
    assert_sums_to_wall_time()
    after = totals(state_tracker.snapshot()[0])
    assert after[('gpu', 'a')] > before.get(('gpu', 'a'), 0.0)
    assert after[('io', 'b')] > before.get(('io', 'b'), 0.0)


def test_async_function_is_in_its_state_while_it_awaits():
    @track_state(AppState.IO)
    async def fetch():
        await asyncio.sleep(0.02)
        return current()

    assert asyncio.run(fetch()) == (AppState.IO, fetch.__qualname__)
    assert current() == (AppState.IDLE, 'contract')


def test_decorated_generator_is_in_its_state_while_its_body_runs():
    inside = []

    @track_state(AppState.CPU, 'tokenize')
    def tokens(n):
        for i in range(n):
            inside.append(current())
            yield i
        return 'done'

    gen = tokens(3)
    assert current() == (AppState.IDLE, 'contract')  # making it runs no body
    seen_between = []
    for _ in gen:
        seen_between.append(current())
    assert inside == [(AppState.CPU, 'tokenize')] * 3
    assert seen_between == [(AppState.IDLE, 'contract')] * 3

    # send(), throw() and close() reach the body, in its state.
    @track_state(AppState.GPU, 'echo')
    def echo():
        received = yield 'ready'
        try:
            while True:
                received = yield (received, current())
        except ValueError:
            yield ('caught', current())
        finally:
            inside.append(('closed', current()))

    gen = echo()
    assert next(gen) == 'ready'
    assert gen.send(5) == (5, (AppState.GPU, 'echo'))
    assert gen.throw(ValueError('x')) == ('caught', (AppState.GPU, 'echo'))
    gen.close()
    assert inside[-1] == ('closed', (AppState.GPU, 'echo'))
    assert current() == (AppState.IDLE, 'contract')

    # The generator's return value reaches `yield from`.
    def outer():
        result = yield from tokens(1)
        return result

    with pytest.raises(StopIteration) as stop:
        g = outer()
        next(g)
        next(g)
    assert stop.value.value == 'done'


def test_decorated_async_generator_is_in_its_state_while_its_body_runs():
    inside, between = [], []

    @track_state(AppState.IO, 'stream')
    async def stream(n):
        for i in range(n):
            await asyncio.sleep(0)
            inside.append(current())
            yield i

    async def consume():
        async for _ in stream(3):
            between.append(current())

    asyncio.run(consume())
    assert inside == [(AppState.IO, 'stream')] * 3
    assert between == [(AppState.IDLE, 'contract')] * 3
    assert current() == (AppState.IDLE, 'contract')


def test_a_scrape_mid_scope_shows_the_time_so_far():
    with state_tracker.scope(AppState.GPU, 'long_kernel'):
        time.sleep(0.05)
        first = scraped('worker_activity_time_seconds_total', state='gpu', operation='long_kernel')
        time.sleep(0.05)
        second = scraped('worker_activity_time_seconds_total', state='gpu', operation='long_kernel')
        assert scraped('worker_current_state') == 3
        inside = totals(state_tracker.snapshot()[0])[('gpu', 'long_kernel')]
    assert first is not None and first >= 0.05
    assert second > first
    assert inside >= second
    assert scraped('worker_current_state') == 0


def test_finalize_twice_never_double_counts():
    state_tracker.set_state(AppState.SHUTDOWN, 'final')
    time.sleep(0.01)
    state_tracker.finalize()
    state_tracker.finalize()
    assert_sums_to_wall_time()
    entries, _, elapsed = state_tracker.snapshot()
    assert sum(s for _, _, s in entries) <= elapsed + SUM_TOLERANCE


def test_enable_again_keeps_the_open_interval():
    state_tracker.set_state(AppState.WARMUP, 'load_weights')
    time.sleep(0.03)
    enable_tracker(rank=0)  # the seed made a new tracker here and lost the 30 ms
    time.sleep(0.03)
    state_tracker.finalize()
    warm = totals(state_tracker.snapshot()[0])[('warmup', 'load_weights')]
    assert warm >= 0.06
    assert current() == (AppState.WARMUP, 'load_weights')


def test_prometheus_exposition_matches_the_seed():
    text = generate_latest(REGISTRY).decode()
    assert (
        '# HELP worker_activity_time_seconds_total Total seconds spent in each state and operation'
        in text
    )
    assert '# TYPE worker_activity_time_seconds_total counter' in text
    assert (
        '# HELP worker_current_state Current state indicator: 0=Idle, 1=IO, 2=CPU, 3=GPU, '
        '4=Warmup, 5=Startup, 6=Shutdown'
    ) in text
    assert '# TYPE worker_current_state gauge' in text


def test_nothing_is_claimed_before_enable_or_on_a_rank_that_does_not_track(run_python):
    out = run_python(
        """
        from prometheus_client import generate_latest
        from higgsmeter import AppState, enable_tracker, state_tracker
        before = generate_latest().decode()
        state_tracker.set_state(AppState.GPU, 'ignored')   # off: a no-op, as in the seed
        enable_tracker(rank=1)                              # no OTLP endpoint: rank 1 does not track
        rank1 = generate_latest().decode()
        enable_tracker(rank=0)
        rank0 = generate_latest().decode()
        print('worker_current_state' in before, 'worker_current_state' in rank1,
              'worker_current_state 5.0' in rank0, 'ignored' in rank0)
        """
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ['False', 'False', 'True', 'False']


def test_the_rust_prometheus_endpoint(run_python):
    """HIGGSMETER_PROMETHEUS_ADDR serves /metrics from Rust, without prometheus_client."""
    out = run_python(
        """
        import time, urllib.request
        from higgsmeter import AppState, enable_tracker, state_tracker
        enable_tracker()
        addr = state_tracker.pipeline['prometheus_addr']
        with state_tracker.scope(AppState.GPU, 'served'):
            time.sleep(0.05)
            body = urllib.request.urlopen(f'http://{addr}/metrics', timeout=10).read().decode()
        print(body)
        """,
        env={'HIGGSMETER_PROMETHEUS_ADDR': '127.0.0.1:0'},
    )
    assert out.returncode == 0, out.stderr
    values = client_sample_values(out.stdout)
    gpu = [
        v
        for (name, labels), v in values.items()
        if name == 'worker_activity_time_seconds_total'
        and ('state', 'gpu') in labels
        and ('operation', 'served') in labels
    ]
    assert gpu and gpu[0] >= 0.05
    assert [v for (name, _), v in values.items() if name == 'worker_current_state'] == [3]


@pytest.mark.parametrize(
    ('env', 'service'),
    [
        ({}, 'snippet'),  # the script's name (run_python writes snippet.py)
        ({'OTEL_SERVICE_NAME': 'named'}, 'named'),
        ({'OTEL_RESOURCE_ATTRIBUTES': 'service.name=attributed,team=ml'}, 'attributed'),
    ],
)
def test_the_service_is_the_scripts_unless_the_environment_names_one(run_python, env, service):
    out = run_python(
        """
        import urllib.request
        from higgsmeter import enable_tracker, state_tracker
        enable_tracker()
        addr = state_tracker.pipeline['prometheus_addr']
        print(urllib.request.urlopen(f'http://{addr}/metrics', timeout=10).read().decode())
        """,
        env={'HIGGSMETER_PROMETHEUS_ADDR': '127.0.0.1:0', **env},
    )
    assert out.returncode == 0, out.stderr
    (info,) = [s for s in client_samples(out.stdout) if s.name == 'target_info']
    assert info.labels['service_name'] == service, info.labels


def test_counting_starts_at_enable_tracker_and_ends_at_finalize():
    """The seed's clock origin and end, in a fresh interpreter: import, sleep, enable,
    work, finalize, sleep, read. Nothing before enable_tracker or after finalize is
    claimed in any state: the activity seconds sum to the interval between the two
    calls, bounded from outside by clock reads just before and just after each (so no
    tolerance is needed), and a read half a second after finalize shows the very same
    totals."""
    import subprocess
    import sys

    program = (
        'import time, json\n'
        't0 = time.monotonic()\n'
        'import higgsmeter\n'
        'from higgsmeter import AppState, enable_tracker, state_tracker\n'
        'time.sleep(0.5)\n'
        'a0 = time.monotonic()\n'
        'enable_tracker(0)\n'
        'a1 = time.monotonic()\n'
        'with state_tracker.scope(AppState.GPU, "work"):\n'
        '    time.sleep(0.15)\n'
        'state_tracker.set_state(AppState.SHUTDOWN)\n'
        'b0 = time.monotonic()\n'
        'state_tracker.finalize()\n'
        'b1 = time.monotonic()\n'
        'at_finalize = state_tracker.snapshot()\n'
        'time.sleep(0.5)\n'
        'later = state_tracker.snapshot()\n'
        'print(json.dumps({"sum": sum(s for _, _, s in at_finalize[0]),\n'
        '                  "elapsed": at_finalize[2], "at_finalize": at_finalize[0],\n'
        '                  "later": later[0], "later_elapsed": later[2],\n'
        '                  "shortest": b0 - a1, "longest": b1 - a0}))\n'
    )
    env = {k: v for k, v in __import__('os').environ.items() if not k.startswith('OTEL_')}
    env['OTEL_SDK_DISABLED'] = 'true'
    out = subprocess.run(
        [sys.executable, '-c', program],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    r = __import__('json').loads(out.stdout.strip().splitlines()[-1])
    assert abs(r['sum'] - r['elapsed']) < SUM_TOLERANCE, r
    # Between enable_tracker and finalize: never the half second before, or after.
    assert r['shortest'] - SUM_TOLERANCE <= r['sum'] <= r['longest'] + SUM_TOLERANCE, r
    assert r['later'] == r['at_finalize'], r
    assert r['later_elapsed'] == r['elapsed'], r


def test_a_transition_after_finalize_resumes_the_clock():
    state_tracker.set_state(AppState.SHUTDOWN, 'final')
    state_tracker.finalize()
    frozen = totals(state_tracker.snapshot()[0])
    time.sleep(0.05)
    assert totals(state_tracker.snapshot()[0]) == frozen
    state_tracker.set_state(AppState.IO, 'after_finalize')
    time.sleep(0.02)
    entries, _, elapsed = state_tracker.snapshot()
    now = totals(entries)
    assert now[('shutdown', 'final')] == frozen[('shutdown', 'final')]
    assert now[('io', 'after_finalize')] >= 0.02
    assert abs(sum(now.values()) - elapsed) < SUM_TOLERANCE
