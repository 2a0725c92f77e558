"""The error every data reader raises for input it refuses."""


class DataError(ValueError):
    """A dataset that cannot be trained on: a missing column, a malformed row, an unknown source, a broken file."""
