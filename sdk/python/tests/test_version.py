"""The version is written once, in sdk/python/Cargo.toml: the installed package's
metadata and `higgsmeter.__version__` say the same."""

import pathlib
import re
from importlib.metadata import version

import higgsmeter


def test_the_version_is_cargo_toml_s():
    cargo = pathlib.Path(__file__).resolve().parents[1] / 'Cargo.toml'
    written = re.search(r'^version = "([^"]+)"', cargo.read_text(), re.M).group(1)
    assert version('higgsmeter') == written
    assert higgsmeter.__version__ == written
    assert '__version__' in higgsmeter.__all__
