"""The stand-in ``torch_npu.testing.testcase``: torch_npu's own test base class, for tests
written against it (``TestCase``, ``run_tests``); an estimate runs them on fake tensors."""

from __future__ import annotations

import os
import unittest
from typing import Any

from .._missing import not_modelled

__all__ = ["TestCase", "run_tests", "set_npu_device", "is_iterable", "iter_indices",
           "IS_IN_CI", "PERF_TEST_ENABLE", "TEST_REPORT_PATH"]

__getattr__ = not_modelled("torch_npu.testing.testcase")

IS_IN_CI = os.environ.get("IN_CI", "0") == "1"
PERF_TEST_ENABLE = os.environ.get("PERF_TEST_ENABLE", "false").lower() == "true"
TEST_REPORT_PATH = os.environ.get("TEST_REPORT_PATH", "test-reports")


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
