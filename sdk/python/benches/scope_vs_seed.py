"""A state scope and a @track_state call from Python: this package against the Python
higgsmeter 0.1.1 (the seed), measured in the same run.

    .venv/bin/python sdk/python/benches/scope_vs_seed.py [--seed-path DIR]

Each side runs in fresh interpreters: ours from the installed package, the seed from
DIR (a `pip install --target DIR higgsmeter==0.1.1`; default `.venv/seed`, which
`.ci/setup` makes). The two alternate, ROUNDS times each (default 5), so that both see
the same load on a shared machine; each round times 5 repeats of 5,000 iterations. Prints
the median over all repeats, in nanoseconds per operation, and the ratio seed / ours.
"""

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

BODY = r"""
import json, statistics, timeit
from higgsmeter import AppState, enable_tracker, state_tracker, track_state
enable_tracker(rank=0)
N = 5_000

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
    out[name] = [t / N * 1e9 for t in timeit.repeat(fn, number=N, repeat=5)]
import higgsmeter
out["version"] = higgsmeter.__version__
print(json.dumps(out))
"""


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
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    names = ('scope', 'track_state_call', 'set_state')
    ours = {name: [] for name in names}
    seed = {name: [] for name in names}
    for _ in range(args.rounds):
        for side, path in ((ours, None), (seed, args.seed_path)):
            result = run(path)
            if path:
                assert result['version'] == '0.1.1', f'{path} holds higgsmeter {result["version"]}'
            for name in names:
                side[name].extend(result[name])
    print(f'{"operation":<18} {"seed 0.1.1 ns":>14} {"ours ns":>10} {"seed/ours":>10}')
    for name in names:
        s, o = statistics.median(seed[name]), statistics.median(ours[name])
        print(f'{name:<18} {s:>14.0f} {o:>10.0f} {s / o:>9.1f}x')


if __name__ == '__main__':
    main()
