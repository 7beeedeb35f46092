"""A data-parallel training job instrumented with higgsmeter, as a PyTorch DDP user
writes it: every rank tracks, its rank from ``torch.distributed``, its batches from
DataLoader-style worker processes forked after ``enable_tracker``.

With PyTorch installed, run it as torchrun runs any DDP script (gloo, on CPU):

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 torchrun --nproc-per-node 3 examples/python/ddp_train.py

Without PyTorch, ``--ranks N`` stands in for torchrun: it starts N copies of this
script with the variables torchrun sets (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``,
``TORCHELASTIC_RUN_ID``, ``TORCHELASTIC_RESTART_COUNT``), and each rank loads its batches
through a ``multiprocessing`` pool forked the way DataLoader forks its workers:

    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 .venv/bin/python examples/python/ddp_train.py --ranks 3

Each rank prints one JSON line at the end: its rank and its own totals
(``state_tracker.snapshot()`` after ``finalize()``), which the collector's fleet view
sums exactly. Without an OTLP endpoint only rank 0 tracks (the seed's rule):

    .venv/bin/python examples/python/ddp_train.py --ranks 2 --steps 5
"""

import argparse
import json
import os
import subprocess
import sys
import time
import uuid

from higgsmeter import AppState
from higgsmeter import enable_tracker
from higgsmeter import state_tracker
from higgsmeter import track_state

try:  # PyTorch when installed; the same script runs without it
    import torch
    import torch.distributed as dist
except ImportError:
    torch = None
    dist = None


def load_batch(index: int) -> list[float]:
    """What a DataLoader worker does for one batch: read and decode (simulated)."""
    time.sleep(0.004)
    return [float(index + i) for i in range(64)]


class Batches:
    """``torch.utils.data.Dataset`` shape: ``__len__`` and ``__getitem__``."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> list[float]:
        return load_batch(index)


def loader(steps: int, workers: int):
    """Batches from worker processes forked now, after ``enable_tracker``: a
    ``torch.utils.data.DataLoader`` with PyTorch, a fork-context ``multiprocessing``
    pool (the same fork pattern) without. The forked workers do not track: a child of a
    tracking process is off until it calls ``enable_tracker`` itself."""
    if torch is not None:
        data = torch.utils.data.DataLoader(
            Batches(steps), batch_size=None, num_workers=workers, multiprocessing_context='fork'
        )
        yield from data
        return
    import multiprocessing

    with multiprocessing.get_context('fork').Pool(workers) as pool:
        yield from pool.imap(load_batch, range(steps))


def rank_and_world() -> tuple[int, int]:
    """The rank and world size: from ``torch.distributed`` under torchrun, else from
    the variables the stand-in launcher set."""
    if dist is not None and 'MASTER_ADDR' in os.environ:
        dist.init_process_group('gloo')
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get('RANK', '0')), int(os.environ.get('WORLD_SIZE', '1'))


def all_reduce(rank: int, step: int) -> None:
    """Gradient all-reduce: a collective every rank waits in for the slowest."""
    if dist is not None and dist.is_initialized():
        dist.all_reduce(torch.ones(1))
        return
    time.sleep(0.002 * ((rank + step) % 3))  # waiting for the peers (simulated)


@track_state(AppState.WARMUP)
def build_model(rank: int) -> None:
    time.sleep(0.02 + 0.005 * rank)


@track_state(AppState.IO, 'save_checkpoint')
def save_checkpoint(step: int) -> None:
    time.sleep(0.01)


def train(args) -> int:
    rank, world = rank_and_world()
    # Counting starts here: the rendezvous and imports before it are not claimed.
    enable_tracker(rank=rank)
    build_model(rank)
    batches = loader(args.steps, args.workers)
    for step in range(args.steps):
        with state_tracker.scope(AppState.IO, 'next_batch'):
            batch = next(batches)
        with state_tracker.scope(AppState.GPU, 'forward_backward'):
            time.sleep(0.006 + 0.001 * rank)  # the GPU's share of the step
            _ = sum(batch)
        with state_tracker.scope(AppState.IDLE, 'all_reduce'):
            all_reduce(rank, step)
        if rank == 0 and (step + 1) % args.checkpoint_every == 0:
            save_checkpoint(step + 1)
    batches.close()
    state_tracker.set_state(AppState.SHUTDOWN)
    state_tracker.finalize()
    tracking = state_tracker.enabled  # without an OTLP endpoint, rank 0 only
    entries, _code, elapsed = state_tracker.snapshot() if tracking else ([], 0, 0.0)
    print(
        json.dumps(
            {
                'rank': rank,
                'world_size': world,
                'tracking': tracking,
                'elapsed': elapsed,
                'seconds': {f'{s}/{op}': secs for s, op, secs in entries},
            }
        ),
        flush=True,
    )
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()
    return 0


def launch(args) -> int:
    """The stand-in for torchrun: one process per rank with torchrun's variables."""
    run_id = os.environ.get('TORCHELASTIC_RUN_ID') or uuid.uuid4().hex[:12]
    children = []
    for rank in range(args.ranks):
        env = dict(os.environ)
        env.update(
            RANK=str(rank),
            LOCAL_RANK=str(rank),
            WORLD_SIZE=str(args.ranks),
            LOCAL_WORLD_SIZE=str(args.ranks),
            TORCHELASTIC_RUN_ID=run_id,
            TORCHELASTIC_RESTART_COUNT=env.get('TORCHELASTIC_RESTART_COUNT', '0'),
        )
        env.pop('MASTER_ADDR', None)  # no process group: the stand-in has no rendezvous
        cmd = [sys.executable, os.path.abspath(__file__), '--steps', str(args.steps)]
        cmd += ['--workers', str(args.workers), '--checkpoint-every', str(args.checkpoint_every)]
        children.append(subprocess.Popen(cmd, env=env))
    return max(child.wait() for child in children)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--ranks', type=int, default=0, help='start this many ranks (no torchrun)')
    parser.add_argument('--steps', type=int, default=20)
    parser.add_argument('--workers', type=int, default=2, help='batch-loading processes per rank')
    parser.add_argument('--checkpoint-every', type=int, default=10)
    args = parser.parse_args()
    if args.ranks:
        return launch(args)
    return train(args)


if __name__ == '__main__':
    sys.exit(main())
