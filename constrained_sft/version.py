"""The package version, its one written form: pyproject.toml reads it from here (`dynamic`, setuptools' `attr`,
without importing the package), and `--version`, `--help` and result files read it without importing torch."""

VERSION = "0.1.0"
