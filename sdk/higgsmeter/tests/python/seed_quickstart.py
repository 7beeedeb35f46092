"""The seed README's quick start through the Python higgsmeter 0.1.1, on a fake clock.

Prints the Prometheus exposition of the default registry. The tracker reads
`time.perf_counter`; it is replaced by a clock that moves only when the scenario says,
so the values are exact and the Rust side (tests/it/python_parity.rs) can run the same
scenario on its ManualClock and expect the very same numbers.
"""

import os
import sys

os.environ.setdefault("PROMETHEUS_DISABLE_CREATED_SERIES", "True")

import higgsmeter.tracker as tracker_module  # noqa: E402
from higgsmeter import AppState, enable_tracker, state_tracker, track_state  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def perf_counter(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


clock = FakeClock()
tracker_module.time.perf_counter = clock.perf_counter


def run_inference():
    clock.advance(2.0)


@track_state(AppState.IO)
def download_data(url):
    clock.advance(0.25)


enable_tracker(rank=0)
clock.advance(0.5)
state_tracker.set_state(AppState.IDLE, operation="waiting_for_work")
clock.advance(1.0)
with state_tracker.scope(AppState.GPU, operation="inference"):
    run_inference()
download_data("s3://bucket/key")
clock.advance(0.5)
state_tracker.set_state(AppState.SHUTDOWN)
clock.advance(0.125)
state_tracker.finalize()

sys.stdout.write(generate_latest().decode())
