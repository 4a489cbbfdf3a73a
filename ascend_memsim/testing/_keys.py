"""What the plugin's hooks and the fixtures' machinery share, with nothing heavy to import:
the keys of a test item's stash, the marker's keywords, and the product the command line or
ini file asks for."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

import pytest

from ..memory.profiles import Profile

__all__ = ["CALL_CHECKS", "CALL_FAILED", "FAULTS", "STATE", "MARKER_KEYS", "product_option",
           "merge_keywords"]

#: Profile fields a marker (or an indirect parameter dict) may override.
PROFILE_KEYS = tuple(f.name for f in dataclasses.fields(Profile)
                     if f.name not in ("name", "description", "aliases", "sources"))
#: Every keyword the ``memsim`` marker takes.
MARKER_KEYS = ("product", "leak_check", "faults", "device", "record_sites", "sanitizer",
               "fail_on", "max_peak", "ops", *PROFILE_KEYS)

#: checks the plugin runs when a test body has passed, before the memsim fixture's own:
#: each gives a list of problems (the test's failure)
CALL_CHECKS = pytest.StashKey[list]()
#: whether the test's call failed (its own failure: no second report of its leaks)
CALL_FAILED = pytest.StashKey[bool]()
#: the faults the memsim marker installed
FAULTS = pytest.StashKey[list]()
#: the memsim fixture's per-test state (:class:`._memsim.State`)
STATE = pytest.StashKey[Any]()


def product_option(config: pytest.Config) -> str | None:
    """``--memsim-product``, else the ``memsim_product`` ini setting, else None."""
    return config.getoption("memsim_product") or config.getini("memsim_product") or None


def merge_keywords(settings: dict, kwargs: dict, known: tuple[str, ...], where: str,
                   error: type[Exception]) -> None:
    """Put ``kwargs`` into ``settings``; a keyword not in ``known`` raises ``error`` naming it,
    the closest known one and the rest."""
    for key, value in kwargs.items():
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise error(f"{where}: unknown keyword {key!r}{hint}; known: {list(known)}")
        settings[key] = value
