"""Type stubs of the native core (Rust, PyO3). Not a stable API: use the package."""

from collections.abc import Callable
from types import TracebackType
from typing import Any
from typing import TypeAlias
from typing import TypeVar
from typing import final

from typing_extensions import Self
from typing_extensions import disjoint_base

from higgsmeter.lab import Sample
from higgsmeter.lab import SessionCounters
from higgsmeter.tracker import AppState

_T = TypeVar('_T')

__all__ = [
    'ACTIVITY_HELP',
    'ACTIVITY_LABELS',
    'ACTIVITY_NAME',
    'BADPUT_CAUSES',
    'CHECKPOINT_RESTORE_OPERATION',
    'CHECKPOINT_SAVE_OPERATION',
    'CONDUCTOR_REQUEST_STATES',
    'CURRENT_STATE_HELP',
    'CURRENT_STATE_NAME',
    'CUSTOM_BADPUT_PREFIX',
    'JOB_GAUGES',
    'SESSION_GPU_ACTIVE_UTIL_THRESHOLD',
    'SESSION_SLEAP_PROCESSES',
    'SESSION_SUBJECT_FIELD',
    'SESSION_WINDOW_BUCKETS',
    'STATUS_INTERVAL_S',
    'TRANSFER_API_SERVER',
    'CatalogScope',
    'ConductorRequestsRecorder',
    'ConfigError',
    'EngineRecorders',
    'GaugeRecorder',
    'KvPagesRecorder',
    'PrefixCacheRecorder',
    'SessionExport',
    'SpanRef',
    'StateScope',
    'StepRecorder',
    'Tracker',
    'TransferRecorder',
    'call_in_state',
    'configured_exports',
    'engine_families',
    'flush',
    'forget_after_fork',
    'init',
    'register_states',
    'running',
    'session_apply',
    'shutdown',
    'step',
    'transfer',
]

__version__: str
ACTIVITY_NAME: str
ACTIVITY_HELP: str
ACTIVITY_LABELS: list[str]
CURRENT_STATE_NAME: str
CURRENT_STATE_HELP: str

# The goodput marks (higgsmeter.job): their gauges as (name, help), in the catalog's
# order, and the operations and causes of the collector's job view.
JOB_GAUGES: list[tuple[str, str]]
CHECKPOINT_SAVE_OPERATION: str
CHECKPOINT_RESTORE_OPERATION: str
CUSTOM_BADPUT_PREFIX: str
BADPUT_CAUSES: tuple[str, ...]

class ConfigError(ValueError): ...

@final
class StateScope:
    @property
    def state(self) -> AppState: ...
    @property
    def operation(self) -> str | None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...

@disjoint_base
class Tracker:
    def __new__(cls, enabled: bool = False, *, process_wide: bool = False) -> Self: ...
    def set_state(self, new_state: AppState, operation: str | None = None) -> None: ...
    def scope(self, state: AppState, operation: str | None = None) -> StateScope: ...
    def finalize(self) -> None: ...
    enabled: bool
    @property
    def current_state(self) -> AppState: ...
    @property
    def current_operation(self) -> str: ...
    def snapshot(self) -> tuple[list[tuple[str, str, float]], int, float]: ...
    def record_step(self, step: int) -> None: ...
    def checkpoint_save(self, step: int) -> StateScope: ...
    def checkpoint_restore(self, step: int) -> StateScope: ...
    def badput(self, cause: str, state: AppState | None = None) -> StateScope: ...
    def job_marks(self) -> dict[str, int | float]: ...

@final
class SpanRef: ...

@final
class CatalogScope:
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool: ...
    def record(self, value: int) -> None: ...

def step(component: str, graph_walk: str, batch_size: int | None = None) -> CatalogScope: ...
def transfer(src: str, dst: str, transport: str, bytes: int | None = None) -> CatalogScope: ...

@final
class StepRecorder:
    def record(self, seconds: float, batch_size: int | None = None) -> None: ...

@final
class TransferRecorder:
    def record(self, seconds: float, bytes: int) -> None: ...

@final
class PrefixCacheRecorder:
    def record_lookup(self, query_tokens: int, hit_tokens: int) -> None: ...

@final
class KvPagesRecorder:
    def set(self, total: int, used: int, cached: int) -> None: ...

@final
class GaugeRecorder:
    def set(self, value: int) -> None: ...

@final
class ConductorRequestsRecorder:
    def set(self, waiting: int, running: int, draining: int) -> None: ...

@final
class EngineRecorders:
    def __new__(cls) -> Self: ...
    def step(self, component: str, graph_walk: str) -> StepRecorder: ...
    def transfer(self, src: str, dst: str, transport: str) -> TransferRecorder: ...
    def prefix_cache(self, component: str) -> PrefixCacheRecorder: ...
    def kv_pages(self, component: str, resource: str) -> KvPagesRecorder: ...
    def pending_steps(self, component: str) -> GaugeRecorder: ...
    def in_flight(self, component: str) -> GaugeRecorder: ...
    def conductor_requests(self) -> ConductorRequestsRecorder: ...

def register_states(members: list[AppState]) -> None: ...
def init(
    tracker: Tracker,
    rank: int | None = None,
    service_name: str | None = None,
    gpu_meter: bool = False,
) -> dict[str, Any]: ...
def forget_after_fork() -> None: ...
def flush(timeout: float = 5.0) -> bool: ...
def shutdown(timeout: float = 10.0) -> bool: ...
def running() -> bool: ...

# The engine catalog (higgsmeter.catalog): the families as
# (name, kind, help, labels, buckets) tuples, in the catalog's order.
_FamilyRow: TypeAlias = tuple[str, str, str, tuple[str, ...], tuple[float, ...]]
CONDUCTOR_REQUEST_STATES: tuple[str, ...]
STATUS_INTERVAL_S: float
TRANSFER_API_SERVER: str

def engine_families() -> tuple[list[_FamilyRow], list[_FamilyRow]]:
    """(WORKER_FAMILIES, STATUS_FAMILIES) of the Rust catalog."""

# The lab agent's session counters (higgsmeter.lab).
SESSION_GPU_ACTIVE_UTIL_THRESHOLD: float
SESSION_SUBJECT_FIELD: str
SESSION_WINDOW_BUCKETS: tuple[str, ...]
SESSION_SLEAP_PROCESSES: tuple[str, ...]

@final
class SessionExport:
    """The session families of one ``SessionCounters`` dataclass on the running
    pipeline's meter (``higgsmeter.lab.export``)."""

    def __new__(cls, c: SessionCounters) -> SessionExport:
        """Registers the families, reporting ``c`` as it is now; ``RuntimeError`` when
        no pipeline exports metrics."""
    def publish(self, c: SessionCounters) -> None:
        """Makes ``c``'s fields what the next export reports."""

def configured_exports() -> dict[str, bool]:
    """What the pipeline would export (``otlp``, ``prometheus``, ``traces``), from the
    environment, without starting anything; ``ConfigError`` on a bad setting."""

def call_in_state(
    tracker: Tracker,
    state: AppState,
    operation: str,
    func: Callable[..., _T],
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
) -> _T:
    """Calls ``func(*args, **kwargs)`` in ``state`` with ``operation`` on ``tracker``
    (``@track_state`` on a plain function): the state opens before the call and closes
    after it, whether it returns or raises."""

def session_apply(c: SessionCounters, s: Sample, elapsed: int, seen: list[str]) -> bool:
    """Applies sample ``s`` to the ``SessionCounters`` dataclass ``c`` with the Rust
    counters, as the seed's apply_sample; False (nothing changed) when a value is not
    one the Rust counters hold exactly."""
