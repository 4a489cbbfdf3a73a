"""Sanitizer findings as test failures: one rule for the pytest fixture and the state machine."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["FAIL_ON", "check_fail_on", "failing_findings", "findings_text",
           "sanitizer_setting"]

#: Which sanitizer findings fail a test: errors (default), warnings too, or none.
FAIL_ON = ("error", "warning", "never")


def check_fail_on(value: object, where: str) -> str:
    """``value`` if it is one of :data:`FAIL_ON`.

    Raises:
        ValueError: anything else (the message names ``where`` and the choices).
    """
    if value not in FAIL_ON:
        raise ValueError(f"{where}={value!r}: write one of {', '.join(FAIL_ON)}")
    return value


def failing_findings(reports: Iterable[Any], fail_on: str) -> list[Any]:
    """The findings among ``reports`` that fail a test under ``fail_on``; leaks never do (the
    fixture lists leaks itself, with their allocation sites)."""
    if fail_on == "never":
        return []
    return [r for r in reports
            if r.kind != "leak" and (r.severity == "error" or fail_on == "warning")]


def findings_text(who: str, failing: Sequence[Any], hint: str) -> str:
    """``<who>: N sanitizer finding(s) (kinds); <hint>:`` then each finding's report."""
    kinds = sorted({r.kind for r in failing})
    return (f"{who}: {len(failing)} sanitizer finding(s) ({', '.join(kinds)}); {hint}:\n"
            + "\n".join(r.format() for r in failing))


def sanitizer_setting(spec: object, **defaults: Any) -> object:
    """A ``Runtime(sanitizer=...)`` setting: a mode name or an options dict completed with
    ``defaults`` (the dict's own keys win); ``None``/``True`` are report mode, ``False`` off;
    a Sanitizer object is used as it is."""
    if spec is None or isinstance(spec, bool):
        spec = "off" if spec is False else "report"
    if isinstance(spec, str):
        return {"mode": spec, **defaults}
    if isinstance(spec, dict):
        return {**defaults, **spec}
    return spec
