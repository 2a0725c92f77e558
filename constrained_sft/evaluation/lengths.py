"""
Room to decode, checked before any model work (`eval generate`, `eval exits`, the study's answers): the longest
prompt plus `--max_new_tokens` against the positions the model has, and what decoding allocates before its first
step against the memory free where it will run. Read from the model's config and tokenizer only (milliseconds).

Up front, decoding allocates the noise bank (`noise.noisy_decoding`: [B, T + S, D] float32, every slot drawn before
the first step) and, compiled, transformers' static KV cache ([2, layers, B, kv heads, T + S, head dim] in the
model's dtype, `evaluation.decoding`); an eager KV cache grows only as answers do, so it is not counted. The weights
are not counted either (their size in memory depends on how they load): a refusal here is always right, and a run
that passes may still run out of memory while it loads or decodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PretrainedConfig

from ..data import ModelSpec, load_tokenizer
from ..data.models import tokenizer_source
from .instructions import GenerationError, prompts_for

GIB = 1 << 30
POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


@dataclass(frozen=True)
class Decoding:
    """How a command decodes: answers of at most `max_new_tokens` (named `flag`), `batch_size` prompts a call,
    compiled or eager, under embedding noise (`noisy`) or not, weights of `dtype`."""

    max_new_tokens: int
    batch_size: int
    compile: bool
    noisy: bool
    dtype: torch.dtype = torch.float32
    flag: str = "--max_new_tokens"


def model_positions(config: PretrainedConfig) -> tuple[int, str] | None:
    """(positions the model has, the config key that says so), or None where its config names none."""
    for key in POSITION_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value, key
    return None


def upfront_bytes(config: PretrainedConfig, positions: int, how: Decoding) -> dict[str, int]:
    """{what: bytes} decoding allocates before its first step for `positions` slots a row (see the module
    docstring)."""
    B, heads = how.batch_size, config.num_attention_heads
    parts: dict[str, int] = {}
    if how.noisy:
        parts["noise bank"] = B * positions * config.hidden_size * 4
    if how.compile:
        kv = getattr(config, "num_key_value_heads", None) or heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        size = torch.empty((), dtype=how.dtype).element_size()
        parts["static KV cache"] = 2 * config.num_hidden_layers * B * kv * positions * head_dim * size
    return parts


def free_memory(device: torch.device) -> int:
    """Bytes free on `device`: the GPU's free memory, else the machine's available memory."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil

    return int(psutil.virtual_memory().available)


def check_decoding(spec: ModelSpec, rows: list[dict[str, str]], system_prompt: str | None, how: Decoding) -> None:
    """Refused in one line naming `how.flag`, the positions asked and those the model has, or the bytes decoding
    would allocate up front and those free; nothing where the config cannot be read here (a Hub id offline: loading
    then names the problem)."""
    from ..tasks.sft import causal_lm_config

    config = causal_lm_config(spec)
    if config is None or not rows:
        return
    tokenizer = load_tokenizer(tokenizer_source(spec))
    prompts = prompts_for(tokenizer, rows, system_prompt)
    longest = max(map(len, tokenizer(prompts, add_special_tokens=False)["input_ids"]))
    need = longest + how.max_new_tokens
    if (has := model_positions(config)) is not None and need > has[0]:
        room = has[0] - longest
        instead = f"give `{how.flag}` {room} or less" if room >= 1 else "give shorter instructions"
        raise GenerationError(
            f"`{how.flag}` {how.max_new_tokens} with the longest prompt ({longest} tokens) needs {need} positions; "
            f"{spec.name}'s model has {has[0]} ({has[1]}): {instead}."
        )
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    parts = upfront_bytes(config, need, how)
    if (total := sum(parts.values())) > (free := free_memory(device)):
        what = " + ".join(f"{name} {size / GIB:.1f} GiB" for name, size in parts.items())
        eager = ", or decode eagerly (`--compile false`)" if how.compile else ""
        raise GenerationError(
            f"`{how.flag}` {how.max_new_tokens}: decoding {how.batch_size} prompt(s) of up to {need} positions "
            f"would allocate {total / GIB:.1f} GiB before its first step ({what}); {device.type} has "
            f"{free / GIB:.1f} GiB free: lower `{how.flag}` or the batch size{eager}."
        )
