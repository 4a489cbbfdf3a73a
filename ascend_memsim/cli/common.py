"""What every command shares: the usage-error status, --json output, the version."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from enum import Enum
from typing import Any, TextIO

__all__ = ["USAGE_ERROR", "to_json", "print_json", "version"]

#: exit status for bad usage or unreadable input (argparse uses 2 as well)
USAGE_ERROR = 2

#: result fields too big or not meant for --json (a live runtime, per-event timelines)
_NOT_JSON = ("runtime", "timeline")


def to_json(value: Any) -> Any:
    """A JSON value for a result: dataclasses as objects, enums by value, mappings with
    string keys (the default stream, None, as ``"default"``), other objects as text.

    >>> to_json({None: 1, 2: (3, 4)})
    {'default': 1, '2': [3, 4]}
    """
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.name not in _NOT_JSON}
    if isinstance(value, Mapping):
        return {("default" if k is None else str(k)): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    return str(value)


def print_json(data: Any, out: TextIO) -> None:
    print(json.dumps(to_json(data), indent=2, sort_keys=True), file=out)


def version() -> str:
    """The version of the code that runs: ``ascend_memsim.__version__``, the one place it is
    written (pyproject.toml reads it for the package's metadata), so a checkout on sys.path
    knows its version too."""
    from .. import __version__
    return __version__

