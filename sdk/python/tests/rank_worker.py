"""One Python rank for test_ranks.py: tracks a short deterministic scenario with the
installed ``higgsmeter`` package, pushing OTLP to whatever the ``OTEL_*`` environment
names, and prints one JSON line with its own exact totals.

    RANK=2 OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python rank_worker.py ranks
    RANK=1 python rank_worker.py seed

Modes:

``ranks``: the rank is ``RANK``, or ``--rank-arg N`` to pass it to
``enable_tracker(rank=N)`` instead. Runs about 1-1.5 s of states and scopes (operations
shared by every rank and operations of its own), ends in ``AppState.SHUTDOWN``, calls
``state_tracker.finalize()``, prints its ``snapshot()`` and exits: the final export is
the one ``atexit`` makes, after the snapshot, and carries exactly the printed totals
(``finalize()`` stopped the clock).

``seed``: ``enable_tracker(rank=--rank-arg or 1)``, then one ``gpu``/``seed_probe``
scope; prints whether the tracker is enabled and the snapshot.

The JSON line: ``rank``, ``enabled``, ``pipeline`` (what ``_core.init`` returned, or
null), ``entries`` ([state, operation, seconds]), ``current_code``, ``elapsed``, ``pid``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from higgsmeter import AppState
from higgsmeter import enable_tracker
from higgsmeter import state_tracker
from higgsmeter import track_state


@track_state(AppState.CPU)
def postprocess():
    """Decorated: operation = the qualname, ``postprocess``."""
    time.sleep(0.01)


def scenario(rank: int) -> None:
    state_tracker.set_state(AppState.WARMUP, 'load_weights')
    time.sleep(0.10)
    for _ in range(3):
        state_tracker.set_state(AppState.IDLE, 'wait_for_work')
        time.sleep(0.04 * (rank + 1))
        with state_tracker.scope(AppState.IO, 'fetch_batch'):
            time.sleep(0.03)
            with state_tracker.scope(AppState.CPU, f'tokenize_rank{rank}'):
                time.sleep(0.02)
        with state_tracker.scope(AppState.GPU, 'inference'):
            time.sleep(0.2 + 0.05 * rank)
            if rank == 2:
                # set_state inside a scope switches that scope's frame.
                state_tracker.set_state(AppState.GPU, 'inference_tail')
                time.sleep(0.02)
        postprocess()
    if rank == 0:
        with state_tracker.scope(AppState.IO, 'save_checkpoint'):
            time.sleep(0.10)
    if rank == 1:
        state_tracker.set_state(AppState.IDLE, 'barrier')
        time.sleep(0.08)
    state_tracker.set_state(AppState.SHUTDOWN)


def report(rank, extra=None) -> None:
    pipeline = state_tracker.pipeline
    entries, current_code, elapsed = state_tracker.snapshot()
    out = {
        'rank': rank,
        'pid': os.getpid(),
        'enabled': bool(state_tracker._tracker._enabled),
        'pipeline': dict(pipeline) if pipeline is not None else None,
        'entries': [[str(s), str(op), float(secs)] for s, op, secs in entries],
        'current_code': int(current_code),
        'elapsed': float(elapsed),
    }
    if extra:
        out.update(extra)
    sys.stdout.write(json.dumps(out) + '\n')
    sys.stdout.flush()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument('mode', choices=['ranks', 'seed'])
    parser.add_argument('--rank-arg', type=int, default=None)
    args = parser.parse_args()

    if args.mode == 'seed':
        rank = 1 if args.rank_arg is None else args.rank_arg
        enable_tracker(rank=rank)
        with state_tracker.scope(AppState.GPU, 'seed_probe'):
            time.sleep(0.05)
        state_tracker.finalize()
        report(rank)
        return 0

    if args.rank_arg is not None:
        rank = args.rank_arg
        enable_tracker(rank=rank)
    else:
        rank = int(os.environ['RANK'])
        enable_tracker()
    scenario(rank)
    state_tracker.finalize()
    report(rank)
    # Exit normally: atexit makes the final export.
    return 0


if __name__ == '__main__':
    sys.exit(main())
