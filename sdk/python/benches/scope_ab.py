"""An A/B of this package against an older build of it, with the seed beside them:
``scope_vs_seed.py``'s body in fresh interpreters that alternate seed / old / new.

    .venv/bin/python sdk/python/benches/scope_ab.py --old DIR [--seed-path DIR] [--rounds N]

``--old`` is a directory holding an older ``higgsmeter`` package (e.g. a wheel unpacked
with ``python -m zipfile -e OLD.whl DIR``), put first on ``PYTHONPATH``; "new" is the
package installed in this interpreter. Prints the medians in nanoseconds per operation,
new / old, and the seed's time over each.
"""

import argparse
import pathlib
import statistics

from scope_vs_seed import run

NAMES = ('scope', 'track_state_call', 'set_state')


def main():
    root = pathlib.Path(__file__).resolve().parents[3]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--old', required=True, help='a directory holding the older package')
    parser.add_argument('--seed-path', default=str(root / '.venv' / 'seed'))
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    sides = {'seed': args.seed_path, 'old': args.old, 'new': None}
    medians = {side: {name: [] for name in NAMES} for side in sides}
    for _ in range(args.rounds):
        for side, path in sides.items():
            result = run(path)
            for name in NAMES:
                medians[side][name].extend(result[name])
    print(f'{"operation":<18} {"seed":>8} {"old":>8} {"new":>8} {"new/old":>8} {"seed/new":>9}')
    for name in NAMES:
        s, o, n = (statistics.median(medians[k][name]) for k in ('seed', 'old', 'new'))
        print(f'{name:<18} {s:8.0f} {o:8.0f} {n:8.0f} {n / o:8.2f} {s / n:8.1f}x')


if __name__ == '__main__':
    main()
