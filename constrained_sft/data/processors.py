"""
A vision-language model's processor (image processor + tokenizer + chat template), loaded as TRL loads it
(`AutoProcessor`), and where its video half cannot load here, without it.

Qwen2-VL, Qwen2.5-VL and Qwen3-VL processors hold a video processor that needs torchvision, and PyPI has no torchvision
that loads with a CPU torch. The data this library trains on has images, never videos, so such a processor is loaded
image-only (`image_only`): the model's own image processor and tokenizer, the video processor's saved settings kept
and written back when the processor is saved, so the folder a run writes loads whole (videos included) on a machine
with torchvision. A processor whose image half needs a missing package is refused in one line naming it.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

from ..utils.types import JSONObject, JSONRead
from .models import ModelPathError, is_adapter

logger = logging.getLogger(__name__)

VIDEO = "video_processor"


def reads_images(path: str) -> bool:
    """Whether the model at `path` (a folder, or a Hub id in the local cache) is a vision-language model: its config
    has a `vision_config`. Read from config.json alone: asking an offline Hub would wait out its retries."""
    from huggingface_hub import try_to_load_from_cache

    try:
        config_file = (
            os.path.join(path, "config.json") if os.path.isdir(path) else try_to_load_from_cache(path, "config.json")
        )
        with open(config_file) as f:  # type: ignore[arg-type]
            return "vision_config" in json.load(f)
    except (OSError, TypeError, ValueError):
        return False  # unreadable here: loading the model says why, as for any model


@functools.cache
def image_only(processor_class: type) -> type[Any]:
    """`processor_class` (a `ProcessorMixin` with a video processor) without its video processor: transformers builds
    and loads a processor from `get_attributes()`, so this subclass leaves `video_processor` out of them. Its
    `to_dict` names the original class and writes back the video settings it was loaded with (`video_settings`),
    so a saved folder is the original processor's."""

    class ImageOnly(processor_class):  # type: ignore[misc]
        video_settings: JSONRead | None = None  # the folder's video processor settings, unread here

        @classmethod
        def get_attributes(cls) -> list[str]:
            return [name for name in super().get_attributes() if name != VIDEO]

        def to_dict(self) -> JSONObject:
            saved = {**super().to_dict(), "processor_class": processor_class.__name__}
            return saved if self.video_settings is None else {**saved, VIDEO: self.video_settings}

        def __reduce__(self) -> tuple[Any, ...]:  # a class made here pickles by its maker (data loader workers)
            return restore, (processor_class, self.__dict__)

    ImageOnly.__name__ = ImageOnly.__qualname__ = f"ImageOnly{processor_class.__name__}"
    return ImageOnly


def restore(processor_class: type, state: Mapping[str, object]) -> Any:
    """An `image_only(processor_class)` processor from its pickled state."""
    processor: Any = object.__new__(image_only(processor_class))
    processor.__dict__.update(state)
    return processor


def processor_class_of(path: str, revision: str | None, trust_remote_code: bool) -> Any:
    """The processor class `AutoProcessor` would build for `path`: the one its processor settings name, else its
    model type's; None where neither is known to transformers."""
    from transformers import AutoConfig, ProcessorMixin
    from transformers.models.auto.processing_auto import PROCESSOR_MAPPING, processor_class_from_name

    settings, _ = ProcessorMixin.get_processor_dict(path, revision=revision)
    if name := settings.get("processor_class"):
        return processor_class_from_name(name)
    try:
        config = AutoConfig.from_pretrained(path, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return None
    return PROCESSOR_MAPPING.get(type(config), None)


def image_only_processor(path: str, revision: str | None = None, trust_remote_code: bool = False) -> Any:
    """The processor of the model at `path` without its video processor (`image_only`); None where its class has no
    video processor to leave out."""
    from transformers.video_processing_utils import BaseVideoProcessor

    processor_class = processor_class_of(path, revision, trust_remote_code)
    if processor_class is None or VIDEO not in processor_class.get_attributes():
        return None
    processor = image_only(processor_class).from_pretrained(
        path, revision=revision, trust_remote_code=trust_remote_code
    )
    try:  # what a full load would have read: the nested settings, else the legacy preprocessor file's
        processor.video_settings, _ = BaseVideoProcessor.get_video_processor_dict(path, revision=revision)
    except OSError:
        processor.video_settings = None
    return processor


def load_processor(
    path: str, field: str = "model_name_or_path", revision: str | None = None, trust_remote_code: bool = False
) -> Any:
    """A vision-language model's processor, as TRL loads it (`AutoProcessor`, the same revision and remote-code
    setting). One whose video processor needs a package this environment lacks loads image-only (`image_only`,
    logged); one whose image processor or tokenizer does is refused in one line naming `field` and the package."""
    from transformers import AutoProcessor

    auto: Any = AutoProcessor  # transformers leaves `from_pretrained` untyped
    try:
        return auto.from_pretrained(path, revision=revision, trust_remote_code=trust_remote_code)
    except (ImportError, ValueError) as error:
        if (reason := missing_package(error)) is None:
            raise
    try:
        processor = image_only_processor(path, revision, trust_remote_code)
    except (ImportError, ValueError) as error:
        if missing_package(error) is None:
            raise
        processor = None
    if processor is None:
        raise ModelPathError(
            f"`{field}` {path!r}: its processor cannot load here ({reason}); install what it names (for "
            "torchvision, the build matching your torch)."
        )
    logger.warning(
        "%s: its video processor not loaded (%s); images and text read as usual, videos cannot be.", path, reason
    )
    return processor


def missing_package(error: Exception) -> str | None:
    """The sentence of `error` naming a package this environment lacks: transformers raises an ImportError for a
    class whose backend is missing ("X requires the Torchvision library ...") and a ValueError where no backend of
    an image processor is installed ("... Missing optional dependencies: torchvision."); None for any other error."""
    sentences = " ".join(line.strip() for line in str(error).splitlines() if line.strip()).split(". ")
    if isinstance(error, ImportError):
        return sentences[0]
    return next((s.rstrip(".") for s in sentences if s.startswith("Missing optional dependencies")), None)


def vlm_processor(
    path: str, field: str = "model_name_or_path", revision: str | None = None, trust_remote_code: bool = False
) -> Any:
    """The processor of the vision-language model at `path` (`load_processor`), loaded before any data is read and
    given to the trainer; None for a text model or an adapter folder (TRL loads a text model's tokenizer itself)."""
    if is_adapter(path) or not reads_images(path):
        return None
    return load_processor(path, field, revision, trust_remote_code)
