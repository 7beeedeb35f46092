"""The engine catalog from Python: step and transfer scopes and typed recorders,
scraped from the Rust Prometheus endpoint of a worker in a subprocess."""

import pytest
from higgsmeter.engine import EngineRecorders
from support import client_sample_values as samples


def test_recorders_and_scopes_export_the_catalog_families(run_python):
    out = run_python(
        """
        import time, urllib.request
        from higgsmeter import AppState, enable_tracker, state_tracker
        from higgsmeter.engine import EngineRecorders, step, transfer
        enable_tracker()
        rec = EngineRecorders()
        with state_tracker.scope(AppState.GPU, 'decode'):
            for _ in range(3):
                with step('decoder', 'decode', batch_size=8):
                    time.sleep(0.001)
            with transfer('prefill', 'decoder', 'nvlink', bytes=4096):
                pass
            with step('decoder', 'prefill') as s:
                s.record(32)
        rec.kv_pages('decoder', 'gpu0').set(4096, 1024, 512)
        rec.prefix_cache('decoder').record_lookup(512, 384)
        rec.pending_steps('decoder').set(3)
        rec.conductor_requests().set(4, 8, 0)
        rec.step('decoder', 'decode').record(0.5, 16)
        addr = state_tracker.pipeline['prometheus_addr']
        print(urllib.request.urlopen(f'http://{addr}/metrics', timeout=10).read().decode())
        """,
        env={'HIGGSMETER_PROMETHEUS_ADDR': '127.0.0.1:0'},
    )
    assert out.returncode == 0, out.stderr
    s = samples(out.stdout)

    def value(name, **labels):
        hits = [
            v
            for (n, ls), v in s.items()
            if n == name and all((k, val) in ls for k, val in labels.items())
        ]
        assert len(hits) == 1, (name, labels, [k for k in s if k[0] == name])
        return hits[0]

    assert value('mstar_step_seconds_count', component='decoder', graph_walk='decode') == 4
    assert value('mstar_batch_size_sum', component='decoder', graph_walk='decode') == 8 * 3 + 16
    assert value('mstar_batch_size_sum', component='decoder', graph_walk='prefill') == 32
    assert value('mstar_transfers_total', src='prefill', dst='decoder', transport='nvlink') == 1
    assert (
        value('mstar_transfer_bytes_total', src='prefill', dst='decoder', transport='nvlink')
        == 4096
    )
    assert value('mstar_kv_pages_used', component='decoder', resource='gpu0') == 1024
    assert value('mstar_prefix_cache_hit_tokens_total', component='decoder') == 384
    assert value('mstar_component_pending_steps', component='decoder') == 3
    assert value('mstar_conductor_requests', state='running') == 8


def test_a_label_the_catalog_does_not_allow_is_a_value_error():
    rec = EngineRecorders()
    with pytest.raises(ValueError):
        rec.kv_pages('', 'gpu0')
