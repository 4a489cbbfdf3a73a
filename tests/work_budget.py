"""Work measured in function calls: a budget that a slow machine cannot fail and a hang
cannot pass (the hostile-file tests run each reader under it)."""

from __future__ import annotations

import sys


class OverBudget(Exception):
    """The call made more function calls than its budget."""


def within_budget(fn, *args, budget: int, **kwargs):
    """``(fn(*args, **kwargs), calls)``, counting the Python and C calls it makes through a
    profile hook and stopping it with :class:`OverBudget` past ``budget``."""
    calls = 0

    def count(frame, event, arg):
        nonlocal calls
        calls += 1
        if calls > budget:
            raise OverBudget(f"{getattr(fn, '__name__', fn)} made more than {budget} calls")

    sys.setprofile(count)
    try:
        return fn(*args, **kwargs), calls
    finally:
        sys.setprofile(None)
