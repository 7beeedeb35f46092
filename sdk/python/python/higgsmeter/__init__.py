"""higgsmeter: where a GPU worker's wall-clock time goes, exact, over a Rust core.

A drop-in for the Python ``higgsmeter`` 0.1.1: the same API (``AppState``,
``StateTracker``, ``enable_tracker``, ``state_tracker``, ``track_state``) and the same
metrics (``worker_activity_time_seconds_total{state,operation}``,
``worker_current_state``), with the accounting done by the Rust SDK: exactly one
(state, operation) at every instant, across threads and asyncio tasks; activity seconds
that sum to wall time; live values on every scrape; OTLP export from every rank when an
endpoint is configured.

Quick start::

    from higgsmeter import AppState, enable_tracker, state_tracker, track_state

    enable_tracker(rank=0)
    state_tracker.set_state(AppState.IDLE, operation="waiting_for_work")
    with state_tracker.scope(AppState.GPU, operation="inference"):
        run_inference()

    @track_state(AppState.IO)          # operation = "download_data"
    def download_data(url): ...

    state_tracker.set_state(AppState.SHUTDOWN)
    state_tracker.finalize()

A training worker also marks its progress for the collector's goodput view:
``higgsmeter.job`` (``record_step``, ``checkpoint_save``, ``checkpoint_restore``,
``badput``).
"""

from higgsmeter import job
from higgsmeter._core import ConfigError
from higgsmeter._version import __version__
from higgsmeter.tracker import AppState
from higgsmeter.tracker import StateTracker
from higgsmeter.tracker import enable_tracker
from higgsmeter.tracker import state_tracker
from higgsmeter.tracker import track_state

__all__ = [
    'AppState',
    'ConfigError',
    'StateTracker',
    '__version__',
    'enable_tracker',
    'job',
    'state_tracker',
    'track_state',
]
