"""
The shapes of the plain dicts that cross the library's seams, named once so a signature says what it carries:

- `Batch`: a collated model batch, name -> tensor (`input_ids` [B, T], `attention_mask` [B, T], `labels` [B, T],
  `pixel_values` [B, C, T, H, W], ...), as the Trainer hands it to `compute_loss` and `prediction_step`.
- `Logs`: what `Trainer.log` receives and the console prints: metric name -> number.
- `JSONValue` / `JSONObject`: what the library writes to a JSON (or YAML) file: a folder's marker, a run's identity,
  the settings a command recorded. Values are checked by a type checker, unlike `Any`; nested ones are read-only
  (`Mapping`, `Sequence`), so a `dict[str, int]` or a tuple is one (a `dict[str, JSONValue]` alone would refuse it).
- `JSONRead`: a JSON object as a reader gets it from a file (a folder's marker, a saved state, a record), before a
  dataclass (`from_dict`, `known_keys`) or the reader's own checks type its values: the JSON boundary, by name.

- `Kwargs`: keyword arguments handed on to a library we do not own (`from_pretrained`, an OpenAI client, alpaca_eval's
  judges, a module's forward), whose values really are anything.
- `StateDict`: a torch-style `state_dict()` (tensors beside numbers and lists), written to a checkpoint's files.
- `NoiseModality` / `NOISE_MODALITIES`: which inputs of a vision-language model the noise perturbs, the config's
  `noise_modality` and the noise's `modality` (one declaration for both floors).

`dict[str, Any]` appears nowhere else in the package (`tests/test_house.py` holds it): every such dict is one of
these, named for its role.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, get_args

if TYPE_CHECKING:  # torch is not imported when the package is
    import torch

Batch: TypeAlias = "dict[str, torch.Tensor]"
NoiseModality: TypeAlias = Literal["both", "text", "image"]
NOISE_MODALITIES: tuple[NoiseModality, ...] = get_args(NoiseModality)
Logs: TypeAlias = "dict[str, float]"
JSONValue: TypeAlias = "str | int | float | bool | None | Sequence[JSONValue] | Mapping[str, JSONValue]"
JSONObject: TypeAlias = "dict[str, JSONValue]"
# real types, not strings: a dataclass field annotated with one is resolved at run time (`typing.get_type_hints`)
JSONRead: TypeAlias = dict[str, Any]
Kwargs: TypeAlias = dict[str, Any]
StateDict: TypeAlias = dict[str, Any]
