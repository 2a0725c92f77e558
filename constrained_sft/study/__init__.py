"""
The constrained-vs-ERM study of an LLM recipe (`constrained-sft study`, the paper's Section 6 in one command):
training seeds per arm, robustness with intervals, noisy answers judged head to head in both orders, one report.

May import: everything below `sweep` (utils, config, constraints, readout, noise, data, models, trainers, tasks,
evaluation); only `cli` imports it.
"""

from .arguments import STAGES, StudyArguments
from .conduct import run

__all__ = ["STAGES", "StudyArguments", "run"]
