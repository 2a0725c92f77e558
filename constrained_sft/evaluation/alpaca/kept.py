"""Moved to `verdict_journal` (the journal of kept verdicts); this path imports it, with a FutureWarning, for a release."""

from ...utils.public import moved_module

moved_module(__name__)
