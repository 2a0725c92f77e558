"""What every readout shares: the error raised when a model's layers cannot be read out as the readout assumes."""

from __future__ import annotations


class ReadoutError(ValueError):
    """The model's readout (final norm, LM head, classification head) could not be found or does not reproduce the
    model's own output."""
