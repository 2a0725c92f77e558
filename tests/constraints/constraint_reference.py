"""
A reference implementation of the descent constraints, written from the paper's definition as tensor operations and
kept apart from the library's one implementation (`DescentConstraints.terms`, read by `constraint_values` and
`penalty_coefficients`), so that tests compare two independent derivations.
"""

import torch


def constraint_sums(spec, layer_sums: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    """`[C]` token-sums g_c x N of the constraint functions from per-layer loss sums `[n]`: g_c = f_{l_j} -
    (1 - alpha_j) f_{l_{j-1}} (and f_{l_0} - epsilon first, when set)."""
    alphas = layer_sums.new_tensor(spec.alphas)  # [n-1]
    terms = layer_sums[1:] - (1 - alphas) * layer_sums[:-1]
    if spec.epsilon is not None:
        first = layer_sums[:1] - spec.epsilon * num_tokens.to(layer_sums.dtype)
        terms = torch.cat([first, terms])
    return terms


def slack(spec, layer_sums: torch.Tensor, num_tokens: torch.Tensor) -> torch.Tensor:
    """`[C]` constraint values at the batch means, in float64; NaN when the batch has no supervised token."""
    sums = constraint_sums(spec, layer_sums.double(), num_tokens)
    return sums / num_tokens.double() if num_tokens > 0 else torch.full_like(sums, float("nan"))
