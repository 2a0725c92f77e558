"""
Judges for `constrained-sft eval alpaca`, as alpaca_eval annotator configs plus the completion functions that the
configs in `judge_configs/` leave to the caller:

Our configs sit in `JUDGE_CONFIGS` (`judge_registry` names which judge reads which):

- `gpt5`: `openai_reasoning/configs.yaml`, the paper's judge (GPT-5, or another OpenAI reasoning model given as
  `--judge_model`), through [`openai_reasoning_completions`]; needs OPENAI_API_KEY.
- `gpt4`: alpaca_eval's default annotator (weighted GPT-4-turbo, needs OPENAI_API_KEY): AlpacaEval 2's standard judge,
  not the paper's.
- `local`: `local_hf/configs.yaml`, any local chat model through transformers, verdict parsed from text.
- `test`: `offline_test/configs.yaml`, deterministic and model-free, for tests and dry runs.
- any other alpaca_eval annotator config name, or a path to a configs.yaml.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import re
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from ...utils.shipped import package_data
from .cost import USAGE, usage_fields

if TYPE_CHECKING:  # openai is imported by the judges that ask it
    from openai.types.shared_params import ReasoningEffort


def load_alpaca_eval() -> None:
    """Import alpaca_eval (once per process) without the deprecation warning its import of pkg_resources gives
    since setuptools 80: the filter holds for the import only, so importing this package changes no process-wide
    warning setting. Every use of alpaca_eval here calls this first."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)
        import alpaca_eval  # noqa: F401


JUDGE_CONFIGS = str(package_data("evaluation", "alpaca", "judge_configs"))  # our annotator configs, one folder each
GPT5 = "gpt-5"  # the paper's judge model
# Credentials the alpaca_eval decoders read; a judge using one of them fails early, naming the variable, never
# its value.
CREDENTIALS = {
    "openai_completions": ("OPENAI_API_KEY", "OPENAI_CLIENT_CONFIG_PATH"),
    "anthropic_completions": ("ANTHROPIC_API_KEY",),
    "google_completions": ("GOOGLE_API_KEY",),
    "cohere_completions": ("COHERE_API_KEY",),
}


def _result(completions: list[str], seconds: float, usage: list[dict] | None = None) -> dict[str, list[Any]]:
    """What alpaca_eval expects of a completions function, and each request's `usage` (`cost.usage_fields`) where
    a server answered; the price is left to `cost.Spend` (alpaca_eval's column: NaN, not a price of 0)."""
    n = max(len(completions), 1)
    out: dict[str, list[Any]] = {
        "completions": completions,
        "price_per_example": [math.nan] * len(completions),
        "time_per_example": [seconds / n] * len(completions),
    }
    if usage is not None:
        out |= {name: [u[name] for u in usage] for name in ("prompt_tokens", "completion_tokens")}
    return out


def _sections(prompt: str) -> tuple[str, str, str]:
    """(instruction, output a, output b) from pairwise_prompt.txt's user message; split at the outermost headings."""
    load_alpaca_eval()
    from alpaca_eval.utils import prompt_to_chatml

    user = next(m["content"] for m in prompt_to_chatml(prompt) if m["role"] == "user")
    instruction, rest = user.removeprefix("## Instruction\n").split("\n\n## Output (a)\n", 1)
    first, rest = rest.rsplit("\n\n## Output (b)\n", 1)
    return instruction, first, rest.rsplit("\n\n## Verdict\n", 1)[0]


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def offline_test_completions(prompts: Sequence[str], **_: object) -> dict[str, list]:
    """Deterministic judge: more words shared with the instruction wins, then the longer answer; else a draw."""
    start, out = time.perf_counter(), []
    for prompt in prompts:
        instruction, *answers = _sections(prompt)
        a, b = ((len(_words(instruction) & _words(x)), len(x.strip())) for x in answers)
        out.append("Output (a)" if a > b else "Output (b)" if b > a else "Draw")
    return _result(out, time.perf_counter() - start)


@functools.lru_cache(maxsize=1)
def _judge_model(model_name: str, dtype: str):
    from ...data import ModelSpec
    from ...tasks import SFTTask, get_task

    model, tokenizer = get_task(SFTTask.name).measuring.load_model(
        ModelSpec("judge", model_name, flag="--judge_model"), getattr(torch, dtype)
    )
    model.to("cuda" if torch.cuda.is_available() else "cpu").eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


@torch.no_grad()
def local_chat_completions(
    prompts: Sequence[str], model_name: str, max_new_tokens: int = 16, batch_size: int = 8, dtype: str = "auto", **_
) -> dict[str, list]:
    """A local chat model answers each ChatML prompt through its own chat template, greedily (no log-probs)."""
    load_alpaca_eval()
    from alpaca_eval.utils import prompt_to_chatml

    if dtype == "auto":
        dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float32"
    model, tokenizer = _judge_model(model_name, dtype)
    start, out = time.perf_counter(), []
    texts = [
        tokenizer.apply_chat_template(prompt_to_chatml(p), tokenize=False, add_generation_prompt=True) for p in prompts
    ]
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(texts[i : i + batch_size], return_tensors="pt", padding=True, add_special_tokens=False)
        enc = enc.to(model.device)
        ids = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=tokenizer.pad_token_id,
        )
        out += tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return _result(out, time.perf_counter() - start)


def _ask_all(ask, prompts: Sequence[str], max_workers: int) -> dict[str, list]:
    """`ask(prompt) -> chat completion` over `prompts`, `max_workers` at a time: the answers and their usage."""
    from concurrent.futures import ThreadPoolExecutor

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        responses = list(pool.map(ask, prompts))
    texts = [r.choices[0].message.content or "" for r in responses]
    return _result(texts, time.perf_counter() - start, [usage_fields(r) for r in responses])


def openai_reasoning_completions(
    prompts: Sequence[str],
    model_name: str = GPT5,
    max_completion_tokens: int = 4096,
    reasoning_effort: ReasoningEffort = "low",
    max_workers: int = 8,
    client_kwargs: dict | None = None,
    **_,
) -> dict[str, list]:
    """
    An OpenAI reasoning model answers each ChatML prompt (`max_workers` requests at a time, the client's own retries;
    `client_kwargs`: the client's, e.g. its `timeout`, as alpaca_eval's decoder takes them). Only what reasoning
    models accept is sent: the output budget as `max_completion_tokens` (it covers the hidden reasoning too, so it is
    generous), `reasoning_effort`, and no temperature, top-p or log-probs.
    """
    import openai

    load_alpaca_eval()
    from alpaca_eval.utils import prompt_to_chatml

    client = openai.OpenAI(**(client_kwargs or {}))  # OPENAI_API_KEY, and OPENAI_BASE_URL if set

    def ask(prompt: str):
        return client.chat.completions.create(
            model=model_name,
            messages=prompt_to_chatml(prompt),
            max_completion_tokens=max_completion_tokens,
            reasoning_effort=reasoning_effort,
        )

    return _ask_all(ask, prompts, max_workers)


def openai_compatible_completions(
    prompts: Sequence[str],
    model_name: str,
    max_tokens: int = 16,
    temperature: float = 0.0,
    max_workers: int = 8,
    client_kwargs: dict | None = None,
    **_,
) -> dict[str, list]:
    """
    A chat model behind any OpenAI-compatible server (vLLM, TGI, llama.cpp's server, Ollama) answers each ChatML prompt
    greedily with a short budget (the verdict is "Output (a)" / "Output (b)"); the server's URL and key come in
    `client_kwargs` (`endpoint.JudgeEndpoint.client_options`). The client's own retries apply.
    """
    import openai

    load_alpaca_eval()
    from alpaca_eval.utils import prompt_to_chatml

    client = openai.OpenAI(**(client_kwargs or {}))

    def ask(prompt: str):
        return client.chat.completions.create(
            model=model_name, messages=prompt_to_chatml(prompt), max_tokens=max_tokens, temperature=temperature
        )

    return _ask_all(ask, prompts, max_workers)


def annotator_class():
    """alpaca_eval's PairwiseAnnotator, reading its annotation cache as floats.

    pandas reads a cache whose preferences are all whole numbers (1, 2, or -1 for unparsed) as int64, and
    alpaca_eval then fails to mark identical answers as a draw (1.5) on the next run over that cache.
    """
    load_alpaca_eval()
    from alpaca_eval.annotators import PairwiseAnnotator

    class FloatCachePairwiseAnnotator(PairwiseAnnotator):
        def load_(self, path=None) -> None:
            super().load_(path)
            if self.df_annotations is not None and self.annotation_key in self.df_annotations:
                self.df_annotations[self.annotation_key] = self.df_annotations[self.annotation_key].astype(float)

    return FloatCachePairwiseAnnotator


def kept_columns() -> list[str]:
    """The outputs alpaca_eval keeps beside each verdict in its annotations and cache: its own (price, time, raw
    completion, ...) and each answer's usage (`cost.USAGE`), so a result judged from the cache knows its cost."""
    load_alpaca_eval()
    from alpaca_eval.annotators.base import BaseAnnotator

    own = inspect.signature(BaseAnnotator.__init__).parameters["other_output_keys_to_keep"].default
    return [*own, *(f"{{annotation_key}}_{name}" for name in USAGE)]


def required_credentials(config_path_or_name: str) -> list[tuple[str, ...]]:
    """The environment variables (alternatives per tuple) an alpaca_eval annotator config's decoders need."""
    load_alpaca_eval()
    from alpaca_eval import constants, utils

    path = config_path_or_name
    if not os.path.exists(path):
        path = os.path.join(constants.EVALUATORS_CONFIG_DIR, path, "configs.yaml")
    if not os.path.exists(path):
        return []
    configs = utils.load_configs(path)
    return [CREDENTIALS[c["fn_completions"]] for c in configs.values() if c.get("fn_completions") in CREDENTIALS]
