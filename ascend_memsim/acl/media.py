"""acl.media: DVPP (media) memory. Image and video processing are not simulated.
"""

from __future__ import annotations

from ..runtime.active import current_runtime
from ._face import face as _face


@_face(0)
def dvpp_malloc(size: int) -> int:
    return current_runtime().dvpp_malloc(size)


@_face()
def dvpp_free(dev_ptr: int) -> None:
    current_runtime().dvpp_free(dev_ptr)


_EXPORTS = (
    dvpp_malloc, dvpp_free,
)
__all__ = [fn.__name__ for fn in _EXPORTS]
