"""Runs Google's goodput calculator (``ml-goodput-measurement``) over one job history
and prints its figures, for ``test_goodput_reference.py``.

Run by the reference's own interpreter (``.venv/goodput/bin/python``, which ``.ci/setup``
makes): the events come as JSON on stdin, ``[kind, time]`` or ``["step", step, time]``
with times in unix seconds; one JSON object is printed with the calculator's seconds.
Its recorder writes to, and its calculator reads from, an in-memory log in place of
Cloud Logging (the way the package's own tests run it offline); everything else is the
package's code.
"""

import datetime
import json
import sys
import tempfile

from ml_goodput_measurement.src import goodput


class MemoryLog:
    """Cloud Logging's part of the interface the recorder and calculator use."""

    def __init__(self):
        self.entries = []

    def write_cloud_logging_entry(self, entry):
        self.entries.append(entry)

    def read_cloud_logging_entries(self, start_time=None, end_time=None, last_entry_info=None):
        return list(self.entries), None


def at(seconds: float) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)


def main() -> int:
    events = json.load(sys.stdin)
    log = MemoryLog()
    rec = goodput.GoodputRecorder('job', 'log', logging_enabled=True, cloud_logger=log)
    record = {
        'job_start': rec.record_job_start_time,
        'job_end': rec.record_job_end_time,
        'init_start': rec.record_tpu_init_start_time,
        'init_end': rec.record_tpu_init_end_time,
        'data_start': rec.record_data_loading_start_time,
        'data_end': rec.record_data_loading_end_time,
    }
    for event in events:
        kind = event[0]
        if kind == 'step':
            rec.record_step_start_time(event[1], at(event[2]))
        elif kind == 'custom_start':
            rec.record_custom_badput_event_start_time(at(event[1]), event[2])
        elif kind == 'custom_end':
            rec.record_custom_badput_event_end_time(at(event[1]), event[2])
        else:
            record[kind](at(event[1]))
    calc = goodput.GoodputCalculator('job', 'log', cloud_logger=log, cache_dir=tempfile.mkdtemp())
    calc.get_job_goodput(include_badput_breakdown=True)
    details = calc.get_job_goodput_details()
    badput = {}
    for kind, value in details['badput_time'].items():
        badput[kind.name] = sum(value.values()) if isinstance(value, dict) else float(value)
    print(
        json.dumps(
            {
                'total': float(details['total_elapsed_time']),
                'productive': float(sum(details['goodput_time'].values())),
                'disruptions': int(details['disruption_count']),
                'badput': badput,
            }
        )
    )
    return 0


if __name__ == '__main__':
    raise SystemExit(main())
