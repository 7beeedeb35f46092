"""The seed's API over the Rust tracker: ``AppState``, ``StateTracker``,
``state_tracker``, ``enable_tracker`` and ``track_state``.

What changed against higgsmeter 0.1.1 (the state contract of the Rust SDK):

- one timeline per process, shared by every thread and asyncio task: the current
  (state, operation) is the most recently opened scope still open; a scope that closes
  out of order (another thread's, another task's) only leaves, it never restores a
  stale state, and no time is counted twice;
- a scope opens at ``__enter__`` (the seed captured the state to restore when
  ``scope()`` was called);
- time is read live: a scrape or export includes the time so far in the current state,
  and the activity seconds always sum to the wall time since ``enable_tracker``
  (counting starts there);
- ``finalize()`` ends the timeline: it commits the time so far and stops the clock, so
  every later scrape and export, the last one at exit included, shows exactly the time
  from ``enable_tracker`` to ``finalize()`` (as the seed's counter did); twice counts
  nothing twice; a ``set_state`` or scope after it resumes the clock from that moment;
- ``enable_tracker`` again keeps the open interval (the seed replaced the tracker and
  dropped it);
- nothing is claimed before ``enable_tracker`` or on a rank that does not track (the
  seed's ``worker_current_state`` said 0, "idle");
- with an OTLP endpoint configured (``OTEL_EXPORTER_OTLP_ENDPOINT``), every rank tracks
  and exports, with its rank as a resource attribute, for the collector to sum.
"""

from __future__ import annotations

import atexit
import enum
import functools
import inspect
import os
import sys
import threading

from higgsmeter import _core


class AppState(enum.Enum):
    """What a worker is doing; at every instant it is in exactly one."""

    IDLE = 'idle'
    IO = 'io'
    CPU = 'cpu'
    GPU = 'gpu'
    WARMUP = 'warmup'
    STARTUP = 'startup'
    SHUTDOWN = 'shutdown'


#: The seed's numeric codes, the values of ``worker_current_state``.
STATE_VALUE_MAP = {
    AppState.IDLE: 0,
    AppState.IO: 1,
    AppState.CPU: 2,
    AppState.GPU: 3,
    AppState.WARMUP: 4,
    AppState.STARTUP: 5,
    AppState.SHUTDOWN: 6,
}

_core.register_states(list(AppState))


class StateTracker(_core.Tracker):
    """One worker's timeline: at every instant in exactly one (state, operation).

    ``StateTracker(enabled=True)`` makes a timeline of its own; the process-wide one,
    which ``state_tracker``, ``track_state`` and the exporters use, is
    ``state_tracker._tracker``.
    """

    __slots__ = ()

    # set_state(new_state, operation=None), scope(state, operation=None), finalize()
    # and the properties below are the Rust tracker's.

    @property
    def _enabled(self) -> bool:
        return self.enabled

    @property
    def _current_state(self) -> AppState:
        return self.current_state

    @property
    def _current_operation(self) -> str | None:
        return self.current_operation or None

    def update_gauge(self, state: AppState | None = None) -> None:
        """The seed's gauge refresh: a no-op, ``worker_current_state`` is read live."""

    def __repr__(self) -> str:
        return (
            f'<StateTracker enabled={self.enabled} state={self.current_state} '
            f'operation={self.current_operation!r}>'
        )


def _configured_exports() -> dict:
    """What the pipeline would export (the Rust SDK reads the environment: ``otlp``,
    ``prometheus``, ``traces``). A bad setting counts as OTLP configured, so that
    ``enable_tracker`` starts the pipeline and raises its ``ConfigError`` on every rank."""
    try:
        return _core.configured_exports()
    except _core.ConfigError:
        return {'otlp': True, 'prometheus': False, 'traces': False}


def _otlp_configured() -> bool:
    """Whether there is somewhere to aggregate: an OTLP endpoint, export not disabled."""
    return bool(_configured_exports()['otlp'])


def _flag(name: str) -> bool:
    # HIGGSMETER_GPU_METER is the Python package's own switch (the Rust SDK's init()
    # takes the meter as a setting, on by default there).
    return os.environ.get(name, '').strip().lower() in ('1', 'true', 'yes', 'on')


def _script_name() -> str:
    """The script's name: the service's name unless the environment names one (the
    Rust SDK decides; every Python worker's executable is ``python``)."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ''
    name = os.path.splitext(os.path.basename(argv0))[0]
    return name if name and name not in ('-c', '-m', '') else 'python'


class _GlobalTracker:
    """The module-level ``state_tracker``: the process-wide tracker, and the pipeline
    that exports it. Attributes it does not define are the tracker's (as the seed's
    proxy forwarded them)."""

    def __init__(self):
        self._bind(StateTracker(process_wide=True))
        self._lock = threading.Lock()
        self._rank = None
        self._collector = None
        self.pipeline = None

    def enable(self, rank: int | None = None, *, gpu_meter: bool | None = None) -> None:
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):
            raise TypeError(f'rank must be an int, not {type(rank).__name__}')
        tracks = _otlp_configured() or (rank if rank is not None else 0) == 0
        with self._lock:
            # The same timeline throughout: re-enabling never drops the open interval.
            self._tracker.enabled = tracks
            if not tracks:
                return
            self._start_pipeline(rank, gpu_meter)
            if self._collector is None:
                from higgsmeter import _prometheus

                self._collector = _prometheus.register(self._tracker)

    def start_pipeline(self) -> dict:
        """Starts the process's OpenTelemetry pipeline from the environment, as
        ``enable_tracker`` does, without enabling the tracker (what ``higgsmeter.lab``'s
        ``export`` needs); returns what runs (see ``_core.init``)."""
        with self._lock:
            return self._start_pipeline(None, None)

    def _start_pipeline(self, rank: int | None, gpu_meter: bool | None) -> dict:
        # Called with self._lock held.
        if self.pipeline is None:
            if gpu_meter is None:
                gpu_meter = _flag('HIGGSMETER_GPU_METER')
            self.pipeline = _core.init(
                self._tracker, rank=rank, service_name=_script_name(), gpu_meter=gpu_meter
            )
            self._rank = rank
            atexit.register(_core.shutdown)
        return self.pipeline

    def _after_fork_in_child(self) -> None:
        """A forked child starts off with a timeline of its own: the parent's totals are
        the parent's to export, its exporter threads were not copied, and a lock one of
        them held at the fork would never be released here. Scopes are no-ops until
        ``enable_tracker`` is called in the child."""
        self._lock = threading.Lock()
        self._tracker.enabled = False  # the parent's timeline: an atomic store, no lock
        _core.forget_after_fork()
        self.pipeline = None
        self._bind(StateTracker(enabled=False))
        if self._collector is not None:
            self._collector.tracker = self._tracker

    def _bind(self, tracker: StateTracker) -> None:
        self._tracker = tracker
        # The hot paths straight to the Rust methods: instance attributes, so that
        # `state_tracker.scope` is one dictionary look-up (CPython specialises it) and
        # no Python frame is added per call. The class defines no `scope`, `set_state`
        # or `__getattr__`: either would send every attribute look-up on this object
        # through the slow generic path (about 40 ns a scope on CPython 3.11).
        self.set_state = tracker.set_state
        self.scope = tracker.scope

    def finalize(self, timeout: float = 5.0) -> None:
        """Ends the timeline: commits the time so far and stops the clock (later scrapes
        and exports, the last one at exit included, show the time up to this call),
        then, if a pipeline runs, exports now (waiting at most ``timeout`` seconds;
        never raises). A later ``set_state`` or scope resumes the clock."""
        self._tracker.finalize()
        if self.pipeline is not None:
            _core.flush(timeout)


def _forwarded(name: str) -> property:
    """The process-wide tracker's attribute ``name``, read and written through."""

    def get(self):
        return getattr(self._tracker, name)

    def set_(self, value):
        setattr(self._tracker, name, value)

    return property(get, set_, doc=f"The process-wide tracker's ``{name}``.")


# Everything else the tracker has, forwarded (as the seed's proxy forwarded it): one
# property per name, not a __getattr__ (see _bind); the hot paths are instance
# attributes that _bind sets.
_HOT_PATHS = ('scope', 'set_state')
for _name in dir(StateTracker):
    if not _name.startswith('__') and _name not in vars(_GlobalTracker) and _name not in _HOT_PATHS:
        setattr(_GlobalTracker, _name, _forwarded(_name))
del _name


state_tracker = _GlobalTracker()
if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=state_tracker._after_fork_in_child)


def enable_tracker(rank: int | None = None, *, gpu_meter: bool | None = None) -> None:
    """Starts tracking, and the exporters, on a tracking rank.

    Without an OTLP endpoint (nowhere to aggregate) only rank 0 tracks, as in the seed;
    ``rank`` defaults to 0. With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set, every rank tracks
    and exports, with ``rank`` (else ``RANK``) as its ``rank`` resource attribute.
    ``gpu_meter=True`` (or ``HIGGSMETER_GPU_METER=1``) starts the in-process NVML meter.
    Calling it again switches tracking on or off and keeps the timeline.
    """
    state_tracker.enable(rank, gpu_meter=gpu_meter)


def _check(state, operation) -> None:
    if not isinstance(state, AppState):
        raise TypeError(
            f'state must be a higgsmeter.AppState member such as AppState.GPU, '
            f'not {type(state).__name__} {state!r}'
        )
    if operation is not None and not isinstance(operation, str):
        raise TypeError(
            f'operation must be a str (or None for no operation), not {type(operation).__name__}'
        )


def track_state(state: AppState, operation: str | None = None):
    """Marks a function as time in ``state``; the operation defaults to its
    ``__qualname__``.

    A plain or ``async`` function is in the state for its whole call (an ``await``
    inside included); a generator or async generator while its body runs, each time it
    is resumed, not while its consumer holds it between items.
    """
    _check(state, operation)

    def decorator(func):
        # state_tracker.scope is looked up at each call: a forked child swaps its
        # tracker in.
        op = operation or func.__qualname__

        if inspect.isasyncgenfunction(func):

            @functools.wraps(func)
            async def asyncgen_wrapper(*args, **kwargs):
                agen = func(*args, **kwargs)
                send, value = agen.asend, None
                try:
                    while True:
                        with state_tracker.scope(state, op):
                            try:
                                item = await send(value)
                            except StopAsyncIteration:
                                return
                        try:
                            value = yield item
                            send = agen.asend
                        except GeneratorExit:
                            raise
                        except BaseException as exc:
                            send, value = agen.athrow, exc
                finally:
                    with state_tracker.scope(state, op):
                        await agen.aclose()

            return asyncgen_wrapper

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                with state_tracker.scope(state, op):
                    return await func(*args, **kwargs)

            return async_wrapper

        if inspect.isgeneratorfunction(func):

            @functools.wraps(func)
            def gen_wrapper(*args, **kwargs):
                gen = func(*args, **kwargs)
                send, value = gen.send, None
                try:
                    while True:
                        with state_tracker.scope(state, op):
                            try:
                                item = send(value)
                            except StopIteration as stop:
                                return stop.value
                        try:
                            value = yield item
                            send = gen.send
                        except GeneratorExit:
                            raise
                        except BaseException as exc:
                            send, value = gen.throw, exc
                finally:
                    with state_tracker.scope(state, op):
                        gen.close()

            return gen_wrapper

        call_in_state = _core.call_in_state

        # A plain function stays a plain Python function (pickled by reference,
        # introspected, bound as a method as before); its call goes through one Rust
        # call that opens the state, calls it and closes the state, with no scope
        # object or `with` in between.
        @functools.wraps(func)
        def sync_wrapper(*args, **kwargs):
            return call_in_state(state_tracker._tracker, state, op, func, args, kwargs)

        return sync_wrapper

    return decorator
