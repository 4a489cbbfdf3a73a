"""The media plane of one runtime: DVPP descriptions, channels and (in :mod:`.vpc`) the VPC.

The runtime does not know this layer: the plane is made on first use through
``Runtime.extension("media", MediaPlane)`` (see :func:`media_plane`); at aclFinalize the
runtime asks it for the handles still live (descriptions never destroyed, channels never
closed), which the sanitizer reports as leaks.

The internal API the face and the codecs use:

* ``create(cls, **fields) -> int``, ``get(handle, cls) -> obj``, ``destroy(handle, cls)``,
  ``set(handle, cls, name, value)``: any description class of :mod:`.descs`;
* ``create_batch(size)``, ``batch_pic(batch, index)``, ``destroy_batch(batch)``;
* ``create_channel(desc)``, ``destroy_channel(desc)``, ``channel(desc, mode)`` (an open
  channel that serves ``mode``), ``set_channel_param`` / ``channel_param``;
* ``handles``: the :class:`~ascend_memsim.compute.tensors.HandleTable` (its ``lock`` guards
  every field change).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal, TypeVar, cast, overload

from ..compute.tensors import Handle, HandleTable
from ..memory.args import as_int
from ..memory.errors import InvalidArgument, InvalidArgumentType
from .constants import CHANNEL_MODE_ALL, ChannelDescParam, ChannelMode
from .descs import (
    BATCH_MAX,
    INT32,
    MEDIA_HANDLE_BASE,
    U32,
    BatchPicDesc,
    BorderConfig,
    ChannelDesc,
    Desc,
    PicDesc,
    RoiConfig,
)
from .vpc import VpcCalls

__all__ = ["MediaPlane", "media_plane"]

D = TypeVar("D", bound=Desc)

_MODE_BITS = sum(int(m) for m in ChannelMode)


@overload
def media_plane(runtime: Any, make: Literal[True] = True) -> MediaPlane: ...
@overload
def media_plane(runtime: Any, make: bool) -> MediaPlane | None: ...


def media_plane(runtime: Any, make: bool = True) -> MediaPlane | None:
    """The runtime's media plane, made on first use (``make=False``: None if the runtime has
    none yet; nothing is made)."""
    return cast("MediaPlane | None", runtime.extension("media", MediaPlane if make else None))


class MediaPlane(VpcCalls):
    """The media handles of one runtime (thread-safe: the table's lock)."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime
        sanitizer = runtime.sanitizer
        self.handles = HandleTable(lambda: sanitizer.on and sanitizer.record_sites,
                                   base=MEDIA_HANDLE_BASE)
        self._channel_ids = itertools.count()

    def close(self) -> list[Handle]:
        """Forget every handle (aclFinalize); the ones never destroyed (a batch's pictures
        are its own, not reported apart)."""
        return [h for h in self.handles.clear()
                if not (isinstance(h, PicDesc) and h.batch)]

    # -- any description ---------------------------------------------------------------------

    def create(self, cls: type[D], **fields: int) -> int:
        """A new description of ``cls`` (fields checked against the setters' C ranges)."""
        checked = {name: as_int(value, name, *cls.FIELDS[name])
                   for name, value in fields.items()}
        return self.handles.add(cls(**checked)).handle

    def get(self, handle: object, cls: type[D], what: str | None = None) -> D:
        """The live description ``handle`` of class ``cls``.

        Raises:
            InvalidArgumentType: not an int. InvalidArgument: 0 (NULL).
            InvalidHandle: unknown, destroyed, or a handle of another kind.
        """
        return self.handles.get(handle, cls, what)

    def destroy(self, handle: object, cls: type[D]) -> None:
        """acldvppDestroy*: forget the description.

        Raises:
            InvalidHandle: as :meth:`get`, or a picture of a batch (destroyed with it:
                DECISION), or a channel description whose channel is still open
                (DECISION: destroy the channel first, as the vendor's samples do).
        """
        with self.handles.lock:
            obj = self.get(handle, cls)
            if isinstance(obj, PicDesc) and obj.batch:
                raise InvalidArgument(
                    f"picture description {obj.handle:#x} belongs to batch picture "
                    f"description {obj.batch:#x}; acldvppDestroyBatchPicDesc destroys it")
            if isinstance(obj, ChannelDesc) and obj.open:
                raise InvalidArgument(
                    f"channel description {obj.handle:#x} has channel {obj.channel_id} "
                    f"open; destroy the channel first (acl.media.dvpp_destroy_channel)")
            self.handles.remove(handle, cls)

    def set(self, handle: object, cls: type[Desc], name: str, value: object) -> None:
        """Set one field, checked against its C parameter's range first."""
        obj = self.get(handle, cls)
        number = as_int(value, name, *cls.FIELDS[name])
        with self.handles.lock:
            setattr(obj, name, number)

    def set_roi(self, handle: object, left: object, right: object, top: object,
                bottom: object) -> None:
        """acldvppSetRoiConfig: the four edges at once (all checked before any is set)."""
        obj = self.get(handle, RoiConfig, "config")
        edges = {name: as_int(value, name, *U32) for name, value in
                 (("left", left), ("right", right), ("top", top), ("bottom", bottom))}
        with self.handles.lock:
            for name, number in edges.items():
                setattr(obj, name, number)

    # -- batch picture descriptions -----------------------------------------------------------

    def create_batch(self, size: object) -> int:
        """acldvppCreateBatchPicDesc: ``size`` pictures (1 to :data:`BATCH_MAX`)."""
        count = as_int(size, "batch_size", *U32)
        if not 1 <= count <= BATCH_MAX:
            raise InvalidArgument(f"batch_size={count} is outside [1, {BATCH_MAX}]")
        with self.handles.lock:
            batch = self.handles.add(BatchPicDesc())
            batch.pics = tuple(self.handles.add(PicDesc(batch=batch.handle))
                               for _ in range(count))
        return batch.handle

    def batch_pic(self, batch: object, index: object) -> int:
        """acldvppGetPicDesc: the handle of picture ``index`` of the batch."""
        pics = self.get(batch, BatchPicDesc).pics
        i = as_int(index, "index", *U32)
        if i >= len(pics):
            raise InvalidArgument(f"index {i} is outside the batch of {len(pics)}")
        return pics[i].handle

    def destroy_batch(self, batch: object) -> None:
        """acldvppDestroyBatchPicDesc: the batch and its pictures."""
        with self.handles.lock:
            obj = self.handles.remove(batch, BatchPicDesc)
            for pic in obj.pics:
                self.handles.remove(pic.handle, PicDesc)

    # -- channels -----------------------------------------------------------------------------

    def create_channel(self, desc: object) -> None:
        """acldvppCreateChannel: open a channel on the description (its id set now).

        Raises:
            InvalidArgument: the description's channel is already open, or its mode has
                bits acldvppChannelMode does not name.
        """
        with self.handles.lock:
            obj = self.get(desc, ChannelDesc, "channel_desc")
            if obj.open:
                raise InvalidArgument(f"channel description {obj.handle:#x} already has "
                                      f"channel {obj.channel_id} open")
            if obj.mode & ~_MODE_BITS:
                raise InvalidArgument(f"channel mode {obj.mode:#x} has bits no "
                                      f"acldvppChannelMode names")
            obj.channel_id = next(self._channel_ids)
            obj.open = True

    def destroy_channel(self, desc: object) -> None:
        """acldvppDestroyChannel: close the channel (queued work on it still runs)."""
        with self.handles.lock:
            obj = self.get(desc, ChannelDesc, "channel_desc")
            if not obj.open:
                raise InvalidArgument(f"channel description {obj.handle:#x} has no open "
                                      f"channel (acl.media.dvpp_create_channel first)")
            obj.open = False

    def set_channel_mode(self, desc: object, mode: object) -> None:
        """acldvppSetChannelDescMode: before the channel is created."""
        with self.handles.lock:
            obj = self.get(desc, ChannelDesc, "channel_desc")
            number = as_int(mode, "mode", *U32)
            if obj.open:
                raise InvalidArgument("the channel mode is set before "
                                      "acl.media.dvpp_create_channel")
            obj.mode = number

    def channel(self, desc: object, mode: ChannelMode, call: str) -> ChannelDesc:
        """The open channel ``desc``, which must serve ``mode``.

        Raises:
            InvalidHandle: as :meth:`get`. InvalidArgument: not open, or its mode lacks
                ``mode``.
        """
        obj = self.get(desc, ChannelDesc, "channel_desc")
        if not obj.open:
            raise InvalidArgument(f"{call}: channel description {obj.handle:#x} has no "
                                  f"open channel (acl.media.dvpp_create_channel first)")
        if obj.mode != CHANNEL_MODE_ALL and not obj.mode & mode:
            raise InvalidArgument(f"{call}: the channel's mode {obj.mode:#x} lacks "
                                  f"{mode.name} ({int(mode)})")
        return obj

    def set_channel_param(self, desc: object, kind: object, value: object) -> None:
        """acldvppSetChannelDescParam (pyacl passes the value itself, a uint32 for the one
        type it sizes, ACL_DVPP_CSC_MATRIX_UINT32)."""
        obj = self.get(desc, ChannelDesc, "channel_desc")
        kind = as_int(kind, "param_type", *INT32)
        if kind not in ChannelDescParam._value2member_map_:
            raise InvalidArgument(f"channel param type {kind} is not one pyacl sizes "
                                  f"(ACL_DVPP_CSC_MATRIX_UINT32 = 0)")
        number = as_int(value, "param", *U32)
        with self.handles.lock:
            obj.params[kind] = number

    def channel_param(self, desc: object, kind: object) -> tuple[int, int]:
        """acldvppGetChannelDescParam: ``(bytes, value)``; 0 bytes for a value never set."""
        obj = self.get(desc, ChannelDesc, "channel_desc")
        kind = as_int(kind, "param_type", *INT32)
        if kind not in ChannelDescParam._value2member_map_:
            raise InvalidArgument(f"channel param type {kind} is not one pyacl sizes "
                                  f"(ACL_DVPP_CSC_MATRIX_UINT32 = 0)")
        if kind not in obj.params:
            return 0, 0
        return 4, obj.params[kind]

    # -- border configs -------------------------------------------------------------------------

    def set_border_value(self, config: object, index: object, value: object) -> None:
        """acldvppSetBorderConfigValue: the constant border's value of channel ``index``
        (0 to 3).

        Raises:
            InvalidArgument: another index, or a value that is not a finite number.
        """
        obj = self.get(config, BorderConfig, "border_config")
        i = as_int(index, "index", *U32)
        if i >= len(obj.value):
            raise InvalidArgument(f"index {i} is outside [0, {len(obj.value) - 1}]")
        number = _as_float(value, "value")
        with self.handles.lock:
            obj.value[i] = number

    def border_value(self, config: object, index: object) -> float:
        """acldvppGetBorderConfigValue (acl_dvpp.h: a value < 0 means invalid)."""
        obj = self.get(config, BorderConfig, "border_config")
        i = as_int(index, "index", *U32)
        if i >= len(obj.value):
            raise InvalidArgument(f"index {i} is outside [0, {len(obj.value) - 1}]")
        return obj.value[i]


def _as_float(value: object, name: str) -> float:
    """A finite float from an int or float (pyacl's ``"d"``: bool and str refused)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentType(f"{name} must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidArgument(f"{name}={value} is too large for a double") from None
    if not math.isfinite(number):
        raise InvalidArgument(f"{name}={number} is not finite")
    return number
