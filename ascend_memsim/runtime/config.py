"""The aclInit JSON config: reading the file and turning it into :class:`Runtime` options.

The simulator reads two objects of the config and ignores the rest (they belong to the real
runtime): ``"memsim"`` (product, capacities, and the keys the checks register: ``sanitizer``,
``faults``) and ``"defaultDevice"``. Each ``"memsim"`` key has an *apply* function that
checks its value and sets the :class:`Runtime` keyword arguments; layers above the runtime
add theirs with :func:`register_config_key`, so this module imports none of them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..memory.args import as_int
from ..memory.constants import RunMode
from ..memory.errors import InvalidArgument, InvalidArgumentType, InvalidDevice
from ..memory.profiles import Profile, get_profile

__all__ = [
    "CONFIG_KEYS", "register_config_key", "parse_config", "load_config", "parse_run_mode",
    "plan_adoption", "Adoption",
]

#: Keys a ``"memsim"`` config object may hold, each with the function that applies it to the
#: keyword arguments of :class:`Runtime`.
CONFIG_KEYS: dict[str, Callable[[dict[str, Any], Any], None]] = {
    "product": lambda kw, v: kw.__setitem__("product", v),
    "device_count": lambda kw, v: kw.__setitem__("device_count", v),
    "hbm_bytes": lambda kw, v: kw.__setitem__("hbm_bytes", v),
    "ddr_bytes": lambda kw, v: kw.__setitem__("ddr_bytes", v),
    "run_mode": lambda kw, v: kw.__setitem__("run_mode", v),
}


def register_config_key(key: str, apply: Callable[[dict[str, Any], Any], None]) -> None:
    """Accept ``"memsim": {key: value}``: ``apply(options, value)`` checks the value and sets
    the Runtime keyword arguments in ``options`` (raising InvalidArgument for a bad value)."""
    CONFIG_KEYS[key] = apply


def parse_config(config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The :class:`Runtime` keyword arguments an aclInit JSON config (parsed) asks for.

    ``{"memsim": {"product": "A2", "device_count": 2, "hbm_bytes": 67108864}}`` picks the
    product and overrides; ``{"defaultDevice": {"default_device": "0"}}`` sets a default
    device. Other top-level keys belong to the real runtime and are ignored.

    Raises:
        InvalidArgument: not a JSON object, an unknown memsim key, a bad value.
    """
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise InvalidArgument("the aclInit config must be a JSON object")
    section = config.get("memsim", {})
    if not isinstance(section, Mapping):
        raise InvalidArgument('"memsim" in the aclInit config must be a JSON object')
    options: dict[str, Any] = {}
    for key, value in section.items():
        apply = CONFIG_KEYS.get(key)
        if apply is None:
            raise InvalidArgument(f'unknown "memsim" config key {key!r}; known: '
                                  f"{sorted(CONFIG_KEYS)}")
        apply(options, value)
    default = config.get("defaultDevice")
    if default is not None:
        if not isinstance(default, Mapping):
            raise InvalidArgument('"defaultDevice" in the aclInit config must be a JSON '
                                  'object such as {"default_device": "0"}')
        if "default_device" in default:
            text = default["default_device"]
            # The vendor writes the id as a string of digits ("0"); a plain int is taken too.
            # json_parser.cpp (GetDefaultDeviceIdFromFile) accepts only "0|[1-9]\d*" and
            # refuses the rest with ACL_ERROR_INVALID_PARAM; so "²" (str.isdigit() takes it)
            # and "01" are refused. An id outside the device count is the runtime's refusal
            # (rtSetDefaultDeviceId, acl.cpp): ACL_ERROR_RT_INVALID_DEVICEID.
            if isinstance(text, str):
                digits = text.strip()
                # (and at most 18 digits: int() of thousands of digits raises ValueError)
                if len(digits) > 18 or not re.fullmatch("0|[1-9][0-9]*", digits):
                    raise InvalidArgument(f'"defaultDevice": {{"default_device": {text!r}}} '
                                          f"is not a device id (write digits, such as \"0\")")
                text = int(digits)
            options["default_device"] = as_int(text, "defaultDevice.default_device", None,
                                               None)
    return options


def load_config(config_path: object) -> dict[str, Any]:
    """The JSON object in the aclInit config file at ``config_path`` ({} for none or empty).

    Raises:
        InvalidArgumentType: a path that is not a str.
        InvalidArgument: unreadable, not JSON, or not a JSON object.
    """
    if config_path is None:
        return {}
    if not isinstance(config_path, (str, os.PathLike)):
        raise InvalidArgumentType(f"config_path must be a str path, got "
                                  f"{type(config_path).__name__}")
    if config_path == "":
        return {}
    try:
        with open(config_path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise InvalidArgument(f"cannot read aclInit config {config_path!r}: {e.strerror}") from None
    except (UnicodeDecodeError, ValueError) as e:  # not UTF-8; a NUL in the path
        raise InvalidArgument(f"cannot read aclInit config {config_path!r}: {e}") from None
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, too many digits, deep nesting
        raise InvalidArgument(f"aclInit config {config_path!r} is not valid JSON: "
                              f"{str(e)[:200]}") from None
    if not isinstance(config, dict):
        raise InvalidArgument(f"aclInit config {config_path!r} must hold a JSON object, "
                              f"not {type(config).__name__}")
    return config


def parse_run_mode(value: object) -> RunMode:
    """``"host"`` (the default) or ``"device"``, or an aclrtRunMode value.

    DECISION: in device mode (ACL_DEVICE: the program runs on the device's own CPU, as on an
    Atlas 200 DK, where host and device memory are one) operators and models accept host
    memory as operands, and ``acl.util.ptr_to_bytes`` / ``ptr_to_numpy`` read device memory
    directly; everything else is as in host mode.

    Raises:
        InvalidArgument: anything else.
    """
    if isinstance(value, RunMode):
        return value
    if isinstance(value, str) and value.lower() in ("host", "device"):
        return RunMode[value.upper()]
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return RunMode(value)
    raise InvalidArgument(f"run_mode {value!r} is neither 'host' nor 'device'")


@dataclass(frozen=True)
class Adoption:
    """What an aclInit config asks of an active runtime, checked (see :func:`plan_adoption`)."""

    profile: Profile
    #: a checker spec for make_checker, or None to keep the runtime's checker
    checker: Any
    run_mode: RunMode | None
    default_device: int | None
    interceptors: tuple[Any, ...]


def plan_adoption(options: Mapping[str, Any], profile: Profile, *, in_use: bool,
                  leak_check: bool) -> Adoption:
    """Check aclInit options (from :func:`parse_config`) against an active runtime whose
    product is ``profile`` and whose checker lists leaks when ``leak_check``.

    Faults and the default device always apply. A product, profile override, sanitizer or
    run mode applies only while no device has been made (``in_use`` false); after that it is
    refused, because the simulation the caller set up (a test fixture, ``ascend-memsim run``)
    is already in use. Nothing changes here: the runtime applies the result.

    Raises:
        InvalidArgument: a product, override, sanitizer or run mode the runtime can no
            longer take.
        InvalidDevice: a default device outside the (new) device count.
    """
    options = dict(options)
    default = options.pop("default_device", None)
    interceptors = tuple(options.pop("interceptors", ()))
    sanitizer = options.pop("sanitizer", None)
    product = options.pop("product", None)
    run_mode = options.pop("run_mode", None)
    if run_mode is not None:
        run_mode = parse_run_mode(run_mode)
    if product is not None or options or sanitizer is not None or run_mode is not None:
        if in_use:
            asked = ", ".join(f"{k}={v!r}" for k, v in
                              [("product", product), *options.items(),
                               ("sanitizer", sanitizer), ("run_mode", run_mode)]
                              if v is not None)
            raise InvalidArgument(
                f"acl.init config asks for {asked}, but the active simulation "
                f"({profile.name}) already has devices in use; configure the "
                f"simulation where it is made (Runtime(...), the memsim marker, or "
                f"ascend-memsim run --product)")
        base = profile if product is None else get_profile(product)
        profile = base.with_overrides(**options)
        if sanitizer is not None:
            # Whoever set up this runtime chose who lists leaks (the pytest fixture and `run`
            # list them themselves); a config that does not say keeps that.
            if isinstance(sanitizer, str):
                sanitizer = {"mode": sanitizer}
            if isinstance(sanitizer, Mapping) and "leaks" not in sanitizer:
                sanitizer = {**sanitizer, "leaks": leak_check}
    if default is not None and not 0 <= default < profile.device_count:
        raise InvalidDevice(f"defaultDevice {default} is outside [0, {profile.device_count})")
    return Adoption(profile, sanitizer, run_mode, default, interceptors)
