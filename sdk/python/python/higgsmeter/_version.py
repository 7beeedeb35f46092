"""The package version (the seed's API version this package implements, plus ours):
sdk/python/Cargo.toml's, the one place it is written, read from the installed
package's metadata."""

from importlib.metadata import version as _installed_version

__version__ = version = _installed_version('higgsmeter')
__version_tuple__ = version_tuple = tuple(
    int(part) if part.isdigit() else part for part in version.split('.')
)
