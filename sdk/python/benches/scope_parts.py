"""Where a Python scope's time goes: the parts of ``with state_tracker.scope(AppState.GPU,
"inference"): pass`` timed one by one in this interpreter, beside a ``with`` on a C-level
``threading.Lock`` (the floor of any context manager).

    .venv/bin/python sdk/python/benches/scope_parts.py

Prints, per part, the best of 7 repeats of 20,000 calls in nanoseconds, and the same
less an empty call's cost.
"""

import threading
import timeit

from higgsmeter import AppState
from higgsmeter import enable_tracker
from higgsmeter import state_tracker
from higgsmeter.tracker import StateTracker

N = 20_000

enable_tracker(rank=0)
lock = threading.Lock()
scope = state_tracker.scope
GPU = AppState.GPU
made = scope(GPU, 'inference')
off = StateTracker(enabled=False)
off_made = off.scope(GPU, 'inference')


def lock_with():
    with lock:
        pass


def make_only():
    scope(GPU, 'inference')


def full():
    with state_tracker.scope(AppState.GPU, 'inference'):
        pass


def full_local_names():
    with scope(GPU, 'inference'):
        pass


def enter_exit_only():
    with made:
        pass


def enter_exit_disabled():
    with off_made:
        pass


def full_disabled():
    with off.scope(GPU, 'inference'):
        pass


def enum_member():
    return AppState.GPU


def empty():
    pass


PARTS = {
    'with threading.Lock': lock_with,
    'scope(...) only': make_only,
    'the whole with': full,
    'the whole with, local names': full_local_names,
    'enter + exit of a made scope': enter_exit_only,
    'enter + exit, tracker off': enter_exit_disabled,
    'the whole with, tracker off': full_disabled,
    'AppState.GPU': enum_member,
    'an empty call': empty,
}


def main():
    best = {
        name: min(timeit.repeat(fn, number=N, repeat=7)) / N * 1e9 for name, fn in PARTS.items()
    }
    base = best['an empty call']
    print(f'{"part":<30} {"ns":>7} {"less a call":>12}')
    for name, ns in best.items():
        print(f'{name:<30} {ns:7.1f} {ns - base:12.1f}')


if __name__ == '__main__':
    main()
