"""The package version, kept where every layer may read it (the root package re-exports it)."""

__version__ = "0.1.0"
