"""What a stand-in module answers for a public name of the real torch_npu it does not have.

DECISION: :class:`NotModelled` is an AttributeError, so ``hasattr(torch_npu, name)`` (the
probe transformers, accelerate and DeepSpeed use before calling an optional feature) answers
False and the script takes its other path, as on a torch_npu release without the name; an
access that is not a probe fails with a message that names the attribute and says it is not
modelled, never an AttributeError from deep inside the stand-in.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["NotModelled", "not_modelled"]


class NotModelled(AttributeError):
    """A public name of torch_npu that the stand-in does not model."""


def not_modelled(module: str) -> Callable[[str], object]:
    """A module ``__getattr__`` for the stand-in module whose real name is ``module``."""

    def __getattr__(name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        raise NotModelled(
            f"{module}.{name} is not modelled by ascend-memsim's stand-in torch_npu (it runs "
            f"scripts on fake tensors to count NPU memory); the names it has are listed in "
            f"docs/guide/estimate.md, 'What runs'", name=name, obj=module)

    return __getattr__
