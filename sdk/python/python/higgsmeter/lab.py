"""The lab monitoring agent's aggregator, over the Rust session counters.

A drop-in for the agent's own module: ``Sample``, ``SessionCounters``, ``apply_sample``,
``new_counters`` and the constants ``GPU_ACTIVE_UTIL_THRESHOLD``, ``SUBJECT_FIELD`` and
``WINDOW_BUCKETS``, with the seed's fields, defaults and results. Each sample adds its
own interval to its window bucket's seconds (a bucket not in ``WINDOW_BUCKETS``, or
``None``, counts as ``other``) and to ``gpu_active_seconds`` when utilisation is
strictly above 5 %; peaks keep the largest value seen; ``seconds_to_first_sleap_*`` are
the whole seconds from the session start to the first sample that saw the process
(``int((s.ts - c.session_started_at).total_seconds())``, truncated toward zero); the
training maxima ignore ``None``; the loss is the last one that is not ``None``::

    from datetime import datetime, timezone
    from higgsmeter.lab import Sample, apply_sample, new_counters

    c = new_counters(datetime(2025, 3, 1, 9, 0, tzinfo=timezone.utc))
    apply_sample(c, Sample(
        ts=datetime(2025, 3, 1, 9, 0, 2, tzinfo=timezone.utc), sample_interval_seconds=2,
        active_window_bucket='subject', gpu_util_pct=37.0, vram_mb=2048.0,
        processes_seen={'sleap-label'}, max_labeled_frames=120,
        training_epochs_completed=None, training_final_loss=None))
    c.seconds_in_subject_software, c.seconds_to_first_sleap_label   # (2, 2)

The counting is the Rust session counters' (``higgsmeter-session``, the
``higgsmeter-session`` agent's own ``SessionCounters::apply``), written back with the
seed's Python types: adding two ``int`` s keeps an ``int``, a peak or maximum is the
sample's own object. A value the Rust counters cannot hold exactly (an ``int`` beyond
2**52 where the seed keeps floats, beyond 64 bits elsewhere, a ``bool``, a ``Decimal``,
a NumPy scalar, a bucket that is not a ``str``, a ``None`` where the seed expects a
number) takes the seed's own Python code instead, so every sample gets the seed's
result, or the seed's exception after the same partial update.
"""

import threading
import weakref
from dataclasses import dataclass
from datetime import datetime

from higgsmeter import _core


def _plain(value):
    """5.0 -> 5: the seed spells its threshold as an int."""
    return int(value) if float(value).is_integer() else value


#: Utilisation, in percent, a sample must exceed (strictly) to count as GPU-active.
GPU_ACTIVE_UTIL_THRESHOLD = _plain(_core.SESSION_GPU_ACTIVE_UTIL_THRESHOLD)
#: The counter the ``subject`` bucket adds to; the others add to ``seconds_in_{bucket}``.
SUBJECT_FIELD = _core.SESSION_SUBJECT_FIELD
#: The window buckets; any other bucket counts as ``other``.
WINDOW_BUCKETS = tuple(_core.SESSION_WINDOW_BUCKETS)

# The processes whose first sighting is timed, in the seed's order (label, train, track).
_SLEAP_PROCESSES = tuple(_core.SESSION_SLEAP_PROCESSES)


@dataclass
class Sample:
    """One tick of the samplers: when, the seconds it stands for, the active window's
    bucket, GPU utilisation (%) and memory (MiB), the watched processes running, and the
    training progress (``None`` when unknown)."""

    ts: datetime
    sample_interval_seconds: float
    active_window_bucket: str
    gpu_util_pct: float
    vram_mb: float
    processes_seen: set
    max_labeled_frames: int
    training_epochs_completed: int
    training_final_loss: float


@dataclass
class SessionCounters:
    """The rolling session counters, the seed's fields in the seed's order (also the
    JSON keys the agent pushes to the allocator)."""

    session_started_at: datetime
    sample_count: int = 0
    seconds_in_subject_software: float = 0
    seconds_in_terminal: float = 0
    seconds_in_browser: float = 0
    seconds_in_other: float = 0
    gpu_active_seconds: float = 0
    gpu_util_peak: float = 0
    vram_used_peak_mb: float = 0
    seconds_to_first_sleap_label: int = None
    seconds_to_first_sleap_train: int = None
    seconds_to_first_sleap_track: int = None
    max_labeled_frames: int = 0
    training_epochs_completed: int = 0
    training_final_loss: float = None


# The Rust counters (a module attribute, so tests can see which path a sample took).
_session_apply = _core.session_apply


def apply_sample(c: SessionCounters, s: Sample) -> None:
    """Applies one sample to the counters, in place, as the seed's ``apply_sample``."""
    try:
        # As the seed evaluates them: datetime subtraction (a naive and an aware
        # datetime raise; one tzinfo on both subtracts wall times), float seconds
        # truncated toward zero, and `in` on whatever processes_seen is.
        elapsed = int((s.ts - c.session_started_at).total_seconds())
        seen = [name for name in _SLEAP_PROCESSES if name in s.processes_seen]
    except Exception:
        # The seed raises too, after its first updates: its own code does exactly that.
        _apply_sample_seed(c, s)
        return
    if not (-(2**63) <= elapsed < 2**63 and _session_apply(c, s, elapsed, seen)):
        _apply_sample_seed(c, s)
    exported = _exports.get(id(c))
    if exported is not None and exported[0]() is c:
        exported[1].publish(c)


def new_counters(session_started_at: datetime) -> SessionCounters:
    """Zeroed counters of a session that started at ``session_started_at``."""
    return SessionCounters(session_started_at=session_started_at)


# id(counters) -> (a weak reference to them, their _core.SessionExport).
_exports: dict = {}
_exports_lock = threading.Lock()


def export(c: SessionCounters) -> bool:
    """Exports ``c`` through the process's OpenTelemetry pipeline, as the Rust session
    agent exports its counters: ``session.samples``, ``session.window.time`` per bucket,
    ``session.process.time_to_first_seen`` per SLEAP process, and the training gauges
    (see the package's README for their Prometheus names). The pipeline starts from
    the standard ``OTEL_*`` variables if ``enable_tracker`` has not started it (the
    state tracker stays as it is); each ``apply_sample(c, ...)`` after this call
    publishes ``c``'s fields for the next export, and the last export at exit carries
    the final counters. Exporting the same counters again does nothing.

    Returns whether a pipeline exports metrics (``False``, and nothing started or
    registered, when neither ``OTEL_EXPORTER_OTLP_ENDPOINT`` nor
    ``HIGGSMETER_PROMETHEUS_ADDR`` is set);
    a bad setting raises ``ConfigError``. The counters stay plain dataclasses: the
    export reads them, it never changes them.
    """
    from higgsmeter.tracker import _configured_exports
    from higgsmeter.tracker import state_tracker

    if state_tracker.pipeline is None:
        exports = _configured_exports()
        if not (exports['otlp'] or exports['prometheus']):
            return False  # nothing to export to: no pipeline started for nothing
    info = state_tracker.start_pipeline()
    if not (info.get('otlp') or info.get('prometheus_addr')):
        return False
    with _exports_lock:
        exported = _exports.get(id(c))
        if exported is not None and exported[0]() is c:
            return True
        key = id(c)
        ref = weakref.ref(c, lambda _ref, key=key: _exports.pop(key, None))
        _exports[key] = (ref, _core.SessionExport(c))
    return True


def _apply_sample_seed(c: SessionCounters, s: Sample) -> None:
    # The seed's apply_sample, unchanged, for values the Rust counters cannot hold
    # exactly (see the module docstring).
    c.sample_count += 1
    bucket = s.active_window_bucket if s.active_window_bucket in WINDOW_BUCKETS else 'other'
    attr = SUBJECT_FIELD if bucket == 'subject' else f'seconds_in_{bucket}'
    setattr(c, attr, getattr(c, attr) + s.sample_interval_seconds)
    if s.gpu_util_pct > GPU_ACTIVE_UTIL_THRESHOLD:
        c.gpu_active_seconds += s.sample_interval_seconds
    if s.gpu_util_pct > c.gpu_util_peak:
        c.gpu_util_peak = s.gpu_util_pct
    if s.vram_mb > c.vram_used_peak_mb:
        c.vram_used_peak_mb = s.vram_mb
    elapsed = int((s.ts - c.session_started_at).total_seconds())
    if 'sleap-label' in s.processes_seen and c.seconds_to_first_sleap_label is None:
        c.seconds_to_first_sleap_label = elapsed
    if 'sleap-train' in s.processes_seen and c.seconds_to_first_sleap_train is None:
        c.seconds_to_first_sleap_train = elapsed
    if 'sleap-track' in s.processes_seen and c.seconds_to_first_sleap_track is None:
        c.seconds_to_first_sleap_track = elapsed
    if s.max_labeled_frames is not None and s.max_labeled_frames > c.max_labeled_frames:
        c.max_labeled_frames = s.max_labeled_frames
    if (
        s.training_epochs_completed is not None
        and s.training_epochs_completed > c.training_epochs_completed
    ):
        c.training_epochs_completed = s.training_epochs_completed
    if s.training_final_loss is not None:
        c.training_final_loss = s.training_final_loss


__all__ = [
    'GPU_ACTIVE_UTIL_THRESHOLD',
    'SUBJECT_FIELD',
    'WINDOW_BUCKETS',
    'Sample',
    'SessionCounters',
    'apply_sample',
    'export',
    'new_counters',
]
