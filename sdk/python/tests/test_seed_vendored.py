"""The vendored seed test file is the sdist's, unmodified."""

import hashlib
import pathlib

# sha256 of tests/test_tracker.py in higgsmeter-0.1.1.tar.gz from PyPI.
SEED_TEST_SHA256 = '2cef2904ab6a1dc971e9a0cd95a272d402a3988cfc551f1add2ddbedef319c46'


def test_seed_test_file_is_unmodified():
    path = pathlib.Path(__file__).parent / 'seed' / 'test_tracker.py'
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SEED_TEST_SHA256
    assert (path.parent / 'LICENSE').read_text().startswith('MIT License')
