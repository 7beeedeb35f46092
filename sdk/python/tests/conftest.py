"""The fixtures; the helpers they and the tests use are in ``support.py``. The in-process
tests use the process-wide tracker, as users do; the settings that would make it export
somewhere are cleared so nothing leaves this process (tests that need a pipeline run
workers in subprocesses)."""

import os

import pytest
import support

for _name in list(os.environ):
    if _name == 'HIGGSMETER_COLLECTOR_BIN':  # a collector built elsewhere (test_ranks)
        continue
    if support.is_setting(_name):
        del os.environ[_name]


@pytest.fixture
def run_python(tmp_path):
    """Runs a Python snippet in a fresh interpreter with this package; returns the
    completed process (stdout, stderr as text). Bounded in time."""

    def run(code, env=None, timeout=60):
        return support.run_python(tmp_path, code, env=env, timeout=timeout)

    return run
