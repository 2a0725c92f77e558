"""Moved to `output_folders` (output folders and their marker); this path imports it, with a FutureWarning, for a release."""

from .public import moved_module

moved_module(__name__)
