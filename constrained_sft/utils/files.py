"""Writing files so that a kill never leaves half of one (below a command's result folder, recorded: `written`), and
reading JSON / YAML so that a broken file is refused in one line naming the flag, the file and the place."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from . import written_record as written
from .atomic import replacing  # a command's result folder records what is written there (`recording`)

T = TypeVar("T")


def json_safe(value: Any) -> Any:
    """Floats JSON cannot hold (nan, inf) become strings; containers are converted recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


@contextlib.contextmanager
def atomic_path(path: str) -> Iterator[str]:
    """
    A temporary path beside `path` to write to; renamed over `path` (after an fsync) only when the block succeeds, so
    a reader, or a run killed mid-write, sees the old file or the new one, never half of one. A kill can leave the
    temporary behind; the next write of `path` reuses and consumes it. Below a command's result folder the file is
    recorded, and one of the user's there is kept (`written_record.recording`).
    """
    with replacing(path, f"{path}.tmp", written.destination, written.written) as tmp:
        yield tmp


def write_text(path: str, text: str) -> None:
    """Write `text` to `path` atomically (see [`atomic_path`])."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)


def write_json(path: str, value: Any) -> None:
    """Write `value` as indented JSON to `path` atomically (see [`atomic_path`])."""
    write_text(path, json.dumps(json_safe(value), indent=2, sort_keys=True))


def read_yaml(path: str, flag: str) -> Any:
    """
    The YAML file at `path`, read strictly: a syntax error (a tab in the indentation, an unclosed bracket) or a key
    given twice in one mapping is refused as `ValueError` naming `flag`, the file, and the line and column, instead of
    a parser traceback or the last duplicate silently winning.
    """
    import yaml

    class StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types (no types-PyYAML here)
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: dict[object, int] = {}  # key -> the line it was first given on
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    mark = key_node.start_mark
                    raise ValueError(
                        f"`{flag}` {path}:{mark.line + 1}:{mark.column + 1}: key {key!r} is given twice (first on line "
                        f"{seen[key] + 1}); give each key once."
                    )
                seen[key] = key_node.start_mark.line
            mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
            return mapping

    try:
        with open(path, encoding="utf-8") as f:
            return yaml.load(f, Loader=StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except UnicodeDecodeError as error:
        raise ValueError(f"`{flag}` {path} is not UTF-8 text ({error.reason} at byte {error.start}).") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"`{flag}` {path}{where}: not valid YAML ({problem}).") from None


def read_json(path: str, flag: str, error: type[ValueError] = ValueError, jsonl: bool = False) -> Any:
    """A JSON file (`jsonl`: a list, one value per non-blank line), refused in one line naming `flag` and the place
    of the problem as `file:line:column`, as YAML errors are."""
    try:
        with open(path, encoding="utf-8") as f:
            if not jsonl:
                return json.load(f)
            lines = list(f)
        rows = []
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as problem:
                    raise error(f"`{flag}` {path}:{number}:{problem.colno}: not valid JSON ({problem.msg}).") from None
        return rows
    except UnicodeDecodeError as problem:
        raise error(f"`{flag}` {path} is not UTF-8 text ({problem.reason} at byte {problem.start}).") from None
    except json.JSONDecodeError as problem:
        raise error(f"`{flag}` {path}:{problem.lineno}:{problem.colno}: not valid JSON ({problem.msg}).") from None


def read_saved(folder: str, name: str, parse: Callable[[Any], T], flag: str = "--output_dir") -> T | None:
    """`parse` of the JSON file `<folder>/<name>` (a result type's `from_dict`), None where the folder has none; a
    damaged file is refused in one line naming `flag` and the place (`read_json`), an unknown key by `parse`."""
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        return None
    return parse(read_json(path, flag))
