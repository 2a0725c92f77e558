"""
Noisy evaluation through EleutherAI's lm-evaluation-harness (`pip install 'constrained-sft[harness]'`): the noisy
lm-eval model (`model`) and the entry point for lm-eval's own command line (`lm_eval_cli`).
"""
