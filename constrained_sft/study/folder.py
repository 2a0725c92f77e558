"""Moved to `study_folder` (`StudyFolder`); this path imports it, with a FutureWarning, for a release."""

from ..utils.public import moved_module

moved_module(__name__)
