"""fork(): a child never hangs on a lock the parent's threads held at the fork (exporter
threads resolving operation names, flushes holding the pipeline's slot), never exports
the parent's totals, and can start a pipeline of its own."""

CHILDREN = 20

CODE = f"""
import os, sys, threading, time
from higgsmeter import AppState, _core, enable_tracker, state_tracker

enable_tracker()
stop = threading.Event()

def hammer():
    while not stop.is_set():
        with state_tracker.scope(AppState.CPU, 'parent_hammer'):
            pass

def flusher():
    # Flush threads take the pipeline's slot (the GIL released meanwhile).
    while not stop.is_set():
        _core.flush(1.0)

threads = [threading.Thread(target=hammer) for _ in range(2)]
threads.append(threading.Thread(target=flusher))
for t in threads:
    t.start()
time.sleep(0.05)
pids = []
for _ in range({CHILDREN}):
    pid = os.fork()
    if pid == 0:
        ok = not state_tracker._tracker._enabled            # off until enabled here
        with state_tracker.scope(AppState.GPU, 'before_enable'):   # a no-op, never a hang
            pass
        enable_tracker()
        with state_tracker.scope(AppState.GPU, 'child'):
            pass
        ops = {{op for _, op, _ in state_tracker.snapshot()[0]}}
        ok = ok and 'child' in ops and 'parent_hammer' not in ops and 'before_enable' not in ops
        os._exit(0 if ok else 3)
    pids.append(pid)
    time.sleep(0.01)

deadline = time.monotonic() + 30
codes = {{}}
while pids and time.monotonic() < deadline:
    for pid in list(pids):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            codes[pid] = os.waitstatus_to_exitcode(status)
            pids.remove(pid)
    time.sleep(0.01)
for pid in pids:  # hung: ours to stop
    os.kill(pid, 9)
    os.waitpid(pid, 0)
stop.set()
for t in threads:
    t.join()
print(len(pids), sorted(set(codes.values())))
"""


def test_forked_children_never_hang(run_python):
    out = run_python(
        CODE,
        env={
            # Exporter threads read the tracker every 20 ms while the children fork.
            'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:9',
            'OTEL_METRIC_EXPORT_INTERVAL': '20',
            'OTEL_EXPORTER_OTLP_TIMEOUT': '200',
        },
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    hung, codes = out.stdout.strip().split(' ', 1)
    assert hung == '0', 'children hung after fork'
    assert codes == '[0]', out.stdout
