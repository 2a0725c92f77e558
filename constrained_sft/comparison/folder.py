"""Moved to `comparison_folder` (a comparison's folder, checked and marked); this path imports it, with a FutureWarning, for a release."""

from ..utils.public import moved_module

moved_module(__name__)
