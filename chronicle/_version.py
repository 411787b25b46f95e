"""The package version, read by the build and by ``client.version`` metadata."""

__version__ = "0.1.0"
