"""Moved to `written_record` (the record of what a command wrote); this path imports it, with a FutureWarning, for a release."""

from .public import moved_module

moved_module(__name__)
