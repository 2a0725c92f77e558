"""Moved to `judge_registry` (`JUDGES` and `JudgeKind`: the judges' registry); this path imports it, with a FutureWarning, for a release."""

from ...utils.public import moved_module

moved_module(__name__)
