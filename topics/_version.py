"""The package version, in a module of its own so the HTTP client can name it without
importing the package that lazily imports the client (no import cycle)."""

__version__ = "0.1.0"
