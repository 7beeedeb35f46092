"""The activity families in ``prometheus_client``'s default registry, read live.

On a tracking rank, ``enable_tracker`` registers a collector in ``REGISTRY`` (when
``prometheus_client`` is installed), so an existing ``start_http_server`` or
``generate_latest`` shows ``worker_activity_time_seconds_total{state,operation}`` and
``worker_current_state`` as the seed's did, with the current state's time so far
included at every scrape, and the goodput marks (``higgsmeter.job``:
``higgsmeter_job_step``, ``higgsmeter_job_checkpoint_step``,
``higgsmeter_job_checkpoint_productive_seconds``, ``higgsmeter_job_restored_step``), each
once set. A tracker that is off (a rank that does not track) shows none of them.
"""

from __future__ import annotations

# The catalog's names, labels and help texts (higgsmeter-catalog: the seed's, exactly).
from higgsmeter._core import ACTIVITY_HELP
from higgsmeter._core import ACTIVITY_LABELS
from higgsmeter._core import ACTIVITY_NAME
from higgsmeter._core import CURRENT_STATE_HELP as CURRENT_HELP
from higgsmeter._core import CURRENT_STATE_NAME as CURRENT_NAME
from higgsmeter._core import JOB_GAUGES

# The checkpoint's productive seconds carry the checkpoint's step as a label (the
# catalog's); this registry shows the last checkpoint, the OTLP export the last eight.
_PRODUCTIVE = 'higgsmeter_job_checkpoint_productive_seconds'
_CHECKPOINT_STEP = 'higgsmeter_job_checkpoint_step'


def _labels(name):
    return ['step'] if name == _PRODUCTIVE else []


class ActivityCollector:
    """A ``prometheus_client`` collector over a tracker's live snapshot."""

    def __init__(self, tracker):
        #: The tracker read at each scrape (a forked child swaps in its own).
        self.tracker = tracker

    def describe(self):
        from prometheus_client.core import CounterMetricFamily
        from prometheus_client.core import GaugeMetricFamily

        return [
            CounterMetricFamily(ACTIVITY_NAME, ACTIVITY_HELP, labels=list(ACTIVITY_LABELS)),
            GaugeMetricFamily(CURRENT_NAME, CURRENT_HELP),
            *(GaugeMetricFamily(name, help, labels=_labels(name)) for name, help in JOB_GAUGES),
        ]

    def collect(self):
        from prometheus_client.core import CounterMetricFamily
        from prometheus_client.core import GaugeMetricFamily

        tracker = self.tracker
        if not tracker.enabled:
            return
        entries, current, _elapsed = tracker.snapshot()
        activity = CounterMetricFamily(ACTIVITY_NAME, ACTIVITY_HELP, labels=list(ACTIVITY_LABELS))
        for state, operation, seconds in entries:
            activity.add_metric([state, operation], seconds)
        yield activity
        yield GaugeMetricFamily(CURRENT_NAME, CURRENT_HELP, value=current)
        marks = tracker.job_marks()
        for name, help in JOB_GAUGES:
            if name not in marks:
                continue
            if name == _PRODUCTIVE:
                family = GaugeMetricFamily(name, help, labels=['step'])
                family.add_metric([str(marks.get(_CHECKPOINT_STEP, ''))], marks[name])
                yield family
            else:
                yield GaugeMetricFamily(name, help, value=marks[name])


def register(tracker):
    """Registers the collector in ``prometheus_client.REGISTRY``; returns it, or None
    when ``prometheus_client`` is not installed."""
    try:
        from prometheus_client import REGISTRY
    except ImportError:
        return None
    collector = ActivityCollector(tracker)
    REGISTRY.register(collector)
    return collector
