"""higgsmeter.catalog against the serving engine's catalog as its documentation prints
it (the seed, vendored at sdk/catalog/tests/seed/002_383760d4258609cb.txt).

The seed text is the module's rendered documentation: each module attribute is printed
as ``- mstar.observability.catalog.NAME[: TYPE] = REPR#`` and the class as
``- class mstar.observability.catalog.Family(SIGNATURE)[source]#``. Those lines are
plain Python: the test rebuilds the seed's module from them (a dataclass with the
seed's signature, then every assignment, exec'd in a namespace) and compares every
entry and constant with ours, field by field and repr by repr.
"""

import dataclasses
import inspect
import math
import re
import sys
import types

import pytest
from higgsmeter import catalog
from higgsmeter.catalog import Family
from support import repo_root

SEED = repo_root() / 'sdk' / 'catalog' / 'tests' / 'seed' / '002_383760d4258609cb.txt'
MODULE = 'mstar.observability.catalog'
CLASS_LINE = re.compile(r'^- class ' + re.escape(MODULE) + r'\.Family\((?P<sig>.*)\)\[source\]#$')
ATTR_LINE = re.compile(
    r'^- '
    + re.escape(MODULE)
    + r'\.(?P<name>[A-Z_][A-Z0-9_]*)(?P<annotation>: [^=]+)? = (?P<value>.*)#$'
)


def _seed_lines():
    signature, attributes = None, []
    for raw in SEED.read_text(encoding='utf-8').splitlines():
        line = raw.strip()
        if m := CLASS_LINE.match(line):
            signature = m.group('sig')
        elif m := ATTR_LINE.match(line):
            attributes.append((m.group('name'), m.group('annotation') or '', m.group('value')))
    assert signature is not None, 'the seed prints the Family class'
    return signature, attributes


SEED_SIGNATURE, SEED_ATTRIBUTES = _seed_lines()
SEED_REPRS = {name: value for name, _, value in SEED_ATTRIBUTES}


def _seed_module():
    """The seed's module, rebuilt from its documentation: Family from the printed
    signature, then each printed assignment."""
    scope = {}
    exec(f'def signature({SEED_SIGNATURE}): pass', scope)
    params = inspect.signature(scope['signature']).parameters
    body = [
        f'    {p.name}: {p.annotation}'
        + ('' if p.default is inspect.Parameter.empty else f' = {p.default!r}')
        for p in params.values()
    ]
    source = '\n'.join(
        [
            'from __future__ import annotations',
            'from dataclasses import dataclass',
            '@dataclass(frozen=True)',
            'class Family:',
            *body,
            *(f'{name}{annotation} = {value}' for name, annotation, value in SEED_ATTRIBUTES),
        ]
    )
    # A module of its own (dataclasses look string annotations up in sys.modules).
    module = types.ModuleType('seed_mstar_observability_catalog')
    sys.modules[module.__name__] = module
    exec(compile(source, str(SEED), 'exec'), module.__dict__)
    return module.__dict__


SEED_MODULE = _seed_module()
FAMILY_GROUPS = ['WORKER_FAMILIES', 'STATUS_FAMILIES']
CONSTANTS = [name for name, _, _ in SEED_ATTRIBUTES if name not in FAMILY_GROUPS]


def test_the_seed_defines_what_we_expect_to_compare():
    assert sorted(SEED_REPRS) == sorted(
        [
            'CONDUCTOR_REQUEST_STATES',
            'STATUS_FAMILIES',
            'STATUS_INTERVAL_S',
            'TRANSFER_API_SERVER',
            'WORKER_FAMILIES',
        ]
    )
    assert len(SEED_MODULE['WORKER_FAMILIES']) == 11
    assert len(SEED_MODULE['STATUS_FAMILIES']) == 13


def test_every_seed_attribute_is_in_the_module():
    for name in SEED_REPRS:
        assert hasattr(catalog, name), name
        assert name in catalog.__all__, name


def test_family_has_the_seed_signature_fields_and_repr():
    # (Sphinx prints a class's signature without __init__'s "-> None".)
    signature = inspect.signature(Family).replace(return_annotation=inspect.Signature.empty)
    assert str(signature) == f'({SEED_SIGNATURE})'
    ours = [(f.name, f.type, f.default) for f in dataclasses.fields(Family)]
    theirs = [(f.name, f.type, f.default) for f in dataclasses.fields(SEED_MODULE['Family'])]
    assert ours == theirs
    fam = Family('x', 'gauge', 'help', ('a',))
    assert fam.buckets == ()
    assert repr(fam) == "Family(name='x', kind='gauge', help='help', labels=('a',), buckets=())"
    with pytest.raises(dataclasses.FrozenInstanceError):
        fam.name = 'y'
    assert hash(fam) == hash(Family('x', 'gauge', 'help', ('a',)))


@pytest.mark.parametrize('group', FAMILY_GROUPS)
def test_families_are_the_seeds_entry_by_entry(group):
    ours, theirs = getattr(catalog, group), SEED_MODULE[group]
    assert type(ours) is dict
    assert list(ours) == list(theirs), 'keys and their order'
    for key, seed_family in theirs.items():
        family = ours[key]
        assert type(family) is Family
        assert family.name == key == seed_family.name
        assert family.kind == seed_family.kind
        assert family.kind in ('counter', 'gauge', 'histogram')
        assert family.help == seed_family.help
        assert type(family.labels) is tuple and family.labels == seed_family.labels
        assert all(type(label) is str for label in family.labels)
        assert type(family.buckets) is tuple and family.buckets == seed_family.buckets
        assert all(type(b) is float for b in family.buckets)
        assert (family.kind == 'histogram') == bool(family.buckets)
        assert 'model_name' not in family.labels
        assert repr(family) == repr(seed_family)
    # The whole dict as the seed's documentation prints it, character for character.
    assert repr(ours) == SEED_REPRS[group]


def test_worker_families_are_status_families():
    for key, family in catalog.WORKER_FAMILIES.items():
        assert catalog.STATUS_FAMILIES[key] == family


@pytest.mark.parametrize('name', CONSTANTS)
def test_constants_are_the_seeds(name):
    ours, theirs = getattr(catalog, name), SEED_MODULE[name]
    assert type(ours) is type(theirs)
    assert ours == theirs
    assert repr(ours) == SEED_REPRS[name]


def test_constant_values():
    assert catalog.CONDUCTOR_REQUEST_STATES == ('waiting', 'running', 'draining')
    assert catalog.STATUS_INTERVAL_S == 1.0
    assert catalog.TRANSFER_API_SERVER == 'api_server'


# ---- the API server's prometheus_client families ------------------------------------


prometheus_client = pytest.importorskip('prometheus_client')
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402


def _kind_class(kind):
    return {
        'counter': prometheus_client.Counter,
        'gauge': prometheus_client.Gauge,
        'histogram': prometheus_client.Histogram,
    }[kind]


@pytest.mark.parametrize('group', FAMILY_GROUPS)
def test_prometheus_metrics_have_the_kinds_labels_and_buckets(group):
    registry = prometheus_client.CollectorRegistry()
    families = getattr(catalog, group)
    metrics = catalog.build_prometheus_metrics(families, registry=registry)
    assert list(metrics) == list(families)
    for name, metric in metrics.items():
        family = families[name]
        assert type(metric) is _kind_class(family.kind)
        assert metric._labelnames == ('model_name', *family.labels)
        assert metric._documentation == family.help
        if family.kind == 'histogram':
            assert metric._upper_bounds == [*family.buckets, math.inf]

    # One series each, then the exposition: names, types, help, labels, buckets.
    for name, metric in metrics.items():
        family = families[name]
        child = metric.labels(
            model_name='llama', **{label: f'{label}-v' for label in family.labels}
        )
        if family.kind == 'counter':
            child.inc(3)
        elif family.kind == 'gauge':
            child.set(7)
        else:
            child.observe(family.buckets[0])
    text = prometheus_client.generate_latest(registry).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    for name, family in families.items():
        assert f'# TYPE {name} {family.kind}\n' in text, name
        assert f'# HELP {name} {family.help}\n' in text, name
        # The parser drops a counter's _total from the family's name.
        exposed = parsed[name.removesuffix('_total') if family.kind == 'counter' else name]
        assert (exposed.type, exposed.documentation) == (family.kind, family.help)
        labels = {'model_name': 'llama', **{label: f'{label}-v' for label in family.labels}}
        values = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for sample in exposed.samples
        }
        if family.kind == 'counter':
            assert values[(name, tuple(sorted(labels.items())))] == 3
        elif family.kind == 'gauge':
            assert values[(name, tuple(sorted(labels.items())))] == 7
        else:
            bounds = [float(dict(key[1])['le']) for key in values if key[0] == f'{name}_bucket']
            assert bounds == [*family.buckets, math.inf]
            for bound in bounds:
                le = prometheus_client.utils.floatToGoString(bound)
                key = (f'{name}_bucket', tuple(sorted({**labels, 'le': le}.items())))
                assert values[key] == 1, (name, le)
            assert values[(f'{name}_count', tuple(sorted(labels.items())))] == 1


def test_prometheus_metrics_default_to_the_status_families_and_registry_options():
    metrics = catalog.build_prometheus_metrics(registry=None)
    assert list(metrics) == list(catalog.STATUS_FAMILIES)
    no_model = catalog.build_prometheus_metrics(
        catalog.WORKER_FAMILIES.values(), registry=None, model_name_label=None
    )
    assert no_model['mstar_step_seconds']._labelnames == ('component', 'graph_walk')
    with pytest.raises(ValueError, match='kind'):
        catalog.prometheus_metric(Family('x', 'summary', 'h', ()), registry=None)


def test_prometheus_metrics_register_in_the_default_registry(run_python):
    result = run_python(
        """
        from prometheus_client import REGISTRY, generate_latest
        from higgsmeter.catalog import STATUS_FAMILIES, build_prometheus_metrics

        metrics = build_prometheus_metrics()
        metrics['mstar_conductor_requests'].labels(model_name='m', state='running').set(2)
        print(generate_latest(REGISTRY).decode())
        """
    )
    assert result.returncode == 0, result.stderr
    assert 'mstar_conductor_requests{model_name="m",state="running"} 2.0' in result.stdout
    assert '# TYPE mstar_step_seconds histogram' in result.stdout
