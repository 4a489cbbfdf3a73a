"""The stand-in ``torch_npu.testing.testcase``: torch_npu's own test base class, for tests
written against it (``TestCase``, ``run_tests``); an estimate runs them on fake tensors.

``PerfBaseline`` (``torch_npu/testing/common_utils.py``'s ``Baseline`` of
``PERF_BASELINE_FILE``): the seconds each test took when last measured, by test id, read from
the JSON file (``performance_baseline.json`` in the working directory unless the variable
names another) when the module is first imported. DECISION: it is never written back, not
at exit and not by ``save_baseline``: the times of an estimate are those of fake tensors,
and a baseline written from them would replace the machine's. The file is read only when it
is at most :data:`MAX_BASELINE_BYTES` and holds an object of numbers.
"""

from __future__ import annotations

import json
import os
import threading
import unittest
from typing import Any

from .._missing import not_modelled

__all__ = ["TestCase", "run_tests", "set_npu_device", "is_iterable", "iter_indices",
           "IS_IN_CI", "PERF_TEST_ENABLE", "TEST_REPORT_PATH", "PerfBaseline"]

__getattr__ = not_modelled("torch_npu.testing.testcase")

IS_IN_CI = os.environ.get("IN_CI", "0") == "1"
PERF_TEST_ENABLE = os.environ.get("PERF_TEST_ENABLE", "").upper() in ("ON", "1", "YES",
                                                                      "TRUE", "Y")
TEST_REPORT_PATH = os.environ.get("TEST_REPORT_PATH", "test-reports")
PERF_BASELINE_FILE = os.path.realpath(os.environ.get(
    "PERF_BASELINE_FILE", os.path.join(os.getcwd(), "performance_baseline.json")))
#: the largest baseline file read (a test id and its seconds take tens of bytes)
MAX_BASELINE_BYTES = 64 << 20


class Baseline:
    """The seconds each test took, by test id (``get_baseline`` / ``set_baseline``), read
    from ``path`` if it exists; kept in memory only (see the module's DECISION).

    Raises (construction):
        ValueError: the file is larger than :data:`MAX_BASELINE_BYTES`, not JSON, or not an
            object of numbers.
    """

    def __init__(self, path: str) -> None:
        self._baseline: dict[str, float] = {}
        self._path = path
        self._mutex = threading.Lock()
        if not os.path.isfile(path):
            return
        with open(path, "rb") as f:
            text = f.read(MAX_BASELINE_BYTES + 1)
        if len(text) > MAX_BASELINE_BYTES:
            raise ValueError(f"{path}: a performance baseline larger than "
                             f"{MAX_BASELINE_BYTES} bytes is not read")
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not a performance baseline (JSON): {e}") from None
        if not isinstance(data, dict) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in data.values()):
            raise ValueError(f"{path} is not a performance baseline (an object of seconds "
                             f"by test id)")
        self._baseline = {str(k): float(v) for k, v in data.items()}

    def get_baseline(self, resourceId: str) -> float | None:
        """The seconds ``resourceId`` took, or None."""
        return self._baseline.get(resourceId)

    def set_baseline(self, resourceId: str, baseline: float) -> None:
        with self._mutex:
            self._baseline[resourceId] = baseline

    def save_baseline(self) -> None:
        """Writes nothing during an estimate (see the module's DECISION)."""


PerfBaseline = Baseline(PERF_BASELINE_FILE)


def set_npu_device() -> str:
    """The device the tests run on: ``npu:0``."""
    return "npu:0"


def is_iterable(obj: Any) -> bool:
    try:
        iter(obj)
    except TypeError:
        return False
    return True


def iter_indices(tensor: Any) -> Any:
    """Every index of ``tensor`` (a tuple per element), as torch's testing helper."""
    import itertools

    if tensor.dim() == 0:
        return range(0)
    if tensor.dim() == 1:
        return range(tensor.size(0))
    return itertools.product(*(range(s) for s in tensor.size()))


class TestCase(unittest.TestCase):
    """unittest.TestCase with torch_npu's comparison helper."""

    def assertRtolEqual(self, x: Any, y: Any, prec: float = 1.0e-4, **kwargs: Any) -> None:
        import torch

        torch.testing.assert_close(x, y, rtol=prec, atol=prec)


def run_tests(argv: Any = None) -> None:
    """unittest's main (exits with its status, as torch_npu's does)."""
    unittest.main(argv=argv)
