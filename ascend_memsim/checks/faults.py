"""Fault injection: make chosen allocations fail with the runtime's real error codes.

A fault is a device interceptor (see
:attr:`ascend_memsim.memory.device.Device.interceptors`): it sees each checked allocation
:class:`~ascend_memsim.memory.rules.Request` before it is placed and either raises an
:class:`~ascend_memsim.memory.errors.AclError` (the call fails, the device is unchanged, the
pyacl face returns the error's code) or refuses huge pages (HUGE_FIRST then falls back to
normal pages; HUGE_ONLY fails with ACL_ERROR_RT_MEMORY_ALLOCATION).

>>> from ascend_memsim import Runtime, OutOfDeviceMemory
>>> with Runtime("A2", hbm_bytes=64 * 2**20) as rt, FailNth(2, api="malloc").installed(rt):
...     _ = rt.set_device(0)
...     first = rt.malloc(100)
...     try:
...         rt.malloc(100)
...     except OutOfDeviceMemory as e:
...         print(e.code.vendor_name)
ACL_ERROR_RT_MEMORY_ALLOCATION

Four kinds, each with the filters ``api``, ``size``, ``policy`` and ``device``:
:class:`FailNth` (the Nth matching call), :class:`FailWhen` (every matching call),
:class:`FailRandomly` (a seeded probability) and :class:`HugePagesExhausted`.
:func:`parse_faults` builds them from JSON-like specs, as the acl.init config
(``{"memsim": {"faults": [{"nth": 3, "api": "malloc"}]}}``) and the pytest marker give them.
:func:`ascend_memsim.testing.exhaustive.exhaustive` builds on them.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import numbers
import random
import reprlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, cast

from ..memory.args import SIZE_MAX, UINT32_MAX, int_or_none
from ..memory.constants import MallocPolicy
from ..memory.errors import (
    AclError,
    InvalidArgument,
    InvalidArgumentType,
    OutOfDeviceMemory,
    error_classes,
)
from ..memory.rules import Api, Page, PhysicalApi, Request, parse_api, policy_name
from ..memory.units import parse_size
from ..runtime.active import current_runtime
from ..runtime.config import register_config_key
from ..runtime.runtime import Runtime

__all__ = [
    "Fault", "FailNth", "FailWhen", "FailRandomly", "HugePagesExhausted", "parse_faults",
    "parse_fault", "inject", "error_class", "call_text", "count_arg", "SPEC_KEYS",
]

#: The largest policy word: Device.allocate takes aclrtMemMallocPolicy as an unsigned 32-bit int.


def error_class(error: object) -> type[AclError]:
    """An AclError subclass from a class, a class name or an aclError code."""
    if isinstance(error, type) and issubclass(error, AclError):
        return error
    classes = {cls.__name__: cls for cls in error_classes()}
    if isinstance(error, str) and error in classes:
        return classes[error]
    if isinstance(error, int) and not isinstance(error, bool):
        # Several classes may share a code (InvalidPointer is an InvalidRuntimeParam): take
        # the most general one, the class whose base does not carry the same code.
        matching = [c for c in classes.values() if int(c.code) == error
                    and not (c.__base__ is not None and issubclass(c.__base__, AclError)
                             and int(c.__base__.code) == error)]
        if matching:
            return sorted(matching, key=lambda c: c.__name__)[0]
    known = sorted(f"{n} ({int(c.code)})" for n, c in classes.items())
    raise InvalidArgument(f"error={error!r} is not an AclError class, class name or aclError "
                          f"code; write one of {known}, e.g. error='OutOfDeviceMemory'")


def count_arg(value: object, name: str, write: str, lo: int | None = 1) -> int:
    """``value`` as an int >= ``lo`` (None: no bound).

    Raises:
        InvalidArgument: not an integer (the message names its type) or below ``lo``; the
            message ends with ``write``, which says what to write instead.
    """
    number = int_or_none(value)
    if number is None:
        raise InvalidArgument(f"{name}={value!r} is a {type(value).__name__}, not an int: "
                              f"{write}")
    if lo is not None and number < lo:
        raise InvalidArgument(f"{name}={value!r}: {write}")
    return number


_SIZE_FILTERS = ("write an int (exact size) or text such as '2MiB', [lo, hi] or "
                 "{'min': lo, 'max': hi} (inclusive, None for no bound), a range, or a callable "
                 "size -> bool")


def _size_predicate(size: object) -> Callable[[int], bool] | None:
    """The filter on request sizes (1 to SIZE_MAX bytes) that ``size`` describes.

    Raises:
        InvalidArgument: not a size filter, or one that matches every size or none.
    """
    if size is None or callable(size):
        return size
    if isinstance(size, range):
        # The first element >= 1 of the range walked upwards: if it is not in the range or
        # above SIZE_MAX, no request can ever match.
        up = size if size.step > 0 else size[::-1]
        first = up.start if up.start >= 1 else up.start - (up.start - 1) // up.step * up.step
        if first not in size or first > SIZE_MAX:
            raise InvalidArgument(f"size={size!r} holds no allocation size (1 to {SIZE_MAX}), "
                                  f"so the fault would never fire; {_SIZE_FILTERS}")
        return size.__contains__
    if isinstance(size, str):   # "2MiB": the one size parser
        size = parse_size(size)
    exact = int_or_none(size)
    if exact is not None:
        if not 1 <= exact <= SIZE_MAX:
            raise InvalidArgument(f"size={size!r} is not an allocation size; write a size "
                                  f"from 1 to {SIZE_MAX}")
        return exact.__eq__
    if isinstance(size, Mapping) and set(size) <= {"min", "max"}:
        bounds = (size.get("min"), size.get("max"))
    elif isinstance(size, (tuple, list)) and len(size) == 2:
        bounds = tuple(size)
    else:
        raise InvalidArgument(f"size={size!r} is not a size filter; {_SIZE_FILTERS}")
    if bounds == (None, None):
        raise InvalidArgument(f"size={size!r} has no bound, so it matches every call; give "
                              f"'min' and/or 'max', or leave size out")
    lo, hi = 1, SIZE_MAX
    for which, value in zip(("min", "max"), bounds, strict=True):
        if value is None:
            continue
        number = parse_size(value) if isinstance(value, str) else int_or_none(value)
        if number is None:
            raise InvalidArgument(f"size={size!r} is not a size filter; {_SIZE_FILTERS}")
        if not 1 <= number <= SIZE_MAX:
            raise InvalidArgument(f"size {which}={value!r} is not an allocation size; write a "
                                  f"bound from 1 to {SIZE_MAX}, or None for no bound")
        if which == "min":
            lo = number
        else:
            hi = number
    if lo > hi:
        raise InvalidArgument(f"size={size!r}: min {lo} > max {hi}, so it never fires; write "
                              f"min <= max")
    return lambda n: lo <= n <= hi


def _policy_predicate(policy: object) -> Callable[[int], bool] | None:
    """The filter on policy words (unsigned 32-bit, flags included) that ``policy`` describes.

    Raises:
        InvalidArgument: not a policy filter, or a value no policy word can have.
    """
    if policy is None or callable(policy):
        return policy
    values = policy if isinstance(policy, (list, tuple, set, frozenset)) else [policy]
    words = [int_or_none(v) for v in values]
    if not words or None in words:
        raise InvalidArgument(f"policy={policy!r} is not a policy filter; write a policy word "
                              f"(e.g. {int(MallocPolicy.HUGE_ONLY)} for HUGE_ONLY), a list of "
                              f"them, or a callable policy -> bool")
    for word in cast("list[int]", words):  # no None left
        if not 0 <= word <= UINT32_MAX:
            raise InvalidArgument(f"policy={policy!r}: {word} is not a policy word (0 to "
                                  f"0x{UINT32_MAX:X}, an unsigned 32-bit aclrtMemMallocPolicy), "
                                  f"so the fault would never fire; write e.g. "
                                  f"{int(MallocPolicy.HUGE_ONLY)} for HUGE_ONLY")
    return frozenset(words).__contains__


def _apis(api: object) -> frozenset[Api | PhysicalApi] | None:
    if api is None:
        return None
    names = [api] if isinstance(api, str) else api
    if not isinstance(names, (list, tuple, set, frozenset)) or not names:
        raise InvalidArgument(f"api={api!r}: write an API name such as 'malloc' or "
                              f"'aclrtMallocAlign32', or a list of them")
    return frozenset(parse_api(n) for n in names)


def _filter_text(value: object, word: Callable[[int], str] | None = None) -> str:
    """A filter as written: a function by its name, a policy word by its name (``word``),
    anything else by its repr (bounded)."""
    if callable(value):
        return getattr(value, "__name__", None) or type(value).__name__
    if word is not None:
        # a filter shown is one that was checked: its policy words are ints
        if isinstance(value, (list, tuple, set, frozenset)):
            return "[" + ", ".join(word(int_or_none(v))  # type: ignore[arg-type]
                                   for v in sorted(value)) + "]"
        return word(int_or_none(value))  # type: ignore[arg-type]
    return reprlib.repr(value)


def call_text(request: Request) -> str:
    """``aclrtMalloc(size=100, policy=HUGE_FIRST)``: the failed call, for messages."""
    if request.api is PhysicalApi.MALLOC_PHYSICAL:
        return f"{request.api.value}(size={request.size}, {request.pages[0].value} pages)"
    return (f"{request.api.value}(size={request.size}, "
            f"policy={policy_name(request.policy)})")


class Fault:
    """Base of the fault kinds: the filters, the counters, install/uninstall.

    ``api`` (a name or list: ``"malloc"``, ``"aclrtMallocAlign32"``), ``size`` (exact int,
    ``(lo, hi)`` or ``{"min": lo, "max": hi}`` inclusive, range or predicate), ``policy`` (a
    policy word, a list of them, or a predicate on the whole word, flags included) and
    ``device`` narrow which calls the fault considers; ``error`` is the AclError raised
    (class, class name or code; default :class:`~ascend_memsim.memory.errors.OutOfDeviceMemory`,
    ACL_ERROR_RT_MEMORY_ALLOCATION). Integers may be any type with ``__index__`` (numpy).

    ``calls`` counts the matching calls seen, ``injected`` the requests failed (or refused
    huge pages). Thread-safe. A fault may be installed in one runtime at a time.

    Raises:
        InvalidArgument: an unknown API or error, or a filter that is malformed, matches every
            call or can never match (the message says what to write).
    """

    def __init__(self, *, api: object = None, size: object = None, policy: object = None,
                 device: int | None = None, error: object = OutOfDeviceMemory) -> None:
        self.api = _apis(api)
        self._size = _size_predicate(size)
        self._policy = _policy_predicate(policy)
        # the filters as the caller wrote them, for the repr (and so for messages)
        self._size_text = None if size is None else _filter_text(size)
        self._policy_text = None if policy is None else _filter_text(
            policy, lambda word: policy_name(word).split(" (")[0])
        self.device = None if device is None else count_arg(
            device, "device", "write a device id >= 0, or None for all", lo=0)
        self.error = error_class(error)
        self._reset()

    def fresh(self) -> Fault:
        """A copy with the same settings, fresh counters, not installed."""
        twin = copy.copy(self)
        twin._reset()
        return twin

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._runtime: Runtime | None = None
        self.calls = 0
        #: The requests this fault failed (or refused pages to), in order.
        self.injected: list[Request] = []

    def matches(self, request: Request) -> bool:
        """Whether ``request`` passes the filters (api, size, policy, device)."""
        return ((self.api is None or request.api in self.api)
                and (self.device is None or request.device_id == self.device)
                and (self._size is None or self._size(request.size))
                and (self._policy is None or self._policy(request.policy)))

    def __call__(self, request: Request) -> Iterable[Page] | None:
        if not self.matches(request):
            return None
        with self._lock:
            self.calls += 1
            if not self._fires(request):
                return None
            self.injected.append(request)
        return self._act(request)

    def _fires(self, request: Request) -> bool:
        """Whether this matching call (the ``self.calls``-th) is hit; under the fault's lock."""
        return True

    def _act(self, request: Request) -> Iterable[Page] | None:
        raise self.error(f"injected fault {self!r} failed call #{self.calls} to "
                         f"{call_text(request)} on device {request.device_id}")

    def install(self, runtime: Runtime | None = None) -> Fault:
        """Add this fault to ``runtime`` (default: the active one), for every device; self."""
        runtime = current_runtime() if runtime is None else runtime
        if self._runtime is not None:
            raise InvalidArgument(f"{self!r} is already installed; uninstall() it first or "
                                  f"make a second fault")
        runtime.add_interceptor(self)
        self._runtime = runtime
        return self

    def uninstall(self) -> None:
        """Remove this fault from the runtime it was installed in (no-op if none)."""
        if self._runtime is not None:
            self._runtime.remove_interceptor(self)
            self._runtime = None

    @contextlib.contextmanager
    def installed(self, runtime: Runtime | None = None) -> Iterator[Fault]:
        """``with fault.installed(rt):`` install for the block's duration."""
        self.install(runtime)
        try:
            yield self
        finally:
            self.uninstall()

    def __enter__(self) -> Fault:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    def _args(self) -> list[str]:
        """The kind's own arguments, for the repr."""
        return []

    def __repr__(self) -> str:
        parts = self._args()
        if self.api is not None:
            parts.append(f"api={sorted(a.pyacl_name for a in self.api)}")
        if self._size is not None:
            parts.append(f"size={self._size_text}")
        if self._policy is not None:
            parts.append(f"policy={self._policy_text}")
        if self.device is not None:
            parts.append(f"device={self.device}")
        if self.error is not OutOfDeviceMemory:
            parts.append(f"error={self.error.__name__}")
        return f"{type(self).__name__}({', '.join(parts)})"


class FailNth(Fault):
    """Fail the ``n``-th matching call (1-based), and the ``times - 1`` after it.

    ``times=None`` fails every matching call from the n-th on (memory "runs out").

    Raises:
        InvalidArgument: n or times not an integer, or below 1.
    """

    def __init__(self, n: int, *, times: int | None = 1, **filters: Any) -> None:
        self.n = count_arg(n, "n", "calls are counted from 1; write 1 for the first matching "
                                "call (\"nth\" in a spec)")
        self.times = None if times is None else count_arg(
            times, "times", "write a count >= 1, or None for every call from the n-th on")
        super().__init__(**filters)

    def _fires(self, request: Request) -> bool:
        return self.calls >= self.n and (self.times is None or self.calls < self.n + self.times)

    def _args(self) -> list[str]:
        return [str(self.n)] + ([] if self.times == 1 else [f"times={self.times}"])


class FailWhen(Fault):
    """Fail every call that matches the filters, e.g. ``FailWhen(size=(2 * MiB, None))``."""


class FailRandomly(Fault):
    """Fail each matching call with ``probability``, from a private ``random.Random(seed)``.

    The same seed and the same program fail the same calls.

    Raises:
        InvalidArgument: a probability outside [0, 1], or a seed that is not an integer.
    """

    def __init__(self, probability: float, *, seed: int = 0, **filters: Any) -> None:
        if (isinstance(probability, bool) or not isinstance(probability, numbers.Real)
                or not 0.0 <= probability <= 1.0):
            raise InvalidArgument(f"probability={probability!r} is outside [0, 1]; write e.g. "
                                  f"probability=0.1 to fail one call in ten")
        self.probability: float = float(probability)
        self.seed: int = count_arg(seed, "seed", "write an int seed, e.g. seed=0", lo=None)
        super().__init__(**filters)

    def _reset(self) -> None:
        super()._reset()
        self._random = random.Random(self.seed)

    def _fires(self, request: Request) -> bool:
        return self._random.random() < self.probability

    def _args(self) -> list[str]:
        return [str(self.probability), f"seed={self.seed}"]


class HugePagesExhausted(Fault):
    """Refuse 2 MiB huge pages to matching calls: HUGE_FIRST falls back to normal pages,
    HUGE_ONLY fails with ACL_ERROR_RT_MEMORY_ALLOCATION. ``pages`` may add ``Page.HUGE1G``.

    ``calls`` counts every matching call; ``injected`` only the requests that would have used
    a refused page kind (not NORMAL_ONLY, nor HUGE_FIRST up to 1 MiB).

    Raises:
        InvalidArgument: ``pages`` empty, holding normal pages or not page kinds.
    """

    def __init__(self, *, pages: Iterable[Page | str] = (Page.HUGE,), **filters: Any) -> None:
        try:
            refused = frozenset(Page(p) for p in pages)
        except (ValueError, TypeError):
            raise InvalidArgument(f"pages={pages!r}: write a list of 'huge' and/or "
                                  f"'huge1g'") from None
        if not refused or Page.NORMAL in refused:
            raise InvalidArgument(f"pages={pages!r}: write a non-empty list of 'huge' and/or "
                                  f"'huge1g' (refusing normal pages is FailWhen)")
        super().__init__(**filters)
        self.pages = refused

    def _fires(self, request: Request) -> bool:
        return not self.pages.isdisjoint(request.pages)

    def _act(self, request: Request) -> Iterable[Page]:
        return self.pages

    def _args(self) -> list[str]:
        if self.pages == {Page.HUGE}:
            return []
        return [f"pages={sorted(p.value for p in self.pages)}"]


# -- specs (acl.init config, pytest marker) ------------------------------------------------------

#: The keys a fault spec may hold: one of the kind keys, then filters and options.
SPEC_KEYS = ("nth", "times", "probability", "seed", "huge_pages_exhausted", "pages", "api",
             "size", "policy", "device", "error")
_FILTER_KEYS = ("api", "size", "policy", "device", "error")
_KIND_KEYS = ("nth", "probability", "huge_pages_exhausted")
#: option key -> the kind key it belongs to
_OPTION_OF = {"times": "nth", "seed": "probability", "pages": "huge_pages_exhausted"}


def parse_fault(spec: object) -> Fault:
    """One :class:`Fault` from a spec: a Fault is returned as it is; a mapping picks the kind.

    ``{"nth": 3, "api": "malloc"}`` is FailNth, ``{"probability": 0.1, "seed": 7}``
    FailRandomly, ``{"huge_pages_exhausted": true}`` HugePagesExhausted, and a mapping with
    only filters (``{"size": {"min": 2097152}}``) FailWhen. Filters: api, size, policy,
    device, error.

    Raises:
        InvalidArgument: an unknown key, two kinds at once, or a bad value (the message says
            what to write).
    """
    if isinstance(spec, Fault):
        return spec
    if not isinstance(spec, Mapping):
        raise InvalidArgumentType(f"a fault spec must be a mapping such as "
                                  f"{{'nth': 1, 'api': 'malloc'}} or a Fault, got {spec!r}")
    unknown = [k for k in spec if k not in SPEC_KEYS]
    if unknown:
        hints = {k: difflib.get_close_matches(str(k), SPEC_KEYS, n=1) for k in unknown}
        said = "; ".join(f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "")
                         for k, h in hints.items())
        raise InvalidArgument(f"unknown fault spec key(s) {said}; known: {list(SPEC_KEYS)}")
    kinds = [k for k in _KIND_KEYS if k in spec]
    if len(kinds) > 1:
        raise InvalidArgument(f"a fault spec names one kind, got {kinds}; write one spec per "
                              f"fault in a list")
    kind = kinds[0] if kinds else None
    for option, owner in _OPTION_OF.items():
        if option in spec and owner != kind:
            raise InvalidArgument(f"{option!r} only goes with {owner!r}; remove it or add "
                                  f"{owner!r}")
    filters = {k: spec[k] for k in _FILTER_KEYS if k in spec}
    if kind == "nth":
        return FailNth(spec["nth"], times=spec.get("times", 1), **filters)
    if kind == "probability":
        return FailRandomly(spec["probability"], seed=spec.get("seed", 0), **filters)
    if kind == "huge_pages_exhausted":
        if spec["huge_pages_exhausted"] is not True:
            raise InvalidArgument("write \"huge_pages_exhausted\": true (or leave it out)")
        if "error" in filters:
            raise InvalidArgument("huge_pages_exhausted refuses pages and raises nothing; "
                                  "remove 'error'")
        return HugePagesExhausted(pages=spec.get("pages", (Page.HUGE,)), **filters)
    if not filters:
        raise InvalidArgument("an empty fault spec would fail every call; write "
                              "{'api': 'malloc'} (every aclrtMalloc fails) or add 'nth', "
                              "'probability' or 'huge_pages_exhausted'")
    return FailWhen(**filters)


def parse_faults(specs: object) -> list[Fault]:
    """Faults from one spec or a list of specs (see :func:`parse_fault`).

    Raises:
        InvalidArgument: any bad spec; the message names its position.
    """
    if specs is None:
        return []
    if isinstance(specs, (Fault, Mapping)):
        specs = [specs]
    if not isinstance(specs, (list, tuple)):
        raise InvalidArgumentType(f"faults must be a list of fault specs, got "
                                  f"{type(specs).__name__}")
    faults = []
    for i, spec in enumerate(specs):
        try:
            faults.append(parse_fault(spec))
        except AclError as e:
            raise type(e)(f"faults[{i}]: {e.message}") from None
    return faults


def _config_faults(kwargs: dict[str, Any], value: object) -> None:
    # The aclInit "memsim" config: {"faults": [spec, ...]}; checked now, at acl.init.
    kwargs.setdefault("interceptors", []).extend(parse_faults(value))


register_config_key("faults", _config_faults)


@contextlib.contextmanager
def inject(*faults: object, runtime: Runtime | None = None) -> Iterator[list[Fault]]:
    """``with inject(FailNth(2), {"huge_pages_exhausted": True}):`` install faults (objects or
    specs) in ``runtime`` (default: the active one) for the block; yields the Fault objects."""
    made = parse_faults(list(faults))
    runtime = current_runtime() if runtime is None else runtime
    done: list[Fault] = []
    try:
        for fault in made:
            done.append(fault.install(runtime))
        yield made
    finally:
        for fault in done:
            fault.uninstall()
