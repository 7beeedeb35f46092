"""A lab monitoring agent's session on ``higgsmeter.lab``: the agent's own loop (one
sample every few seconds, applied to the session's counters), with the aggregator
module swapped for higgsmeter's, unchanged otherwise.

    .venv/bin/python examples/python/lab_session.py --synthetic 120
    .venv/bin/python examples/python/lab_session.py --session-started-at 2025-03-01T09:00:00+00:00 --samples sdk/session/tests/fixtures/samples.jsonl

``--samples`` reads one JSON object per line with ``Sample``'s fields (``ts`` in ISO
8601, ``processes_seen`` a list), for a session that started at
``--session-started-at`` (by default its first sample's time); ``--synthetic N`` makes N
samples of a session (a
subject working in the labelling software, then training). Prints the counters at the
end as one JSON line (datetimes in ISO 8601). With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set,
the counters are also exported (``higgsmeter.lab.export``): the session families reach
the collector, the last export at exit carrying the final counters.
"""

import argparse
import dataclasses
import json
import random
import re
from datetime import datetime
from datetime import timedelta
from datetime import timezone

from higgsmeter.lab import SUBJECT_FIELD
from higgsmeter.lab import WINDOW_BUCKETS
from higgsmeter.lab import Sample
from higgsmeter.lab import apply_sample
from higgsmeter.lab import export
from higgsmeter.lab import new_counters

START = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)


def synthetic(n: int, seed: int = 3) -> list[Sample]:
    """N samples two seconds apart: labelling first, then training."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        training = i >= n // 2
        processes = {'sleap-train'} if training else {'sleap-label'}
        out.append(
            Sample(
                ts=START + timedelta(seconds=2 * (i + 1)),
                sample_interval_seconds=2,
                active_window_bucket=rng.choice((*WINDOW_BUCKETS, None)),
                gpu_util_pct=rng.uniform(40, 99) if training else rng.uniform(0, 8),
                vram_mb=rng.uniform(1000, 9000) if training else 512.0,
                processes_seen=processes,
                max_labeled_frames=None if training else 10 * i,
                training_epochs_completed=(i - n // 2) if training else None,
                training_final_loss=1.0 / (1 + i) if training else None,
            )
        )
    return out


def parse_time(text: str) -> datetime:
    """ISO 8601 as CPython 3.11's ``fromisoformat`` reads it, also on 3.10 (whose
    ``fromisoformat`` takes neither a trailing ``Z`` nor a fraction of other than 3 or 6
    digits)."""
    text = text[:-1] + '+00:00' if text.endswith('Z') else text
    text = re.sub(r'\.(\d+)', lambda m: '.' + (m.group(1) + '000000')[:6], text, count=1)
    return datetime.fromisoformat(text)


def read_samples(path: str) -> list[Sample]:
    samples = []
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                row['ts'] = parse_time(row['ts'])
                row['processes_seen'] = set(row.get('processes_seen', ()))
                samples.append(Sample(**row))
            except (ValueError, TypeError, KeyError) as e:
                raise SystemExit(f'{path}:{number}: not a sample: {e}') from None
    return samples


def plain(value):
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, set):
        return sorted(value)
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument('--samples', help='a JSON-lines file of samples')
    group.add_argument('--synthetic', type=int, help='this many made-up samples')
    parser.add_argument('--session-started-at', type=parse_time, default=None)
    args = parser.parse_args()
    samples = read_samples(args.samples) if args.samples else synthetic(args.synthetic)
    started = args.session_started_at
    if started is None:
        started = samples[0].ts if args.samples and samples else START
    counters = new_counters(started)
    export(counters)  # False, and nothing exported, without an OTLP endpoint
    for sample in samples:
        apply_sample(counters, sample)
    out = {k: plain(v) for k, v in dataclasses.asdict(counters).items()}
    out['subject_field'] = SUBJECT_FIELD
    print(json.dumps(out), flush=True)
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
