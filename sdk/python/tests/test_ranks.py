"""Several Python ranks through the real collector, with the fleet sums exact.

Each test starts ``higgsmeter-collector`` (the workspace's binary, as cargo built it) on
127.0.0.1 ports it picks itself, runs rank processes (``rank_worker.py``) with the
installed package pushing OTLP to it, and reads its two Prometheus views:

- ``/metrics`` (fleet): ``worker_activity_time_seconds_total{state,operation}`` summed
  over the ranks, equal to the sum of the totals each rank printed
  (``state_tracker.snapshot()`` after ``finalize()``);
- ``/metrics/sources`` (per source): one series set per rank, labelled ``rank`` (the
  resource attribute, an identity label of ``sum_over``) and ``instance``
  (``service.instance.id``), each equal to that rank's own totals;
- ``worker_current_state`` per source on both views, and ``worker_sources_in_state``.

Every key is compared within 1e-6 s, the final state's (``shutdown``) included:
``finalize()`` stops the clock, so the final export, which ``atexit`` makes after the
snapshot is printed, carries exactly the printed totals (the state contract's
"``finalize()`` ends the timeline"). Durations are never asserted.

Run: ``.venv/bin/python -m pytest sdk/python/tests/test_ranks.py -q`` (the package
installed in that interpreter; ``HIGGSMETER_COLLECTOR_BIN`` to use another collector).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pytest
from support import Sample
from support import clean_env
from support import collector_running
from support import settle
from support import totals

WORKER = Path(__file__).resolve().parent / 'rank_worker.py'
W = 'worker_activity_time_seconds_total'
CURRENT = 'worker_current_state'
IN_STATE = 'worker_sources_in_state'
SERVICE = 'higgsmeter-pytest-ranks'
RANKS = (0, 1, 2)
#: Rank 1 passes its rank to ``enable_tracker(rank=1)`` with no ``RANK`` in its
#: environment; the others set ``RANK`` and call ``enable_tracker()``.
RANK_BY_ARGUMENT = 1
#: The state every rank ends in, and its ``worker_current_state`` code.
FINAL = ('shutdown', '')
SHUTDOWN_CODE = 6
STATE_CODES = {'idle': 0, 'io': 1, 'cpu': 2, 'gpu': 3, 'warmup': 4, 'startup': 5, 'shutdown': 6}
EXACT = 1e-6
WORKER_TIMEOUT_S = 60.0
SETTLE_DEADLINE_S = 15.0


def worker_env(extra: dict[str, str]) -> dict[str, str]:
    """The test's environment without any OTel, rank or higgsmeter setting, plus
    ``extra``."""
    return clean_env({'RUST_LOG': 'warn', 'PYTHONUNBUFFERED': '1', **extra})


class Worker:
    """A ``rank_worker.py`` process, its stderr in a temporary file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], tmp: Path):
        self.name = name
        self.stderr_path = tmp / f'{name}.stderr'
        self._stderr = open(self.stderr_path, 'w+b')  # noqa: SIM115 - closed in finish()
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), *args],
            env=env,
            cwd=tmp,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.stdout = ''

    def finish(self, deadline: float) -> None:
        """Waits (until ``deadline``, monotonic) for the exit."""
        try:
            self.stdout, _ = self.process.communicate(timeout=max(0.1, deadline - time.monotonic()))
        finally:
            self.kill()

    def kill(self) -> None:
        """SIGKILL to this worker's own PID if it still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if not self._stderr.closed:
            self._stderr.close()

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(encoding='utf-8', errors='replace')
        except OSError:
            return '(unreadable)'

    def describe(self) -> str:
        return (
            f'{self.name} (pid {self.process.pid}, exit {self.process.returncode})\n'
            f'stdout:\n{self.stdout}\nstderr:\n{self.stderr()}'
        )

    def result(self) -> dict:
        assert self.process.returncode == 0, f'worker failed: {self.describe()}'
        lines = [line for line in self.stdout.splitlines() if line.strip()]
        assert lines, f'no output: {self.describe()}'
        try:
            return json.loads(lines[-1])
        except json.JSONDecodeError as e:
            raise AssertionError(f'last line is not JSON ({e}): {self.describe()}') from None


def run_workers(specs: list[tuple[str, list[str], dict[str, str]]]) -> list[tuple[Worker, dict]]:
    """Runs the workers concurrently, bounded, and returns each with its JSON result."""
    with tempfile.TemporaryDirectory(prefix='higgsmeter-pytest-ranks-') as tmp:
        workers = []
        try:
            for name, args, env in specs:
                workers.append(Worker(name, args, env, Path(tmp)))
            deadline = time.monotonic() + WORKER_TIMEOUT_S
            for w in workers:
                try:
                    w.finish(deadline)
                except subprocess.TimeoutExpired:
                    raise AssertionError(
                        f'{w.name} did not exit within {WORKER_TIMEOUT_S} s: {w.describe()}'
                    ) from None
            out = []
            for w in workers:
                result = w.result()
                result['_describe'] = w.describe()
                out.append((w, result))
            return out
        finally:
            for w in workers:
                w.kill()


def key(s: Sample) -> tuple[str, str]:
    return (s.label('state'), s.label('operation'))


def ranks_present(want: set[str]):
    def ready(fleet, sources):
        got = {s.label('rank') for s in sources if s.name == W}
        return got == want

    return ready


def check_exact(what: str, got: float, want: float) -> None:
    assert abs(got - want) <= EXACT, (
        f'{what}: collector has {got!r}, the worker(s) printed {want!r}'
    )


@pytest.mark.parametrize('protocol', ['http/protobuf', 'grpc'])
def test_ranks_fleet_sums_exact(protocol):
    with collector_running() as collector:
        endpoint = collector.otlp_endpoint(protocol)
        specs = []
        for rank in RANKS:
            extra = {
                'OTEL_EXPORTER_OTLP_ENDPOINT': endpoint,
                'OTEL_EXPORTER_OTLP_PROTOCOL': protocol,
                'OTEL_METRIC_EXPORT_INTERVAL': '200',
                'OTEL_SERVICE_NAME': SERVICE,
                'OTEL_RESOURCE_ATTRIBUTES': 'deployment.environment=pytest',
                'WORLD_SIZE': str(len(RANKS)),
            }
            args = ['ranks']
            if rank == RANK_BY_ARGUMENT:
                args += ['--rank-arg', str(rank)]
            else:
                extra['RANK'] = str(rank)
            specs.append((f'rank{rank}', args, worker_env(extra)))
        results = {r['rank']: r for _, r in run_workers(specs)}
        assert sorted(results) == list(RANKS)

        # What each rank says of itself.
        per_rank = {}
        for rank, r in results.items():
            info = r['_describe']
            assert r['enabled'] is True, f'rank {rank} does not track with an endpoint: {info}'
            assert r['pipeline'] and r['pipeline'].get('otlp') is True, (
                f'rank {rank}: no OTLP pipeline: {r["pipeline"]}: {info}'
            )
            assert r['current_code'] == SHUTDOWN_CODE, info
            t = totals(r['entries'])
            assert abs(sum(t.values()) - r['elapsed']) <= EXACT, (
                f'rank {rank}: entries sum to {sum(t.values())}, elapsed {r["elapsed"]}'
            )
            for op in ('inference', 'fetch_batch', f'tokenize_rank{rank}', 'postprocess'):
                assert any(k[1] == op for k in t), f'rank {rank} lacks {op}: {sorted(t)}'
            assert FINAL in t, f'rank {rank} does not end in {FINAL}: {sorted(t)}'
            per_rank[str(rank)] = t
        truth: dict[tuple[str, str], float] = defaultdict(float)
        for t in per_rank.values():
            for k, v in t.items():
                truth[k] += v

        want_ranks = {str(r) for r in RANKS}
        fleet, sources = settle(
            collector, ranks_present(want_ranks), (W, CURRENT), SETTLE_DEADLINE_S
        )

        # Per-source view: one series set per rank, identity labels kept.
        src_w = [s for s in sources if s.name == W]
        by_rank: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
        instances: dict[str, set[str]] = defaultdict(set)
        for s in src_w:
            assert s.label('job') == SERVICE, s
            assert s.label('rank') in want_ranks, s
            k = key(s)
            assert k not in by_rank[s.label('rank')], f'two series for rank {s.label("rank")} {k}'
            by_rank[s.label('rank')][k] = s.value
            instances[s.label('rank')].add(s.label('instance'))
        assert set(by_rank) == want_ranks, f'ranks in /metrics/sources: {sorted(by_rank)}'
        for rank, inst in instances.items():
            assert len(inst) == 1 and '' not in inst, f'rank {rank}: instances {inst}'
        assert len(set().union(*instances.values())) == len(RANKS), instances

        for rank, t in per_rank.items():
            got = by_rank[rank]
            for k in set(t) | set(got):
                what = f'/metrics/sources rank {rank} {W}{{state={k[0]!r},operation={k[1]!r}}}'
                check_exact(what, got.get(k, 0.0), t.get(k, 0.0))

        # Fleet view: summed over the ranks, no identity label left.
        fleet_w: dict[tuple[str, str], float] = {}
        for s in (s for s in fleet if s.name == W):
            assert 'rank' not in s.labels and 'instance' not in s.labels, (
                f'fleet series keeps an identity label: {s}'
            )
            assert s.label('job') == SERVICE, s
            k = key(s)
            assert k not in fleet_w, f'two fleet series for {k}: {s}'
            fleet_w[k] = s.value
        for k in set(truth) | set(fleet_w):
            what = f'/metrics {W}{{state={k[0]!r},operation={k[1]!r}}}'
            # The collector's sum of its per-source values, exactly.
            check_exact(
                what + ' vs the per-source view',
                fleet_w.get(k, 0.0),
                sum(by_rank[r].get(k, 0.0) for r in want_ranks),
            )
            # The workers' own totals, the final state's too: finalize() stopped the clock.
            check_exact(what, fleet_w.get(k, 0.0), truth.get(k, 0.0))
        # Operations of one rank only, and of every rank.
        assert fleet_w.get(('cpu', 'tokenize_rank1'), 0.0) > 0
        assert fleet_w.get(('gpu', 'inference_tail'), 0.0) > 0
        assert fleet_w.get(('io', 'save_checkpoint'), 0.0) > 0

        # worker_current_state stays per source, on both views.
        for view, samples in (('/metrics', fleet), ('/metrics/sources', sources)):
            cur = [s for s in samples if s.name == CURRENT]
            got = {s.label('rank'): s.value for s in cur}
            assert len(cur) == len(RANKS) and got == {
                r: float(SHUTDOWN_CODE) for r in want_ranks
            }, f'{view} {CURRENT}: {cur}'
            for s in cur:
                assert (
                    s.label('job') == SERVICE and s.label('instance') in instances[s.label('rank')]
                ), s
        # The resource: rank (argument or RANK), WORLD_SIZE, OTEL_RESOURCE_ATTRIBUTES.
        for view, samples in (('/metrics', fleet), ('/metrics/sources', sources)):
            info = {
                s.label('rank'): s
                for s in samples
                if s.name == 'target_info' and s.label('job') == SERVICE
            }
            assert set(info) == want_ranks, f'{view} target_info: {info}'
            for rank, s in info.items():
                assert s.label('instance') in instances[rank], s
                assert s.label('world_size') == str(len(RANKS)), s
                assert s.label('deployment_environment') == 'pytest', s
                assert s.label('telemetry_sdk_language') == 'python', s
        in_state = {s.label('state'): s.value for s in fleet if s.name == IN_STATE}
        assert in_state == {st: (3.0 if st == 'shutdown' else 0.0) for st in STATE_CODES}, in_state

        # The collector's own counters: the pushes came over this protocol, none refused.
        transport = 'grpc' if protocol == 'grpc' else 'http'
        other = 'http' if transport == 'grpc' else 'grpc'
        requests = {
            s.label('transport'): s.value
            for s in fleet
            if s.name == 'higgsmeter_collector_requests_total'
        }
        assert requests.get(transport, 0.0) >= len(RANKS), requests
        assert requests.get(other, 0.0) == 0.0, requests
        refused = [
            s
            for s in fleet
            if s.name
            in (
                'higgsmeter_collector_points_refused_total',
                'higgsmeter_collector_requests_refused_total',
            )
            and s.value != 0
        ]
        assert not refused, f'the collector refused data: {refused}'


def seed_worker(rank: int, endpoint: str | None) -> dict:
    extra = {'RANK': str(rank)}
    if endpoint is not None:
        extra.update(
            {
                'OTEL_EXPORTER_OTLP_ENDPOINT': endpoint,
                'OTEL_EXPORTER_OTLP_PROTOCOL': 'http/protobuf',
                'OTEL_METRIC_EXPORT_INTERVAL': '200',
                'OTEL_SERVICE_NAME': SERVICE,
            }
        )
    [(_, result)] = run_workers(
        [(f'seed-rank{rank}', ['seed', '--rank-arg', str(rank)], worker_env(extra))]
    )
    return result


@pytest.mark.parametrize('rank', [1, 0])
def test_seed_mode_without_endpoint(rank):
    """No OTLP endpoint: the seed's rank-0-only mode. Rank 1 tracks nothing and starts
    no pipeline; rank 0 tracks."""
    r = seed_worker(rank, None)
    t = totals(r['entries'])
    if rank == 0:
        assert r['enabled'] is True, r['_describe']
        assert t.get(('gpu', 'seed_probe'), 0.0) > 0, t
    else:
        assert r['enabled'] is False, f'rank 1 tracks without an endpoint: {r["_describe"]}'
        assert r['pipeline'] is None, f'rank 1 started a pipeline: {r["pipeline"]}'
        assert ('gpu', 'seed_probe') not in t or t[('gpu', 'seed_probe')] == 0.0, (
            f'rank 1 counted its scope: {t}'
        )


def test_seed_mode_rank1_with_endpoint_tracks():
    """With an endpoint, rank 1 tracks too, and its time reaches the collector."""
    with collector_running() as collector:
        r = seed_worker(1, collector.otlp_endpoint('http/protobuf'))
        assert r['enabled'] is True, r['_describe']
        assert r['pipeline'] and r['pipeline'].get('otlp') is True, r['pipeline']
        t = totals(r['entries'])
        probe = t.get(('gpu', 'seed_probe'), 0.0)
        assert probe > 0, t
        _, sources = settle(collector, ranks_present({'1'}), (W, CURRENT), SETTLE_DEADLINE_S)
        got = [s for s in sources if s.name == W and key(s) == ('gpu', 'seed_probe')]
        assert [s.label('rank') for s in got] == ['1'], got
        check_exact('/metrics/sources rank 1 gpu/seed_probe', got[0].value, probe)
