"""The peer: one scope (enter + exit) and one set_state of the Python higgsmeter 0.1.1.

`.venv/bin/python sdk/higgsmeter/benches/python_scope.py` prints the median of 7 runs
of 20,000 iterations each, in nanoseconds per operation.
"""

import statistics
import timeit

from higgsmeter import AppState, enable_tracker, state_tracker

enable_tracker(rank=0)
N = 20_000


def scope():
    with state_tracker.scope(AppState.GPU, "inference"):
        pass


flip = [AppState.IDLE, AppState.IO]


def set_state(i=[0]):
    i[0] += 1
    state_tracker.set_state(flip[i[0] & 1], "waiting_for_work")


for name, fn in [("scope_enter_exit", scope), ("set_state", set_state)]:
    runs = timeit.repeat(fn, number=N, repeat=7)
    print(f"python_higgsmeter/{name}: {statistics.median(runs) / N * 1e9:.0f} ns")
