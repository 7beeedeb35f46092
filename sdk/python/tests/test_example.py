"""The example Python worker (examples/python/worker.py) runs as its docstring says."""

import subprocess
import sys

from support import repo_root

EXAMPLE = repo_root() / 'examples/python/worker.py'


def test_example_worker_runs_and_accounts_its_time():
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), '--duration', '0.5'],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env={'PATH': '/usr/bin:/bin', 'RANK': '0'},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith('rank 0: ')
    text = out.stdout
    for needle in (
        'model_loading',
        'Storage.fetch_metadata',
        'upload_result',
        'inference',
        'handle_request',
        'async_inference',
        'consuming_messages',
    ):
        assert needle in text, (needle, text)
    total, elapsed = lines[-1].split()[1], lines[-1].split()[5]
    assert abs(float(total) - float(elapsed)) < 1e-5
