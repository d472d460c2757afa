"""_version.py — the package's version; equals the library's fc_version() (test_python checks)."""
__version__ = "0.2.0"
