"""Moved to `answer_folders` (`AnswersFolder`, `VerdictsFolder`); this path imports it, with a FutureWarning, for a release."""

from ...utils.public import moved_module

moved_module(__name__)
