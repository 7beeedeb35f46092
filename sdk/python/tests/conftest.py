"""Shared fixtures. The in-process tests use the process-wide tracker, as users do; the
settings that would make it export somewhere are cleared so nothing leaves this process
(tests that need a pipeline run workers in subprocesses)."""

import os
import subprocess
import sys
import textwrap

import pytest

for _name in list(os.environ):
    if _name == 'HIGGSMETER_COLLECTOR_BIN':  # a collector built elsewhere (test_ranks)
        continue
    if _name.startswith(('OTEL_', 'HIGGSMETER_')) or _name in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK'):
        del os.environ[_name]


def totals(entries):
    """{(state, operation): seconds} from a snapshot's entries."""
    return {(state, op): seconds for state, op, seconds in entries}


@pytest.fixture
def run_python(tmp_path):
    """Runs a Python snippet in a fresh interpreter with this package; returns the
    completed process (stdout, stderr as text). Bounded in time."""

    def run(code, env=None, timeout=60):
        script = tmp_path / 'snippet.py'
        script.write_text(textwrap.dedent(code))
        full_env = {k: v for k, v in os.environ.items()}
        full_env.update(env or {})
        return subprocess.run(
            [sys.executable, str(script)],
            check=False,
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
        )

    return run
