"""The study's clock: every duration it plans with or records is read here, so that a test can replace it."""

import time


def now() -> float:
    """Seconds (monotonic)."""
    return time.monotonic()
