"""``higgsmeter.lab.export``: the seed's counters, aggregated by ``apply_sample``,
exported through the OTLP pipeline to a real collector: after the process exits, the
collector's session families equal the counters the process printed (the Rust counters'
path and the seed's own fallback path alike), and the agent is no worker."""

from support import clean_env
from support import collector_running
from support import run_python
from support import wait_for

SNIPPET = """
import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from higgsmeter import lab

start = datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc)
c = lab.new_counters(start)
assert lab.export(c) is True
assert lab.export(c) is True  # again: nothing more registered
rows = [
    ('subject', 37.0, {'sleap-label'}, 120, None, None),
    ('browser', 2.0, set(), None, None, None),
    # A Decimal takes the seed's own code; the export reads the result all the same.
    ('terminal', Decimal('55.5'), {'sleap-train'}, None, 2, 0.5),
    (None, 91.0, {'sleap-train', 'sleap-label'}, None, 3, 0.25),
]
for i, (bucket, util, seen, frames, epochs, loss) in enumerate(rows):
    lab.apply_sample(c, lab.Sample(
        ts=start + timedelta(seconds=2 * (i + 1) + 0.5), sample_interval_seconds=2,
        active_window_bucket=bucket, gpu_util_pct=util, vram_mb=1024.0 * (i + 1),
        processes_seen=seen, max_labeled_frames=frames,
        training_epochs_completed=epochs, training_final_loss=loss))
print(json.dumps({k: (float(v) if v is not None and not isinstance(v, datetime) else None)
                  for k, v in vars(c).items() if k != 'session_started_at'}))
"""


def test_exported_counters_reach_the_collector_exactly(tmp_path):
    with collector_running() as collector:
        env = clean_env(
            {
                'OTEL_EXPORTER_OTLP_ENDPOINT': collector.otlp_endpoint('http/protobuf'),
                'OTEL_EXPORTER_OTLP_PROTOCOL': 'http/protobuf',
                'OTEL_SERVICE_NAME': 'lab-agent',
                'RUST_LOG': 'warn',
            }
        )
        out = run_python(tmp_path, SNIPPET, env)
        assert out.returncode == 0, out.stderr
        c = __import__('json').loads(out.stdout.strip().splitlines()[-1])
        assert c['sample_count'] == 4 and c['training_final_loss'] == 0.25, c

        # The last export happens at exit; read until the collector shows it (bounded).
        sources = wait_for(
            lambda: [
                s for s in collector.scrape('/metrics/sources') if s.label('job') == 'lab-agent'
            ],
            lambda now: (
                [s.value for s in now if s.name == 'session_samples_total'] == [c['sample_count']]
            ),
        )

        def value(name, **labels):
            found = [
                s.value
                for s in sources
                if s.name == name and all(s.label(k) == v for k, v in labels.items())
            ]
            assert len(found) == 1, (name, labels, found, [s.name for s in sources])
            return found[0]

        assert value('session_samples_total') == c['sample_count']
        for bucket, field in (
            ('subject', 'seconds_in_subject_software'),
            ('terminal', 'seconds_in_terminal'),
            ('browser', 'seconds_in_browser'),
            ('other', 'seconds_in_other'),
        ):
            assert value('session_window_time_total', session_window_bucket=bucket) == c[field]
        for process in ('label', 'train'):
            assert (
                value('session_process_time_to_first_seen', session_process_name=f'sleap-{process}')
                == c[f'seconds_to_first_sleap_{process}']
            )
        assert c['seconds_to_first_sleap_track'] is None
        assert not [
            s
            for s in sources
            if s.name == 'session_process_time_to_first_seen'
            and s.label('session_process_name') == 'sleap-track'
        ]
        assert value('session_training_labeled_frames_max') == c['max_labeled_frames'] == 120
        assert value('session_training_epochs_completed') == c['training_epochs_completed'] == 3
        assert value('session_training_loss') == c['training_final_loss']
        # The lab agent is no worker: the state tracker was never enabled.
        assert not [s for s in sources if s.name.startswith('worker_activity')], sources


def test_without_an_endpoint_export_says_so_and_counting_goes_on(tmp_path):
    code = """
    from datetime import datetime, timezone
    from higgsmeter import lab
    c = lab.new_counters(datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc))
    print(lab.export(c))
    lab.apply_sample(c, lab.Sample(
        ts=datetime(2025, 3, 1, 9, 0, 2, tzinfo=timezone.utc), sample_interval_seconds=2,
        active_window_bucket='subject', gpu_util_pct=37.0, vram_mb=1.0,
        processes_seen=set(), max_labeled_frames=None, training_epochs_completed=None,
        training_final_loss=None))
    print(c.sample_count, c.seconds_in_subject_software)
    """
    out = run_python(tmp_path, code, clean_env({'RUST_LOG': 'warn'}))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ['False', '1', '2'], out.stdout
