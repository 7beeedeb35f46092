"""The NVML GPU meter from Python (`enable_tracker(gpu_meter=True)`): the real
nvml-wrapper code path in the Rust core against a fake `libnvidia-ml.so.1` (the C
fake of sdk/nvml/tests, built here with gcc), scraped from the Rust /metrics."""

import pytest
from support import build_fake_nvml
from support import client_samples


@pytest.fixture(scope='module')
def fake_nvml(tmp_path_factory):
    return build_fake_nvml(tmp_path_factory.mktemp('nvml'))


WORKER = """
import time, urllib.request
from higgsmeter import AppState, enable_tracker, state_tracker
enable_tracker(gpu_meter=True)
assert state_tracker.pipeline['gpu_meter'], state_tracker.pipeline
with state_tracker.scope(AppState.GPU, 'kernel'):
    time.sleep(1.3)  # past the meter's 1 s tick, which samples the worker's state
addr = state_tracker.pipeline['prometheus_addr']
print(urllib.request.urlopen(f'http://{addr}/metrics', timeout=10).read().decode())
"""


def test_gpu_meter_reads_the_fake_driver(run_python, fake_nvml):
    out = run_python(
        WORKER,
        env={
            'HIGGSMETER_PROMETHEUS_ADDR': '127.0.0.1:0',
            'HIGGSMETER_NVML_LIBRARY': str(fake_nvml),
            'FAKE_NVML_DEVICE_COUNT': '2',
            'FAKE_NVML_UTIL_0': '87',
            'FAKE_NVML_TEMP_1': '66',
        },
    )
    assert out.returncode == 0, out.stderr
    utilization, temperature, active = {}, {}, {}
    for s in client_samples(out.stdout):
        gpu = s.labels.get('hw_gpu_index')
        if s.name == 'hw_gpu_utilization' and s.labels.get('hw_gpu_task') == 'general':
            utilization[gpu] = s.value
        elif s.name == 'hw_gpu_temperature':
            temperature[gpu] = s.value
        # (prometheus_client's parser names counter samples with _total)
        elif s.name == 'hw_gpu_session_active_time_total' and s.labels.get('state') == 'gpu':
            active[gpu] = s.value
    # The fake's readings, per device: GPU 0 at 87 %, GPU 1 at its default 51 %.
    assert utilization == {'0': 0.87, '1': 0.51}, out.stdout[:3000]
    assert temperature == {'0': 40, '1': 66}
    # GPU-active time is split by the worker's state: the GPU scope's time is there.
    assert set(active) == {'0', '1'} and all(v > 0 for v in active.values())


def test_without_a_driver_the_worker_runs_on(run_python, tmp_path):
    out = run_python(
        """
        from higgsmeter import AppState, enable_tracker, state_tracker
        enable_tracker(gpu_meter=True)
        with state_tracker.scope(AppState.GPU, 'x'):
            pass
        print(state_tracker.pipeline['gpu_meter'])
        """,
        env={'HIGGSMETER_NVML_LIBRARY': str(tmp_path / 'missing.so.1')},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'False'
