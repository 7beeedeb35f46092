"""Goodput marks: what a training worker tells the collector about its progress.

The collector splits a job's time into goodput (productive ``gpu`` step time) and
badput by cause, per job and across restarts. It reads the activity seconds by state,
the job's identity in the resource (``job.id`` from ``OTEL_RESOURCE_ATTRIBUTES``, else
torchrun's ``TORCHELASTIC_RUN_ID``, else ``HIGGSMETER_JOB_ID``; ``job.incarnation``
likewise from ``TORCHELASTIC_RESTART_COUNT`` or ``HIGGSMETER_JOB_INCARNATION``), and
these marks, exported per process as gauges once set::

    from higgsmeter import AppState, enable_tracker, job, state_tracker

    enable_tracker()
    with job.checkpoint_restore(start):          # io / checkpoint_restore
        load(start)                               # higgsmeter_job_restored_step
    for step in range(start + 1, last + 1):
        with state_tracker.scope(AppState.GPU, 'train_step'):
            train_step()
        job.record_step(step)                     # higgsmeter_job_step
        if step % 100 == 0:
            with job.checkpoint_save(step):       # io / checkpoint_save
                save(step)                        # higgsmeter_job_checkpoint_step, ..._productive_seconds
        if step % 1000 == 0:
            with job.badput('evaluation', AppState.GPU):   # gpu / badput.evaluation
                evaluate()

The functions work on the process-wide tracker (``state_tracker``); a
``StateTracker`` of your own has the same methods (``record_step``,
``checkpoint_save``, ``checkpoint_restore``, ``badput``, ``job_marks``).
"""

from __future__ import annotations

from higgsmeter import _core
from higgsmeter.tracker import AppState
from higgsmeter.tracker import state_tracker

#: The operation of a checkpoint save's scope (``io``): the ``checkpoint_save`` badput.
CHECKPOINT_SAVE_OPERATION: str = _core.CHECKPOINT_SAVE_OPERATION

#: The operation of a checkpoint restore's scope (``io``): the ``checkpoint_restore``
#: badput.
CHECKPOINT_RESTORE_OPERATION: str = _core.CHECKPOINT_RESTORE_OPERATION

#: Operations starting with this prefix (``badput.evaluation``) are custom badput,
#: whatever their state.
CUSTOM_BADPUT_PREFIX: str = _core.CUSTOM_BADPUT_PREFIX

#: The badput causes of the collector's job view, in its order.
BADPUT_CAUSES: tuple[str, ...] = tuple(_core.BADPUT_CAUSES)


def record_step(step: int) -> None:
    """Records ``step`` (an ``int`` >= 0) as the last training step completed:
    ``higgsmeter_job_step``. Call it after every step."""
    state_tracker._tracker.record_step(step)


def checkpoint_save(step: int) -> _core.StateScope:
    """A context manager around a checkpoint's save: ``io`` with operation
    ``checkpoint_save``. When the block exits without an exception (the save
    finished), records ``higgsmeter_job_checkpoint_step = step`` and
    ``higgsmeter_job_checkpoint_productive_seconds``: the worker's ``gpu`` seconds at
    that moment, the progress the checkpoint keeps. A save that raises records
    nothing (its time stays counted)."""
    return state_tracker._tracker.checkpoint_save(step)


def checkpoint_restore(step: int) -> _core.StateScope:
    """A context manager around a checkpoint's restore: ``io`` with operation
    ``checkpoint_restore``. When the block exits without an exception (the restore
    finished; not when it starts), records ``higgsmeter_job_restored_step = step``."""
    return state_tracker._tracker.checkpoint_restore(step)


def badput(cause: str, state: AppState = AppState.CPU) -> _core.StateScope:
    """A context manager around custom badput (an evaluation, a profiling pass):
    ``state`` with operation ``badput.<cause>``, which the collector counts as the
    ``custom`` cause whatever the state (``badput('evaluation', AppState.GPU)`` is
    GPU time that is not goodput). A cause that starts with ``badput.`` is taken as the
    whole operation."""
    return state_tracker._tracker.badput(cause, state)


def marks() -> dict[str, int | float]:
    """The marks set so far, ``{gauge name: value}``: what the next export carries (a
    mark never set is absent)."""
    return state_tracker._tracker.job_marks()


__all__ = [
    'BADPUT_CAUSES',
    'CHECKPOINT_RESTORE_OPERATION',
    'CHECKPOINT_SAVE_OPERATION',
    'CUSTOM_BADPUT_PREFIX',
    'badput',
    'checkpoint_restore',
    'checkpoint_save',
    'marks',
    'record_step',
]
