"""The package version, in a module of its own so that `--version`, `--help` and result files read it without
importing torch (pyproject.toml says the same; `tests/test_layout.py` checks)."""

VERSION = "0.1.0"
