"""higgsmeter.lab against the lab agent's own aggregator (the seed's apply_sample, as
transcribed in sdk/session/tests/fixtures/aggregator.py): the same fields and
defaults, and after every sample of a few hundred random streams, the same counters,
field by field, value, type and repr (or the same exception)."""

import dataclasses
import importlib.util
import json
import math
import random
import re
from datetime import datetime
from datetime import timedelta
from datetime import timezone
from decimal import Decimal
from fractions import Fraction

import pytest
from higgsmeter import lab
from support import repo_root

SESSION_TESTS = repo_root() / 'sdk' / 'session' / 'tests'


def _fixture(name):
    # The fixtures may move within sdk/session/tests; take the one there is.
    found = sorted(SESSION_TESTS.rglob(name))
    assert found, f'{name} under {SESSION_TESTS}'
    return found[0]


def _load_seed():
    spec = importlib.util.spec_from_file_location('seed_aggregator', _fixture('aggregator.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


seed = _load_seed()
FIELDS = [f.name for f in dataclasses.fields(seed.SessionCounters)]


def _time(text):
    # ISO 8601 as CPython 3.11's fromisoformat reads it (the seed's main ran there): a
    # trailing Z and a fraction of any length, which 3.10's does not take.
    return datetime.fromisoformat(_iso_310(text))


def _iso_310(text):
    text = text[:-1] + '+00:00' if text.endswith('Z') else text
    return re.sub(r'\.(\d+)', lambda m: '.' + (m.group(1) + '000000')[:6], text, count=1)


def _state(c):
    return [(name, type(getattr(c, name)), repr(getattr(c, name))) for name in FIELDS]


def _apply(module, c, s):
    try:
        module.apply_sample(c, s)
    except Exception as e:  # the seed's own exceptions are part of its behaviour
        return type(e), str(e)
    return None


@pytest.mark.parametrize('cls', ['Sample', 'SessionCounters'])
def test_dataclasses_have_the_seeds_fields_types_and_defaults(cls):
    def describe(c):
        return [(f.name, f.type, f.default, f.default_factory) for f in dataclasses.fields(c)]

    assert describe(getattr(lab, cls)) == describe(getattr(seed, cls))


def test_constants_are_the_seeds():
    for name in ('GPU_ACTIVE_UTIL_THRESHOLD', 'SUBJECT_FIELD', 'WINDOW_BUCKETS'):
        ours, theirs = getattr(lab, name), getattr(seed, name)
        assert (type(ours), ours) == (type(theirs), theirs), name
        assert name in lab.__all__


def test_new_counters_are_the_seeds():
    start = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)
    ours = lab.new_counters(start)
    assert type(ours) is lab.SessionCounters
    assert _state(ours) == _state(seed.new_counters(start))
    assert repr(ours).replace('higgsmeter.lab.', '') == repr(seed.new_counters(start))


def test_the_fixture_replay_matches_the_seeds_output():
    # The seed's main on samples.jsonl printed expected.json: ours prints the same.
    expected = json.loads(_fixture('expected.json').read_text())
    c = lab.new_counters(_time(expected['session_started_at']))
    for line in _fixture('samples.jsonl').read_text().splitlines():
        if line.strip():
            fields = json.loads(line)
            fields['ts'] = _time(fields['ts'])
            fields['processes_seen'] = set(fields['processes_seen'])
            lab.apply_sample(c, lab.Sample(**fields))
    out = dataclasses.asdict(c)
    out['session_started_at'] = c.session_started_at.isoformat()
    assert json.dumps(out) == json.dumps(expected)


def test_docstring_example():
    c = lab.new_counters(datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc))
    lab.apply_sample(
        c,
        lab.Sample(
            ts=datetime(2025, 3, 1, 9, 0, 2, tzinfo=timezone.utc),
            sample_interval_seconds=2,
            active_window_bucket='subject',
            gpu_util_pct=37.0,
            vram_mb=2048.0,
            processes_seen={'sleap-label'},
            max_labeled_frames=120,
            training_epochs_completed=None,
            training_final_loss=None,
        ),
    )
    assert (c.seconds_in_subject_software, c.seconds_to_first_sleap_label) == (2, 2)
    assert type(c.seconds_in_subject_software) is int
    assert c.gpu_util_peak == 37.0 and c.gpu_active_seconds == 2


# ---- random streams -----------------------------------------------------------------

START_ZONES = [
    timezone.utc,
    timezone(timedelta(hours=2)),
    timezone(timedelta(hours=-7, minutes=-30)),
    None,
]
try:  # one tzinfo on both sides: the seed subtracts wall times across a DST change
    from zoneinfo import ZoneInfo

    START_ZONES.append(ZoneInfo('Europe/Berlin'))
except Exception:  # no time-zone database here
    pass

PROCESSES = ['sleap-label', 'sleap-train', 'sleap-track', 'python', 'sleap', 'sleap-labelx']


def _pick(rng, common, rare, p_rare=0.015):
    return rng.choice(rare) if rng.random() < p_rare else common(rng)


def _number(rng, threshold=False):
    choices = [
        lambda r: r.uniform(0, 100),
        lambda r: r.randint(0, 100),
        lambda r: 0,
        lambda r: 0.0,
        lambda r: (
            r.choice([5, 5.0, 5.000000000000001, 4.999999999999999]) if threshold else r.random()
        ),
        lambda r: r.choice([-1, -0.0, 1e-300, 1e300, 2**52, 2**52 + 0.5, 4503599627370495.5]),
    ]
    return rng.choice(choices)(rng)


RARE_NUMBERS = [
    None,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
    2**53 + 1,
    2**70,
    -(2**64),
    Decimal('2.5'),
    Fraction(1, 3),
]


def _interval(rng):
    return rng.choice(
        [
            2,
            2.0,
            1,
            0.5,
            0,
            0.0,
            -0.0,
            rng.uniform(0, 5),
            rng.randint(0, 3600),
            0.1,
            1e-9,
            3600 * 24 * 365,
        ]
    )


def _ts(rng, start, prev):
    kind = rng.random()
    if kind < 0.6:
        ts = prev + timedelta(
            seconds=rng.choice([2, 2.0, 0.5, 1.999999, 0, 7]), microseconds=rng.randint(0, 999_999)
        )
    elif kind < 0.75:  # before the start (negative elapsed, truncated toward zero)
        ts = start - timedelta(seconds=rng.uniform(0, 100))
    elif kind < 0.85:  # long gaps: hours, days, a DST change, centuries
        ts = prev + timedelta(
            days=rng.choice([0.04, 1, 30, 200, 4000]), microseconds=rng.randint(0, 999_999)
        )
    elif kind < 0.9:  # beyond 2**53 microseconds: total_seconds() rounds
        ts = start + timedelta(
            seconds=rng.randint(10**10, 2 * 10**10),
            microseconds=rng.choice([999_999, 999_998, 500_000, 1]),
        )
    elif kind < 0.95:  # the same instant in another offset
        ts = (
            prev.astimezone(timezone(timedelta(hours=rng.randint(-12, 12))))
            if prev.tzinfo
            else prev
        )
    else:  # a naive timestamp against an aware start (or the reverse): the seed raises
        ts = prev.replace(tzinfo=None) if prev.tzinfo else prev.replace(tzinfo=timezone.utc)
    return ts


def _processes(rng):
    names = rng.sample(PROCESSES, rng.randint(0, 4))
    return rng.choice([set, list, frozenset, tuple])(names)


def _sample_fields(rng, start, prev):
    return dict(
        ts=_ts(rng, start, prev),
        sample_interval_seconds=_pick(rng, _interval, RARE_NUMBERS),
        active_window_bucket=_pick(
            rng,
            lambda r: r.choice(
                ['subject', 'terminal', 'browser', 'other', 'Subject', '', 'unknown', None]
            ),
            [3, b'subject', ('subject',)],
        ),
        gpu_util_pct=_pick(rng, lambda r: _number(r, threshold=True), RARE_NUMBERS),
        vram_mb=_pick(rng, _number, RARE_NUMBERS),
        processes_seen=_pick(rng, _processes, [None, 'sleap-label sleap-track', '', 42, {}]),
        max_labeled_frames=_pick(
            rng, lambda r: r.choice([None, None, r.randint(-5, 500), 0]), [2**70, 3.5, True, '7']
        ),
        training_epochs_completed=_pick(
            rng, lambda r: r.choice([None, None, r.randint(-2, 50)]), [2**63, 2.0, False]
        ),
        training_final_loss=_pick(
            rng,
            lambda r: r.choice([None, r.random(), 0, 0.0, r.randint(0, 9)]),
            [math.nan, 'x', Decimal(1)],
        ),
    )


def _counting(monkeypatch):
    calls = {'rust': 0, 'seed': 0}
    rust_apply = lab._session_apply

    def session_apply(*args):
        applied = rust_apply(*args)
        calls['rust' if applied else 'seed'] += 1
        return applied

    monkeypatch.setattr(lab, '_session_apply', session_apply)
    return calls


@pytest.mark.parametrize('chunk', range(4))
def test_random_streams_match_the_seed_after_every_sample(chunk, monkeypatch):
    calls = _counting(monkeypatch)
    samples = errors = 0
    for stream in range(chunk * 100, chunk * 100 + 100):
        rng = random.Random(stream)
        zone = rng.choice(START_ZONES)
        start = datetime(
            2025,
            rng.choice([1, 3, 7, 10]),
            rng.randint(1, 28),
            rng.randint(0, 23),
            rng.randint(0, 59),
            rng.randint(0, 59),
            rng.choice([0, rng.randint(0, 999_999)]),
            tzinfo=zone,
        )
        ours, theirs = lab.new_counters(start), seed.new_counters(start)
        prev = start
        for i in range(rng.randint(1, 40)):
            fields = _sample_fields(rng, start, prev)
            prev = fields['ts'] if isinstance(fields['ts'], datetime) else prev
            if (fields['ts'].tzinfo is None and start.tzinfo is not None) or (
                fields['ts'].tzinfo is not None and start.tzinfo is None
            ):
                prev = start  # do not let the mismatch run on
            raised = _apply(seed, theirs, seed.Sample(**fields))
            assert _apply(lab, ours, lab.Sample(**fields)) == raised, (stream, i, fields)
            assert _state(ours) == _state(theirs), (stream, i, fields)
            samples += 1
            errors += raised is not None
    # Both paths were exercised, and most samples took the Rust counters.
    assert calls['rust'] > samples * 0.5, (calls, samples)
    assert calls['seed'] > 0 and errors > 0, (calls, errors)


def test_missing_fields_fail_as_the_seeds():
    for cls in ('Sample', 'SessionCounters'):
        with pytest.raises(TypeError) as ours:
            getattr(lab, cls)()
        with pytest.raises(TypeError) as theirs:
            getattr(seed, cls)()
        assert str(ours.value) == str(theirs.value)


def test_plain_samples_take_the_rust_counters(monkeypatch):
    calls = _counting(monkeypatch)
    start = datetime(2025, 3, 1, 9, tzinfo=timezone.utc)
    c = lab.new_counters(start)
    for i in range(1, 6):
        lab.apply_sample(
            c,
            lab.Sample(
                start + timedelta(seconds=2 * i),
                2.0,
                'terminal',
                5.0 + i,
                100.0 * i,
                ['sleap-track'],
                None,
                i,
                0.5 / i,
            ),
        )
    assert calls == {'rust': 5, 'seed': 0}
    assert (c.sample_count, c.seconds_in_terminal, c.gpu_active_seconds) == (5, 10.0, 10.0)
    assert (c.gpu_util_peak, c.vram_used_peak_mb, c.seconds_to_first_sleap_track) == (
        10.0,
        500.0,
        2,
    )
    assert (c.training_epochs_completed, c.training_final_loss) == (5, 0.1)


def test_the_threshold_is_strict():
    c = lab.new_counters(datetime(2025, 3, 1))
    s = lab.Sample(datetime(2025, 3, 1, 0, 0, 2), 2, 'browser', 5, 0, set(), None, None, None)
    lab.apply_sample(c, s)
    assert c.gpu_active_seconds == 0 and c.gpu_util_peak == 5 and type(c.gpu_util_peak) is int
    lab.apply_sample(c, dataclasses.replace(s, gpu_util_pct=5.000000000000001))
    assert c.gpu_active_seconds == 2
