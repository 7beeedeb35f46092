"""The serving engine's metric catalog (``mstar.observability.catalog``), from Rust.

A drop-in for the engine's own module: ``Family(name, kind, help, labels, buckets=())``,
``WORKER_FAMILIES``, ``STATUS_FAMILIES``, ``CONDUCTOR_REQUEST_STATES``,
``STATUS_INTERVAL_S`` and ``TRANSFER_API_SERVER``, with the seed's names, order, values
and reprs. Metric families whose values come from a process other than the API server:
the conductor and workers record by these names, and the API server builds the
Prometheus families from the same entries (:func:`build_prometheus_metrics`), so the
names cannot drift. ``model_name`` is added by the API server and is not listed in
``labels``.

The entries are built at import from the Rust catalog (``higgsmeter-catalog``, the list
the Rust SDK and the collector use), so Python and Rust cannot drift either::

    from higgsmeter.catalog import STATUS_FAMILIES, build_prometheus_metrics

    fam = STATUS_FAMILIES['mstar_step_seconds']
    fam.kind, fam.labels            # ('histogram', ('component', 'graph_walk'))
    metrics = build_prometheus_metrics(STATUS_FAMILIES)   # in prometheus_client.REGISTRY
    metrics['mstar_step_seconds'].labels(model_name='llama', component='decoder',
                                         graph_walk='decode').observe(0.012)
"""

from __future__ import annotations

from dataclasses import dataclass

from higgsmeter import _core


@dataclass(frozen=True)
class Family:
    """One metric family: its Prometheus name, kind (``counter``, ``gauge`` or
    ``histogram``), help text, label names (``model_name`` not included) and, for a
    histogram, its bucket upper bounds."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()


def _families(rows) -> dict[str, Family]:
    return {
        name: Family(name, kind, help, tuple(labels), tuple(buckets))
        for name, kind, help, labels, buckets in rows
    }


_WORKER_ROWS, _STATUS_ROWS = _core.engine_families()

#: How often the conductor sends its status message while metrics are on.
STATUS_INTERVAL_S: float = _core.STATUS_INTERVAL_S

#: The ``state`` label values of ``mstar_conductor_requests``. ``waiting``: queued at
#: ``max_concurrent_requests``, not dispatched yet. ``running``: dispatched to workers
#: and not finished. ``draining``: finished (completed, aborted or failed) and waiting
#: for every reader to release its outputs before the workers free its state; it still
#: counts toward ``max_concurrent_requests``.
CONDUCTOR_REQUEST_STATES: tuple[str, ...] = tuple(_core.CONDUCTOR_REQUEST_STATES)

#: ``src``/``dst`` of a tensor edge into or out of the graph where the data worker (a
#: thread of the API server) sends the request's inputs and reads its results. Every
#: other endpoint is a graph node name.
TRANSFER_API_SERVER: str = _core.TRANSFER_API_SERVER

#: Families the engine workers report to the conductor (``WorkerStatus``); the
#: conductor sums the workers' series and forwards them in its status message.
WORKER_FAMILIES: dict[str, Family] = _families(_WORKER_ROWS)

#: Families the conductor's status message carries, exported from the latest message.
STATUS_FAMILIES: dict[str, Family] = _families(_STATUS_ROWS)

del _WORKER_ROWS, _STATUS_ROWS

#: The label the API server adds to every family (not listed in ``Family.labels``).
MODEL_NAME_LABEL = 'model_name'

_DEFAULT_REGISTRY = object()


def prometheus_metric(family, *, registry=_DEFAULT_REGISTRY, model_name_label=MODEL_NAME_LABEL):
    """The ``prometheus_client`` metric of one :class:`Family`: a ``Counter``, ``Gauge``
    or ``Histogram`` as its ``kind`` says (a histogram with its ``buckets``), with label
    names ``(model_name, *family.labels)``.

    ``registry``: where to register it; ``prometheus_client.REGISTRY`` unless given,
    ``None`` for none. ``model_name_label``: the label the API server adds (``None`` to
    add none). A counter's name keeps its ``_total`` in the exposition
    (``prometheus_client`` strips it from the metric object's name and writes it back).
    Raises ``ValueError`` for an unknown kind; needs ``prometheus_client`` installed.
    """
    from prometheus_client import REGISTRY
    from prometheus_client import Counter
    from prometheus_client import Gauge
    from prometheus_client import Histogram

    if registry is _DEFAULT_REGISTRY:
        registry = REGISTRY
    labels = tuple(family.labels)
    if model_name_label is not None:
        labels = (model_name_label, *labels)
    if family.kind == 'counter':
        return Counter(family.name, family.help, labels, registry=registry)
    if family.kind == 'gauge':
        return Gauge(family.name, family.help, labels, registry=registry)
    if family.kind == 'histogram':
        return Histogram(
            family.name, family.help, labels, registry=registry, buckets=tuple(family.buckets)
        )
    raise ValueError(
        f'family {family.name!r} has kind {family.kind!r}: expected counter, gauge or histogram'
    )


def build_prometheus_metrics(
    families=None, *, registry=_DEFAULT_REGISTRY, model_name_label=MODEL_NAME_LABEL
):
    """Builds the ``prometheus_client`` metrics of ``families`` (a ``{name: Family}``
    dict such as :data:`STATUS_FAMILIES`, the default, or any iterable of
    :class:`Family`) as the API server does: ``{name: Counter | Gauge | Histogram}`` in
    the families' order, each with ``model_name`` added as its first label. See
    :func:`prometheus_metric` for ``registry`` and ``model_name_label``."""
    if families is None:
        families = STATUS_FAMILIES
    if isinstance(families, dict):
        families = families.values()
    return {
        family.name: prometheus_metric(family, registry=registry, model_name_label=model_name_label)
        for family in families
    }


__all__ = [
    'CONDUCTOR_REQUEST_STATES',
    'MODEL_NAME_LABEL',
    'STATUS_FAMILIES',
    'STATUS_INTERVAL_S',
    'TRANSFER_API_SERVER',
    'WORKER_FAMILIES',
    'Family',
    'build_prometheus_metrics',
    'prometheus_metric',
]
