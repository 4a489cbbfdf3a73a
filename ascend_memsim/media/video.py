"""VDEC and VENC: video channels, their frame configs, H.264/H.265 through PyAV, callbacks
through the report thread.

pyacl (hicann/runtime python/pyACL/media/media_vdec.cpp, media_venc.cpp): a channel
description carries a callback and the id of the thread that calls
``acl.rt.process_report``; ``vdec_send_frame(channel, stream_desc, pic_desc, frame_config,
user_data)`` and ``venc_send_frame(channel, pic_desc, 0, frame_config, user_data)`` return a
code, and the callback is later called on that thread as ``fn(input, output, user_data)``
(VDEC: the stream description sent and the picture description decoded into; VENC: the
picture description sent and a stream description of the encoded frame).

How it is simulated (the vendor's samples ``vdec_resnet50_classification`` and
``venc_image`` run this way):

* creating a channel subscribes its thread to a stream of the channel's own (as the vendor's
  library does with rtSubscribeReport); each frame's callback is launched on that stream, so
  it reaches the thread through ``process_report`` like any host callback
  (:mod:`ascend_memsim.runtime.callbacks`). Destroying the channel flushes the codec and
  waits until every callback has run (DECISION: if the thread no longer processes reports,
  the rest run on the destroying thread rather than hang).
* DECISION: a frame is decoded or encoded when it is sent (the report thread sees its
  callback afterwards, as on hardware); VDEC outputs frames in decoding order to the sends
  in the order they came (a send whose frame the decoder holds back gets its callback when
  a later send or the channel's destruction releases it; frames beyond the sends are
  decoded and dropped); a send that never gets a frame is called back with the picture's
  ret code ACL_ERROR_FAILURE.
* VDEC output: YUV420SP NV12/NV21 at the stream's size, or scaled to
  ``out_pic_width`` x ``out_pic_height`` when both are set (even; DECISION: libswscale's
  bicubic scaling), width stride = width aligned to 16, height stride = height aligned
  to 2 (the vdec sample's ``vdec_out_width`` / ``vdec_out_height``), unless the picture
  description sets larger ones; the description's size must hold
  wstride x hstride x 3/2 (else its ret code is ACL_ERROR_INVALID_PARAM and a
  ``media-overflow`` report). VENC input: the same layout from the channel's width, height
  and format. VENC output: the channel's buffer (``venc_set_channel_desc_buf_addr`` /
  ``_buf_size``, else DECISION: 8 MiB of DVPP memory the channel allocates), written as a
  ring; the output stream description is destroyed when the callback returns.
* H.265 (H265_MAIN_LEVEL 0) and H.264 (baseline, main, high: 1, 2, 3) through PyAV
  (``pip install 'ascend-memsim[media]'``; its wheels bundle libx264 and libx265), with
  zero-latency tuning, so each sent picture gives one frame. Without PyAV the calls that
  code return ACL_ERROR_RT_FEATURE_NOT_SUPPORT 207000 with a message saying what to install
  (as the compute plane does without numpy).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar, cast

from ..memory.args import UINT32_MAX, as_int
from ..memory.constants import CallbackBlock, MiB
from ..memory.errors import (
    AclError,
    FormatNotMatch,
    InvalidArgument,
    InvalidArgumentType,
    NoCallbackStream,
    NotOnThisProduct,
    StreamNotSubscribed,
    UnreadableImage,
)
from .codec import Codecs
from .constants import PixelFormat, StreamFormat
from .descs import INT32, U32, UINT8, UINT64, Desc, PicDesc, StreamDesc
from .plane import MediaPlane

__all__ = ["VdecChannelDesc", "VencChannelDesc", "VdecFrameConfig", "VencFrameConfig",
           "Video", "require_av", "VENC_BUFFER_DEFAULT"]

NV12 = PixelFormat.PIXEL_FORMAT_YUV_SEMIPLANAR_420
NV21 = PixelFormat.PIXEL_FORMAT_YVU_SEMIPLANAR_420
#: DECISION: a VENC channel without a buffer of the program's gets 8 MiB of DVPP memory
VENC_BUFFER_DEFAULT = 8 * MiB
#: DECISION: VENC takes 128 x 128 to 4096 x 4096 pictures (the venc sample's 128 x 128 is the
#: smallest the DVPP VENC chapters give)
VENC_MIN, VENC_MAX = 128, 4096
_DECODERS: dict[int, str] = {StreamFormat.H265_MAIN_LEVEL: "hevc"}
_ENCODERS: dict[int, tuple[str, str | None]]
_ENCODERS = {StreamFormat.H265_MAIN_LEVEL: ("libx265", None),
             StreamFormat.H264_BASELINE_LEVEL: ("libx264", "baseline"),
             StreamFormat.H264_MAIN_LEVEL: ("libx264", "main"),
             StreamFormat.H264_HIGH_LEVEL: ("libx264", "high")}


def require_av() -> Any:
    """The PyAV module, or FeatureNotSupported saying how to get it."""
    try:
        import av
    except ImportError:  # pragma: no cover - PyAV is in the media extra
        from ..memory.errors import FeatureNotSupported
        raise FeatureNotSupported("video decoding and encoding (VDEC/VENC) use PyAV, which "
                                  "is not installed: pip install 'ascend-memsim[media]'") from None
    return av


@dataclass(eq=False)
class VdecChannelDesc(Desc):
    """aclvdecChannelDesc (defaults: acl_dvpp.h; out format NV12, H.265)."""

    channel_id: int = 0
    thread_id: int = 0
    callback: Any = None
    en_type: int = int(StreamFormat.H265_MAIN_LEVEL)
    out_pic_format: int = int(NV12)
    out_pic_width: int = 0
    out_pic_height: int = 0
    ref_frame_num: int = 0
    out_mode: int = 0
    bit_depth: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    #: the open channel (None while closed)
    state: Any = None
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {
        "channel_id": U32, "thread_id": UINT64, "en_type": INT32, "out_pic_format": INT32,
        "out_pic_width": U32, "out_pic_height": U32, "ref_frame_num": U32, "out_mode": U32,
        "bit_depth": U32}
    made_by = "aclvdecCreateChannelDesc"
    destroyed_by = "aclvdecDestroyChannelDesc"
    kind = "vdec channel description"


@dataclass(eq=False)
class VencChannelDesc(Desc):
    """aclvencChannelDesc."""

    channel_id: int = 0
    thread_id: int = 0
    callback: Any = None
    en_type: int = int(StreamFormat.H265_MAIN_LEVEL)
    pic_format: int = int(NV12)
    pic_width: int = 0
    pic_height: int = 0
    key_frame_interval: int = 0
    buf_addr: int = 0
    buf_size: int = 0
    max_bit_rate: int = 0
    rc_mode: int = 0
    src_rate: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    state: Any = None
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {
        "thread_id": UINT64, "en_type": INT32, "pic_format": INT32, "pic_width": U32,
        "pic_height": U32, "key_frame_interval": U32, "buf_addr": UINT64, "buf_size": U32,
        "max_bit_rate": U32, "rc_mode": U32, "src_rate": U32}
    made_by = "aclvencCreateChannelDesc"
    destroyed_by = "aclvencDestroyChannelDesc"
    kind = "venc channel description"


#: a VDEC or VENC channel's description
ChannelDescs = VdecChannelDesc | VencChannelDesc


@dataclass(eq=False)
class VdecFrameConfig(Desc):
    """aclvdecFrameConfig (no field pyacl sets)."""

    made_by = "aclvdecCreateFrameConfig"
    destroyed_by = "aclvdecDestroyFrameConfig"
    kind = "vdec frame config"


@dataclass(eq=False)
class VencFrameConfig(Desc):
    """aclvencFrameConfig: force an I frame; end of stream."""

    force_i_frame: int = 0
    eos: int = 0
    FIELDS: ClassVar[dict[str, tuple[int, int]]] = {"force_i_frame": UINT8, "eos": UINT8}
    made_by = "aclvencCreateFrameConfig"
    destroyed_by = "aclvencDestroyFrameConfig"
    kind = "venc frame config"


@dataclass(eq=False)
class _Open:
    """An open channel: its callback stream, its codec, what waits for a frame."""

    stream: int
    thread_id: int
    callback: Any
    codec: Any
    #: re-entrant: a callback run on the sending thread may send again
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: VDEC: sends waiting for a frame (stream desc, pic desc snapshot, user data)
    pending: deque[Any] = field(default_factory=deque)
    #: VENC: the output buffer, whether the channel allocated it, the ring's next offset
    buffer: int = 0
    buffer_size: int = 0
    owned: bool = False
    offset: int = 0
    frames: int = 0
    #: VENC: the end of stream was sent (the encoder is flushed; no more frames)
    ended: bool = False
    #: VDEC: the output size the channel scales frames to (None: the stream's own)
    scale: tuple[Any, ...] | None = None


def _align(value: int, to: int) -> int:
    return -(-value // to) * to


class Video:
    """The VDEC and VENC calls of one media plane.

    Size: about 390 lines, on purpose: VDEC and VENC share the channel life cycle (``_open``
    subscribes the channel's thread to a stream of its own, ``_close`` flushes and waits for
    every callback, ``_call_back`` hands a frame's callback to that thread), and each side is
    create, send, flush, destroy in the order the vendor's samples call them. The coding itself
    is PyAV's; the channel descriptions and frame configs are the classes above.
    """

    def __init__(self, plane: MediaPlane) -> None:
        self.plane = plane
        self.runtime = plane.runtime

    # -- channels -----------------------------------------------------------------------------

    def set_callback(self, desc: object, cls: type[ChannelDescs], fn: object) -> None:
        """vdec/venc_set_channel_desc_callback (pyacl: the callable itself)."""
        obj = self.plane.get(desc, cls, "channel_desc")
        if not callable(fn):
            raise InvalidArgumentType(f"the callback must be callable, got {type(fn).__name__}")
        with self.plane.handles.lock:
            obj.callback = fn

    def callback(self, desc: object, cls: type[ChannelDescs]) -> Any:
        obj = self.plane.get(desc, cls, "channel_desc")
        if obj.callback is None:
            raise InvalidArgument("no callback was set on the channel description")
        return obj.callback

    def _open(self, desc: ChannelDescs, call: str, codec: Any) -> _Open:
        """Subscribe the channel's thread to a stream of its own."""
        if self.runtime.profile.soc_name.startswith("Ascend950"):
            raise NotOnThisProduct(f"{call}: {self.runtime.profile.description} has no "
                                   f"VDEC/VENC (DVPP chapters, product support tables)")
        if desc.state is not None:
            raise InvalidArgument(f"{call}: the channel is already created")
        if desc.callback is None:
            raise InvalidArgument(f"{call}: set the callback first "
                                  f"(acl.media.*_set_channel_desc_callback)")
        streams, callbacks = self.runtime.streams, self.runtime.callbacks
        stream = streams.create_stream()
        try:
            callbacks.subscribe(desc.thread_id, stream)
        except AclError as error:
            streams.destroy_stream(stream)
            raise type(error)(f"{call}: the channel's thread_id {desc.thread_id}: "
                              f"{error.message}") from None
        return _Open(stream, desc.thread_id, desc.callback, codec)

    def _close(self, state: _Open, flush: Any) -> None:
        """Flush, wait for every callback, unsubscribe, drop the stream."""
        with state.lock:
            flush()
            callbacks, streams = self.runtime.callbacks, self.runtime.streams
            try:
                # a blocking no-op after the frames' callbacks: when it has run, so have they
                callbacks.launch(lambda _: None, None, int(CallbackBlock.BLOCK), state.stream)
                streams.synchronize_stream(state.stream)
            except NoCallbackStream:
                pass    # the thread stopped: every callback ran on the caller (_call_back)
            finally:
                try:
                    callbacks.unsubscribe(state.thread_id, state.stream)
                except StreamNotSubscribed:
                    pass
                streams.destroy_stream(state.stream)

    def _call_back(self, state: _Open, args: tuple[Any, ...], cleanup: Any = None) -> None:
        """Hand ``callback(*args)`` to the channel's thread (through its stream)."""
        fn = state.callback

        def report(_user_data: Any) -> None:
            try:
                fn(*args)
            finally:
                if cleanup is not None:
                    cleanup()

        try:
            self.runtime.callbacks.launch(report, None, int(CallbackBlock.NO_BLOCK),
                                          state.stream)
        except NoCallbackStream:
            # the thread stopped and dropped its subscription: run it here (module doc)
            report(None)
            return
        self.runtime.streams.synchronize_stream(state.stream)

    def _read(self, call: str, addr: int, size: int) -> bytes:
        return cast("bytes", self.runtime.data.read_bytes(call, addr, size))

    def _write(self, call: str, addr: int, payload: bytes) -> None:
        self.runtime.data.write_bytes(call, addr, payload)

    # -- VDEC ---------------------------------------------------------------------------------

    def vdec_create(self, desc: object) -> None:
        call = "aclvdecCreateChannel"
        obj = self.plane.get(desc, VdecChannelDesc, "channel_desc")
        with self.plane.handles.lock:
            if obj.out_pic_format not in (NV12, NV21):
                raise FormatNotMatch(f"{call}: VDEC outputs YUV420SP NV12 (1) or NV21 (2), "
                                     f"not format {obj.out_pic_format}")
            if obj.en_type not in StreamFormat._value2member_map_:
                raise InvalidArgument(f"{call}: en_type {obj.en_type} is not an "
                                      f"acldvppStreamFormat (0 H.265 main, 1-3 H.264)")
            size = (obj.out_pic_width, obj.out_pic_height)
            if any(size) and (not all(size) or size[0] % 2 or size[1] % 2):
                raise InvalidArgument(f"{call}: out_pic_width x out_pic_height {size[0]} x "
                                      f"{size[1]}: both 0 (no scaling) or both even")
            av = require_av()
            name = _DECODERS.get(obj.en_type, "h264")
            obj.state = self._open(obj, call, av.CodecContext.create(name, "r"))
            obj.state.scale = size if all(size) else None

    def vdec_destroy(self, desc: object) -> None:
        obj = self.plane.get(desc, VdecChannelDesc, "channel_desc")
        with self.plane.handles.lock:
            state = obj.state
            if state is None:
                raise InvalidArgument("aclvdecDestroyChannel: the channel is not created")
            obj.state = None
        self._close(state, lambda: self._vdec_flush(state))

    def vdec_send(self, desc: object, stream_desc: object, pic_desc: object, config: object,
                  user_data: Any) -> None:
        """aclvdecSendFrame: decode the stream description's bytes now (see the module)."""
        call = "aclvdecSendFrame"
        obj = self.plane.get(desc, VdecChannelDesc, "channel_desc")
        state = obj.state
        if state is None:
            raise InvalidArgument(f"{call}: the channel is not created "
                                  f"(acl.media.vdec_create_channel)")
        src = self.plane.get(stream_desc, StreamDesc, "input")
        out = self.plane.get(pic_desc, PicDesc, "output")
        self.plane.get(config, VdecFrameConfig, "config")
        checker = Codecs(self.plane)
        checker.check_device(call, "the stream's data", src.data, src.size, False)
        checker.check_device(call, "the output picture's data", out.data, out.size, True)
        raw = self._read(call, src.data, src.size)
        with state.lock:
            state.pending.append((src, out, user_data, int(obj.out_pic_format)))
            frames = []
            try:
                for packet in state.codec.parse(raw):
                    frames += state.codec.decode(packet)
                for packet in state.codec.parse(b""):
                    frames += state.codec.decode(packet)
            except (require_av().FFmpegError, ValueError):
                # the decoder refused the stream's bytes: the frame fails, not the program
                self._vdec_fail(state, src, out, user_data)
                return
            self._vdec_frames(state, frames)

    def vdec_send_skipped(self, desc: object, stream_desc: object, config: object,
                          user_data: Any) -> None:
        """aclvdecSendSkippedFrame: the frame is decoded for reference only; its callback
        gets no picture (output 0)."""
        call = "aclvdecSendSkippedFrame"
        obj = self.plane.get(desc, VdecChannelDesc, "channel_desc")
        state = obj.state
        if state is None:
            raise InvalidArgument(f"{call}: the channel is not created "
                                  f"(acl.media.vdec_create_channel)")
        src = self.plane.get(stream_desc, StreamDesc, "input")
        self.plane.get(config, VdecFrameConfig, "config")
        Codecs(self.plane).check_device(call, "the stream's data", src.data, src.size, False)
        raw = self._read(call, src.data, src.size)
        with state.lock:
            ret = 0
            try:
                for chunk in (raw, b""):
                    for packet in state.codec.parse(chunk):
                        state.codec.decode(packet)
            except (require_av().FFmpegError, ValueError):
                ret = int(UnreadableImage.code)
            with self.plane.handles.lock:
                src.ret_code = ret
            self._call_back(state, (src.handle, 0, user_data))

    def _vdec_fail(self, state: _Open, src: Any, out: Any, user_data: Any) -> None:
        state.pending.remove(next(p for p in state.pending if p[1] is out))
        with self.plane.handles.lock:
            out.ret_code = int(UnreadableImage.code)
            src.ret_code = int(UnreadableImage.code)
        self._call_back(state, (src.handle, out.handle, user_data))

    def _vdec_frames(self, state: _Open, frames: list[Any]) -> None:
        call = "aclvdecSendFrame"
        for frame in frames:
            if not state.pending:
                break
            src, out, user_data, fmt = state.pending.popleft()
            if state.scale is not None:
                frame = frame.reformat(width=state.scale[0], height=state.scale[1])
            self._vdec_store(call, frame, out, fmt)
            self._call_back(state, (src.handle, out.handle, user_data))

    def _vdec_store(self, call: str, frame: Any, out: PicDesc, fmt: int) -> None:
        width, height = frame.width - frame.width % 2, frame.height - frame.height % 2
        with self.plane.handles.lock:
            wstride = max(out.width_stride, _align(width, 16))
            hstride = max(out.height_stride, _align(height, 2))
            data, size = out.data, out.size
        need = wstride * hstride * 3 // 2
        if need > size:
            with self.runtime.data.lock:
                region = self.runtime.data.region_at(data, 1)
            self.runtime.sanitizer.media_overflow(
                call, data + size, need - size, True, region,
                f"the decoded {width} x {height} frame is {need} bytes at {data:#x}, but the "
                f"picture description gives {size}")
            with self.plane.handles.lock:
                out.ret_code = int(InvalidArgument.code)
            return
        from ..compute.tensors import require_numpy
        np = require_numpy()
        nv12 = frame.to_ndarray(format="nv12")
        pic = np.zeros(need, np.uint8)
        y = pic[:wstride * hstride].reshape(hstride, wstride)
        uv = pic[wstride * hstride:].reshape(hstride // 2, wstride)
        uv[:] = 128
        y[:height, :width] = nv12[:height, :width]
        chroma = nv12[frame.height:frame.height + height // 2, :width]
        if fmt == NV21:
            chroma = chroma.reshape(height // 2, width // 2, 2)[:, :, ::-1].reshape(
                height // 2, width)
        uv[:height // 2, :width] = chroma
        self._write(call, data, pic.tobytes())
        with self.plane.handles.lock:
            out.width, out.height = width, height
            out.width_stride, out.height_stride = wstride, hstride
            out.format, out.ret_code = fmt, 0

    def _vdec_flush(self, state: _Open) -> None:
        frames = []
        try:
            frames = list(state.codec.decode(None))
        except (require_av().FFmpegError, ValueError):
            frames = []     # a decoder left broken by a bad stream
        self._vdec_frames(state, frames)
        while state.pending:
            src, out, user_data, _ = state.pending.popleft()
            with self.plane.handles.lock:
                out.ret_code = int(UnreadableImage.code)
            self._call_back(state, (src.handle, out.handle, user_data))

    # -- VENC ---------------------------------------------------------------------------------

    def venc_create(self, desc: object) -> None:
        call = "aclvencCreateChannel"
        obj = self.plane.get(desc, VencChannelDesc, "channel_desc")
        with self.plane.handles.lock:
            if obj.pic_format not in (NV12, NV21):
                raise FormatNotMatch(f"{call}: VENC takes YUV420SP NV12 (1) or NV21 (2), not "
                                     f"format {obj.pic_format}")
            if obj.en_type not in _ENCODERS:
                raise InvalidArgument(f"{call}: en_type {obj.en_type} is not an "
                                      f"acldvppStreamFormat (0 H.265 main, 1-3 H.264)")
            w, h = obj.pic_width, obj.pic_height
            if not (VENC_MIN <= w <= VENC_MAX and VENC_MIN <= h <= VENC_MAX) or w % 2 or h % 2:
                raise InvalidArgument(f"{call}: the picture is {w} x {h}; VENC takes even "
                                      f"sizes from {VENC_MIN} to {VENC_MAX}")
            codec = self._encoder(obj)
            state = self._open(obj, call, codec)
            try:
                self._venc_buffer(obj, state, call)
            except AclError:
                self._close(state, lambda: None)
                raise
            obj.channel_id = state.stream & UINT32_MAX
            obj.state = state

    def _encoder(self, obj: VencChannelDesc) -> Any:
        av = require_av()
        name, profile = _ENCODERS[obj.en_type]
        codec = av.CodecContext.create(name, "w")
        codec.width, codec.height, codec.pix_fmt = obj.pic_width, obj.pic_height, "yuv420p"
        rate = obj.src_rate or 30
        codec.time_base, codec.framerate = Fraction(1, rate), Fraction(rate, 1)
        codec.gop_size = obj.key_frame_interval or 30
        options = {"tune": "zerolatency"}
        if name == "libx265":
            options["x265-params"] = "log-level=error"
        elif profile:
            options["profile"] = profile
        codec.options = options
        return codec

    def _venc_buffer(self, obj: VencChannelDesc, state: _Open, call: str) -> None:
        if obj.buf_addr:
            if not obj.buf_size:
                raise InvalidArgument(f"{call}: buf_addr is set but buf_size is 0")
            Codecs(self.plane).check_device(call, "the channel's buffer", obj.buf_addr,
                                             obj.buf_size, True)
            state.buffer, state.buffer_size = obj.buf_addr, obj.buf_size
        else:
            size = obj.buf_size or VENC_BUFFER_DEFAULT
            state.buffer = self.runtime.dvpp_malloc(size)
            state.buffer_size, state.owned = size, True

    def venc_destroy(self, desc: object) -> None:
        obj = self.plane.get(desc, VencChannelDesc, "channel_desc")
        with self.plane.handles.lock:
            state = obj.state
            if state is None:
                raise InvalidArgument("aclvencDestroyChannel: the channel is not created")
            obj.state = None
        try:
            self._close(state, lambda: self._venc_end(state, None))
        finally:
            if state.owned:
                self.runtime.dvpp_free(state.buffer)

    def venc_send(self, desc: object, pic_desc: object, reserve: object, config: object,
                  user_data: Any) -> None:
        """aclvencSendFrame: encode the picture now (eos in the config: flush instead)."""
        call = "aclvencSendFrame"
        obj = self.plane.get(desc, VencChannelDesc, "channel_desc")
        state = obj.state
        if state is None:
            raise InvalidArgument(f"{call}: the channel is not created "
                                  f"(acl.media.venc_create_channel)")
        if as_int(reserve, "reserve", 0, (1 << 64) - 1):
            raise InvalidArgument(f"{call}: reserve must be 0")
        frame_config = self.plane.get(config, VencFrameConfig, "config")
        if frame_config.eos:
            with state.lock:
                self._venc_end(state, user_data)
            return
        if state.ended:
            raise InvalidArgument(f"{call}: the end of stream was sent; destroy the channel "
                                  f"(a new stream needs a new channel)")
        pic = self.plane.get(pic_desc, PicDesc, "input")
        with self.plane.handles.lock:
            w, h = obj.pic_width, obj.pic_height
            wstride = max(pic.width_stride, _align(w, 16))
            hstride = max(pic.height_stride, _align(h, 2))
            data, size, fmt = pic.data, pic.size, obj.pic_format
        need = wstride * hstride * 3 // 2
        Codecs(self.plane).check_device(call, "the input picture's data", data, size, False)
        if size < need:
            raise InvalidArgument(f"{call}: the picture description's size {size} is below the "
                                  f"{need} bytes of a {w} x {h} picture ({wstride} x {hstride} "
                                  f"strides)")
        from ..compute.tensors import require_numpy
        np = require_numpy()
        av = require_av()
        raw = np.frombuffer(self._read(call, data, need), np.uint8)
        y = raw[:wstride * hstride].reshape(hstride, wstride)[:h, :w]
        uv = raw[wstride * hstride:].reshape(hstride // 2, wstride)[:h // 2, :w]
        if fmt == NV21:
            uv = uv.reshape(h // 2, w // 2, 2)[:, :, ::-1].reshape(h // 2, w)
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(np.vstack([y, uv])),
                                           format="nv12")
        with state.lock:
            frame.pts = state.frames
            state.frames += 1
            if frame_config.force_i_frame:
                frame.pict_type = av.video.frame.PictureType.I
            self._venc_packets(state, pic.handle, user_data, state.codec.encode(frame))

    def _venc_end(self, state: _Open, user_data: Any) -> None:
        """Flush the encoder once (the eos frame, or the channel's destruction)."""
        if not state.ended:
            state.ended = True
            self._venc_packets(state, 0, user_data, state.codec.encode(None))

    def _venc_packets(self, state: _Open, pic: int, user_data: Any, packets: Any) -> None:
        call = "aclvencSendFrame"
        plane = self.plane
        for packet in packets:
            payload = bytes(packet)
            ret = 0
            if len(payload) > state.buffer_size:
                ret, payload = int(InvalidArgument.code), b""
            if state.offset + len(payload) > state.buffer_size:
                state.offset = 0
            addr = state.buffer + state.offset
            if payload:
                self._write(call, addr, payload)
            state.offset += _align(len(payload), 64)
            handle = plane.create(StreamDesc, data=addr, size=len(payload))
            with plane.handles.lock:
                plane.get(handle, StreamDesc).ret_code = ret

            def cleanup(handle: Any = handle) -> None:
                try:
                    plane.destroy(handle, StreamDesc)
                except AclError:
                    pass    # the callback destroyed it itself

            self._call_back(state, (pic, handle, user_data), cleanup)
