"""
The images of vision-language rows, as TRL's `SFTTrainer` takes them: an `images` column (a list per row) or an
`image` column (one per row) beside multimodal `messages` or `prompt` / `completion`, where a message's `content` is a
string or a list of parts (`{"type": "text", "text": ...}`, `{"type": "image"}`). An image is what `datasets` decodes
(a PIL image, from a Hub dataset's `Image` feature or a parquet of image bytes) or a file path, as local JSON / JSONL
rows name them, relative to the data file's folder.

Every row is checked before training, naming it: the file exists and is an image (its header read, not the pixels),
and the images fit the row's image placeholders by TRL's own rule (`trl.data_utils.prepare_multimodal_messages`: a
string user turn takes every image, else one `{"type": "image"}` part per image). Paths become absolute and the
column datasets' `Image` feature, decoded when a batch is collated.
"""

from __future__ import annotations

import io
import os
from typing import Any

from datasets import Dataset, IterableDataset, List
from datasets import Image as ImageFeature

from ..utils.types import JSONRead
from .errors import DataError

IMAGE_COLUMNS = ("images", "image")
PART_TYPES = ("text", "image")


def content_text(content: object) -> str:
    """The text of a message's content: a string, or the texts of its parts (a DataError for any other shape)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content and all(is_part(p) for p in content):
        return " ".join(p.get("text") or "" for p in content if p["type"] == "text")
    raise DataError(
        f"a message's `content` must be a string or a non-empty list of parts {{type: one of {list(PART_TYPES)}, "
        f"text}}, got {content!r:.80}."
    )


def is_part(part: object) -> bool:
    """A multimodal content part: `{"type": "text", "text": str}` or `{"type": "image", ...}`."""
    if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
        return False
    return part["type"] == "image" or isinstance(part.get("text"), str)


def row_images(row: JSONRead, root: str | None) -> list[Any] | None:
    """The row's images as a list (None for a text row), each path made absolute against `root` and checked."""
    column = next((c for c in IMAGE_COLUMNS if c in row), None)
    if column is None:
        return None
    value = row[column]
    images = [value] if column == "image" else value
    if not isinstance(images, list):
        raise DataError(f"`images` must be a list of images or image paths, got {images!r:.80}.")
    return [checked_image(image, root) for image in images]


def checked_image(image: object, root: str | None) -> Any:
    """A decoded image as it is; a path (or datasets' `{"path", "bytes"}`) checked: it exists and is an image."""
    if isinstance(image, dict) and image.get("bytes") is not None:
        verify(io.BytesIO(image["bytes"]), f"image {image.get('path') or '(bytes)'}")
        return image
    path = image.get("path") if isinstance(image, dict) else image
    if not isinstance(path, str):
        if hasattr(image, "size") and hasattr(image, "mode"):  # a PIL image
            return image
        raise DataError(f"an image must be a PIL image or a file path, got {image!r:.80}.")
    full = path if os.path.isabs(path) or root is None else os.path.join(root, path)
    if not os.path.isfile(full):
        raise DataError(f"image {path!r}: no such file ({os.path.abspath(full)}).")
    verify(full, f"image {path!r}")
    return os.path.abspath(full)


def verify(source: str | io.BytesIO, name: str) -> None:
    """A DataError naming `name` unless `source` is an image PIL reads (its header and structure, not its pixels)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(source) as opened:
            opened.verify()
    except (UnidentifiedImageError, OSError, SyntaxError) as error:
        raise DataError(f"{name} is not an image PIL can read ({type(error).__name__}).") from None


def undecoded(ds: Dataset) -> Dataset:
    """`ds` with its image columns read as `{path, bytes}` instead of decoded pixels: checking a row needs none."""
    for column in IMAGE_COLUMNS:
        feature = (ds.features or {}).get(column)
        if isinstance(feature, ImageFeature):
            ds = ds.cast_column(column, ImageFeature(decode=False))
        elif isinstance(feature, List) and isinstance(feature.feature, ImageFeature):
            ds = ds.cast_column(column, List(ImageFeature(decode=False)))
    return ds


def check_placeholders(converted: JSONRead, images: list[Any]) -> None:
    """The images fit the row's image placeholders, by TRL's rule; a DataError naming both counts otherwise."""
    from trl.data_utils import prepare_multimodal_messages

    messages = converted.get("messages") or converted.get("prompt")
    if not isinstance(messages, list):
        return  # a plain-text prompt: the processor finds the image tokens in the string itself
    try:
        prepare_multimodal_messages(messages, images=list(images))
    except ValueError as error:
        raise DataError(f"{error} Give one {{type: image}} part per image, or string contents.") from None


def with_image_feature(ds: Dataset | IterableDataset) -> Dataset | IterableDataset:
    """`ds` with its `images` column as datasets' `Image` feature (paths decoded lazily, when a batch is collated)."""
    if "images" not in (ds.column_names or []):
        return ds
    feature = (ds.features or {}).get("images")
    if isinstance(feature, List) and isinstance(feature.feature, ImageFeature) and feature.feature.decode:
        return ds
    return ds.cast_column("images", List(ImageFeature()))


def data_folder(dataset_name: str | None) -> str | None:
    """Where a local data source's relative image paths start: its folder (a file's own folder); None otherwise."""
    if not dataset_name or not os.path.exists(dataset_name):
        return None
    return dataset_name if os.path.isdir(dataset_name) else os.path.dirname(os.path.abspath(dataset_name))
