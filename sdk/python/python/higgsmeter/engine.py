"""The serving-engine catalog from Python: the same families, labels and buckets as
the Rust SDK's ``EngineRecorders`` (``mstar_*``), recorded by the Rust core.

::

    from higgsmeter import enable_tracker
    from higgsmeter.engine import EngineRecorders, step, transfer

    enable_tracker()                      # starts the pipeline the recorders export through
    with step('decoder', 'decode', batch_size=8):
        forward()                         # -> mstar_step_seconds, mstar_batch_size
    with transfer('prefill', 'decoder', 'nvlink', bytes=1 << 20):
        copy()                            # -> mstar_transfer_seconds, _transfers_total, _bytes_total

    rec = EngineRecorders()               # after enable_tracker
    rec.kv_pages('decoder', 'gpu0').set(total=4096, used=1024, cached=512)
    rec.prefix_cache('decoder').record_lookup(query_tokens=512, hit_tokens=384)
    rec.pending_steps('decoder').set(3)
    rec.conductor_requests().set(waiting=4, running=8, draining=0)

A label value the catalog does not allow is a ``ValueError`` when the recorder is made.
Step and transfer scopes are spans: with ``OTEL_TRACES_EXPORTER=otlp`` they are also
exported as traces, nested under the state scopes around them.
"""

from higgsmeter._core import ConductorRequestsRecorder
from higgsmeter._core import EngineRecorders
from higgsmeter._core import GaugeRecorder
from higgsmeter._core import KvPagesRecorder
from higgsmeter._core import PrefixCacheRecorder
from higgsmeter._core import StepRecorder
from higgsmeter._core import TransferRecorder
from higgsmeter._core import step
from higgsmeter._core import transfer

__all__ = [
    'ConductorRequestsRecorder',
    'EngineRecorders',
    'GaugeRecorder',
    'KvPagesRecorder',
    'PrefixCacheRecorder',
    'StepRecorder',
    'TransferRecorder',
    'step',
    'transfer',
]
