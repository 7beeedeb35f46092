"""A state scope and a @track_state call from Python: this package against the Python
higgsmeter 0.1.1 (the seed), measured in the same run.

    .venv/bin/python sdk/python/benches/scope_vs_seed.py [--seed-path DIR]

Each side runs in a fresh interpreter: ours from the installed package, the seed from
DIR (a `pip install --target DIR higgsmeter==0.1.1`; default `.venv/seed`, which
`.ci/setup` makes). Prints the median of 7 repeats of 20,000 iterations each, in
nanoseconds per operation, and the ratio seed / ours.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

BODY = r'''
import json, statistics, timeit
from higgsmeter import AppState, enable_tracker, state_tracker, track_state
enable_tracker(rank=0)
N = 20_000

def scope():
    with state_tracker.scope(AppState.GPU, "inference"):
        pass

@track_state(AppState.IO)
def decorated():
    pass

flip = [AppState.IDLE, AppState.IO]
def set_state(i=[0]):
    i[0] += 1
    state_tracker.set_state(flip[i[0] & 1], "waiting_for_work")

out = {}
for name, fn in [("scope", scope), ("track_state_call", decorated), ("set_state", set_state)]:
    runs = timeit.repeat(fn, number=N, repeat=7)
    out[name] = statistics.median(runs) / N * 1e9
import higgsmeter
out["version"] = higgsmeter.__version__
print(json.dumps(out))
'''


def run(pythonpath):
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(('OTEL_', 'HIGGSMETER_')):
            del env[name]
    if pythonpath:
        env['PYTHONPATH'] = pythonpath
    out = subprocess.run(
        [sys.executable, '-c', BODY], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def main():
    root = pathlib.Path(__file__).resolve().parents[3]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seed-path', default=str(root / '.venv' / 'seed'))
    args = parser.parse_args()
    ours = run(None)
    seed = run(args.seed_path)
    assert seed['version'] == '0.1.1', f'the seed path holds higgsmeter {seed["version"]}'
    print(f'{"operation":<18} {"seed 0.1.1 ns":>14} {"ours ns":>10} {"seed/ours":>10}')
    for name in ('scope', 'track_state_call', 'set_state'):
        print(f'{name:<18} {seed[name]:>14.0f} {ours[name]:>10.0f} {seed[name] / ours[name]:>9.1f}x')


if __name__ == '__main__':
    main()
