"""The one support module of the Python package's tests (``conftest.py`` holds only the
fixtures, which call it). Standard library only, but for ``client_samples``.

- ``clean_env()`` / ``is_setting()``: the environment without any OTel, rank or
  higgsmeter setting (``conftest.py`` clears them from the test process).
- ``current()`` / ``totals()``: the process-wide tracker's current (state, operation),
  and a snapshot's entries as ``{(state, operation): seconds}``.
- ``run_python()``: a snippet in a fresh interpreter with this package, bounded.
- ``client_samples()`` / ``client_sample_values()``: an exposition parsed by
  ``prometheus_client``'s own parser into ``Sample`` rows, or keyed by name and labels.
- ``build_fake_nvml()``: the NVML meter's fake ``libnvidia-ml.so.1``, built with gcc.
- ``repo_root()`` / ``collector_binary()``: the workspace root (found from this file) and
  ``target/debug/higgsmeter-collector`` as cargo built it (``cargo build --workspace
  --bins``, or the test command's ``cargo test --workspace``: never built from here;
  ``HIGGSMETER_COLLECTOR_BIN`` overrides).
- ``Collector``: the collector binary on 127.0.0.1 with port 0 everywhere (the ports it
  bound are read from the one line it prints on start), no checkpointed state, its
  stderr in a temporary file; stopped by its own PID.
- ``scrape()`` / ``parse_prometheus_text()``: a Prometheus text scrape, parsed into
  ``Sample(name, labels, value)`` rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from pathlib import Path

#: Environment variables that configure a worker: every ``OTEL_*`` and
#: ``HIGGSMETER_*`` one and the rank variables.
SETTING_PREFIXES = ('OTEL_', 'HIGGSMETER_')
RANK_VARIABLES = ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE')

#: The collector's configuration for these tests (flags add the receivers and the
#: Prometheus endpoint). A source stays in the gauges and the per-source view for
#: ``stale_after`` after its last push; the workers exit before the test reads the
#: views, so this is well above a test's length.
COLLECTOR_CONFIG = """\
processors:
  higgsmeter:
    expected_interval: 1s
    stale_after: 120s
    forget_after: 1h
    storage: none
"""

#: The command that builds the collector binary these tests start.
BUILD_COMMAND = 'cargo build --workspace --bins'


def is_setting(name: str) -> bool:
    """Whether ``name`` is a variable that configures a worker."""
    return name.startswith(SETTING_PREFIXES) or name in RANK_VARIABLES


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test's environment without any worker setting (``is_setting``), plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not is_setting(k)}
    env.update(extra or {})
    return env


def current():
    """The process-wide tracker's current (state, operation)."""
    from higgsmeter import state_tracker

    return state_tracker._tracker._current_state, state_tracker._tracker._current_operation


def totals(entries) -> dict[tuple[str, str], float]:
    """``{(state, operation): seconds}`` from a snapshot's (or a worker's printed)
    entries, a repeated key summed."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    for state, op, secs in entries:
        out[(state, op)] += secs
    return dict(out)


def run_python(directory: Path, code: str, env=None, timeout: float = 60):
    """Runs the snippet ``code`` (dedented, written to ``directory/snippet.py``) in a
    fresh interpreter with this package and the test's environment plus ``env``;
    returns the completed process (stdout, stderr as text). Bounded in time."""
    script = Path(directory) / 'snippet.py'
    script.write_text(textwrap.dedent(code))
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, str(script)],
        check=False,
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


def client_samples(text: str) -> list[Sample]:
    """Every sample of an exposition, read by ``prometheus_client``'s parser (which
    also checks the text is one it accepts); counter samples keep their ``_total``."""
    from prometheus_client.parser import text_string_to_metric_families

    return [
        Sample(s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def client_sample_values(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """``{(name, sorted labels): value}`` of an exposition (``client_samples``)."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in client_samples(text)}


def build_fake_nvml(directory: Path) -> Path:
    """Builds the NVML meter's fake (``sdk/nvml/tests/fake_nvml/fake_nvml.c``) with gcc
    into ``directory``; returns its ``libnvidia-ml.so.1``."""
    gcc = shutil.which('gcc') or shutil.which('cc')
    assert gcc, 'the GPU meter test builds a fake libnvidia-ml.so.1 with gcc'
    source = repo_root() / 'sdk/nvml/tests/fake_nvml/fake_nvml.c'
    lib = Path(directory) / 'libnvidia-ml.so.1'
    subprocess.run([gcc, '-shared', '-fPIC', '-O2', '-o', str(lib), str(source)], check=True)
    return lib


def repo_root() -> Path:
    """The workspace root: the nearest ancestor of this file with a Cargo.toml that has a
    ``[workspace]`` and a ``collector/`` directory."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        manifest = parent / 'Cargo.toml'
        if (
            manifest.is_file()
            and (parent / 'collector').is_dir()
            and '[workspace]' in manifest.read_text(encoding='utf-8')
        ):
            return parent
    raise RuntimeError(f'no workspace root above {here}')


def collector_binary() -> Path:
    """``HIGGSMETER_COLLECTOR_BIN``, else ``<target>/debug/higgsmeter-collector`` as cargo
    built it; a missing binary is an error that says how to build it (tests never run
    cargo)."""
    override = os.environ.get('HIGGSMETER_COLLECTOR_BIN')
    if override:
        path = Path(override)
        if not path.is_file():
            raise RuntimeError(f'HIGGSMETER_COLLECTOR_BIN={override} is not a file')
        return path
    root = repo_root()
    target = Path(os.environ.get('CARGO_TARGET_DIR') or root / 'target')
    if not target.is_absolute():
        target = root / target
    binary = target / 'debug' / 'higgsmeter-collector'
    if not binary.is_file():
        raise RuntimeError(
            f'{binary} is missing: build it first with `{BUILD_COMMAND}` (the test '
            'command, `cargo test --workspace`, builds it too), or set '
            'HIGGSMETER_COLLECTOR_BIN to a collector built elsewhere'
        )
    return binary


def _line_reader(stream) -> queue.Queue:
    """Lines of ``stream`` (a text pipe) on a queue; ``None`` at end of file."""
    lines: queue.Queue = queue.Queue()

    def pump():
        try:
            for line in stream:
                lines.put(line.rstrip('\n'))
        except (OSError, ValueError):
            pass
        finally:
            lines.put(None)

    threading.Thread(target=pump, name='collector-stdout', daemon=True).start()
    return lines


class Collector:
    """A running ``higgsmeter-collector`` on 127.0.0.1 ports it picked itself."""

    def __init__(self, binary: Path, workdir: Path, start_timeout: float = 60.0):
        self.workdir = workdir
        config = workdir / 'collector.yaml'
        config.write_text(COLLECTOR_CONFIG, encoding='utf-8')
        self._stderr = open(workdir / 'collector.stderr', 'w+b')  # noqa: SIM115 - closed in stop()
        env = dict(os.environ)
        env['RUST_LOG'] = 'info'
        self.process = subprocess.Popen(
            [
                str(binary),
                '--config',
                str(config),
                '--grpc',
                '127.0.0.1:0',
                '--http',
                '127.0.0.1:0',
                '--prometheus',
                '127.0.0.1:0',
                '--storage',
                'none',
            ],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.pid = self.process.pid
        try:
            line = self._listening_line(_line_reader(self.process.stdout), start_timeout)
            addrs = dict(word.split('=', 1) for word in line.split()[2:] if '=' in word)
            self.grpc = addrs['grpc']
            self.http = addrs['http']
            self.prometheus = addrs['prometheus']
            for addr in (self.grpc, self.http, self.prometheus):
                if not addr.startswith('127.0.0.1:'):
                    raise RuntimeError(f'collector listens on {addr}, not 127.0.0.1: {line!r}')
            self._wait_ready(f'http://{self.prometheus}/readyz', start_timeout)
            self._wait_ready(f'http://{self.http}/readyz', start_timeout)
        except BaseException:
            self.stop()
            sys.stdout.write(self.log_section())
            self.close()
            raise

    def _listening_line(self, lines: queue.Queue, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f'no "listening" line from the collector within {timeout} s')
            try:
                line = lines.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(
                    f'the collector exited ({self.process.wait(5)}) before listening'
                )
            if line.startswith('higgsmeter-collector listening'):
                return line

    def _wait_ready(self, url: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f'the collector exited ({self.process.returncode})')
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        return
                    last = r.status
            except (urllib.error.URLError, OSError) as e:
                last = e
            time.sleep(0.1)
        raise RuntimeError(f'{url} not ready within {timeout} s: {last}')

    def otlp_endpoint(self, protocol: str) -> str:
        """The ``OTEL_EXPORTER_OTLP_ENDPOINT`` for ``grpc`` or ``http/protobuf``."""
        return f'http://{self.grpc}' if protocol == 'grpc' else f'http://{self.http}'

    def scrape(self, path: str = '/metrics') -> list[Sample]:
        return parse_prometheus_text(http_get(f'http://{self.prometheus}{path}'))

    def log(self) -> str:
        """What the collector wrote to stderr so far."""
        try:
            self._stderr.flush()
            return (self.workdir / 'collector.stderr').read_text(encoding='utf-8', errors='replace')
        except (OSError, ValueError):
            return '(collector stderr unreadable)'

    def log_section(self) -> str:
        return f'\n----- higgsmeter-collector (pid {self.pid}) stderr -----\n{self.log()}\n-----\n'

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM to the collector's own PID, then SIGKILL after ``timeout``."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
                self.process.wait(10)
        if self.process.stdout is not None:
            with contextlib.suppress(OSError):
                self.process.stdout.close()
        with contextlib.suppress(OSError, ValueError):
            self._stderr.flush()
        return self.process.returncode

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            self._stderr.close()


@contextlib.contextmanager
def collector_running(start_timeout: float = 60.0):
    """A collector in a temporary working directory, stopped (by PID) and removed at the
    end; on an exception its stderr is printed (pytest shows it with the failure)."""
    binary = collector_binary()
    with tempfile.TemporaryDirectory(prefix='higgsmeter-pytest-collector-') as tmp:
        collector = Collector(binary, Path(tmp), start_timeout)
        try:
            yield collector
        except BaseException:
            collector.stop()
            sys.stdout.write(collector.log_section())
            raise
        finally:
            collector.close()


def wait_for(read, done, timeout: float = 15.0, interval: float = 0.1):
    """Calls ``read()`` until ``done(value)`` holds or ``timeout`` seconds pass; returns
    the last value (the caller's assertions say what was missing)."""
    deadline = time.monotonic() + timeout
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(interval)


def settle(collector, ready, names=None, timeout: float = 15.0):
    """Scrapes the collector's two views (``/metrics``, ``/metrics/sources``) until
    ``ready(fleet, sources)`` holds and two scrapes in a row agree (on the families in
    ``names``, or on all), or ``timeout`` seconds pass; returns the last scrape of each."""
    deadline = time.monotonic() + timeout
    previous = None
    while True:
        fleet, sources = collector.scrape('/metrics'), collector.scrape('/metrics/sources')
        view = sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for s in fleet + sources
            if names is None or s.name in names
        )
        if (ready(fleet, sources) and view == previous) or time.monotonic() > deadline:
            return fleet, sources
        previous = view
        time.sleep(0.25)


def http_get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode('utf-8')


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: dict
    value: float

    def label(self, key: str) -> str:
        """A label's value; ``""`` when absent (as Prometheus reads it)."""
        return self.labels.get(key, '')


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?\s*$')
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


def _unescape(value: str) -> str:
    out = []
    i = 0
    while i < len(value):
        c = value[i]
        if c == '\\' and i + 1 < len(value):
            nxt = value[i + 1]
            out.append({'n': '\n', '\\': '\\', '"': '"'}.get(nxt, '\\' + nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return ''.join(out)


def _float(text: str) -> float:
    special = {'+Inf': float('inf'), '-Inf': float('-inf'), 'NaN': float('nan')}
    return special[text] if text in special else float(text)


def parse_prometheus_text(text: str) -> list[Sample]:
    """Samples of a Prometheus text exposition (0.0.4); comments skipped."""
    samples = []
    for line in text.splitlines():
        if not line.strip() or line.startswith('#'):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise ValueError(f'not a Prometheus sample line: {line!r}')
        name, body, value = m.groups()
        labels = {}
        if body:
            pos = 0
            while pos < len(body):
                lm = _LABEL.match(body, pos)
                if not lm:
                    raise ValueError(f'bad labels in {line!r}')
                labels[lm.group(1)] = _unescape(lm.group(2))
                pos = lm.end()
        samples.append(Sample(name, labels, _float(value)))
    return samples
