"""The package version (the seed's API version this package implements, plus ours)."""

__version__ = version = '0.2.0'
__version_tuple__ = version_tuple = (0, 2, 0)
