"""The trace format's JSON Schema (package data) describes what the recorder writes.

Checked with a minimal validator of the keywords the schema uses (no new dependency), and
with jsonschema as well when it happens to be installed.
"""

import json
from importlib.resources import files

import pytest

from ascend_memsim import MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.observe.trace import Recorder, schema

SCHEMA = schema()
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is(value, name):
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, _TYPES[name])


def errors(value, node=SCHEMA, where="$"):
    """What is wrong with ``value`` under ``node`` (a list; empty when valid)."""
    out = []
    for key, rule in node.items():
        if key == "$ref":
            target = SCHEMA
            for part in rule.removeprefix("#/").split("/"):
                target = target[part]
            out += errors(value, target, where)
        elif key == "type":
            names = rule if isinstance(rule, list) else [rule]
            if not any(_is(value, n) for n in names):
                out.append(f"{where}: {value!r} is not of type {rule}")
        elif key == "const" and value != rule:
            out.append(f"{where}: {value!r} is not {rule!r}")
        elif key == "enum" and value not in rule:
            out.append(f"{where}: {value!r} is not one of {rule}")
        elif key == "minimum" and _is(value, "integer") and value < rule:
            out.append(f"{where}: {value} < {rule}")
        elif key == "maximum" and _is(value, "integer") and value > rule:
            out.append(f"{where}: {value} > {rule}")
        elif key == "minLength" and isinstance(value, str) and len(value) < rule:
            out.append(f"{where}: shorter than {rule}")
        elif key == "required" and isinstance(value, dict):
            out += [f"{where}: missing {k!r}" for k in rule if k not in value]
        elif key == "properties" and isinstance(value, dict):
            for name, sub in rule.items():
                if name in value:
                    out += errors(value[name], sub, f"{where}.{name}")
        elif key == "items" and isinstance(value, list):
            for i, item in enumerate(value):
                out += errors(item, rule, f"{where}[{i}]")
        elif key == "allOf":
            for sub in rule:
                out += errors(value, sub, where)
        elif key == "oneOf":
            matching = [sub for sub in rule if not errors(value, sub, where)]
            if len(matching) != 1:
                out.append(f"{where}: matches {len(matching)} of the oneOf schemas")
                if not matching:   # say why each one does not
                    for sub in rule:
                        out += errors(value, sub, where)
        elif key == "not" and not errors(value, rule, where):
            out.append(f"{where}: matches a schema it must not")
        elif key == "if" and not errors(value, rule, where):
            out += errors(value, node.get("then", {}), where)
    return out


def _recorded_lines():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt, \
            Recorder(rt, stacks=True) as rec:
        rt.set_device(0)
        stream = rt.streams.create_stream()
        a = rt.malloc(100)
        rt.memset_async(a, 100, 7, 100, stream)
        rt.synchronize_device()
        b = rt.malloc_align32(3 * MiB, 1)
        rt.malloc_with_cfg(64, 0, {1: 3})
        with pytest.raises(OutOfDeviceMemory):
            rt.malloc(128 * MiB, 1)
        rt.free(a)
        del b
        rt.reset_device(0)
    return [json.loads(line) for line in rec.trace.dumps().splitlines()]


def test_the_schema_ships_with_the_package():
    path = files("ascend_memsim.observe").joinpath("trace.schema.json")
    assert json.loads(path.read_text("utf-8")) == SCHEMA
    assert SCHEMA["$schema"].endswith("2020-12/schema")


def test_every_recorded_line_is_valid():
    lines = _recorded_lines()
    kinds = {line.get("event") for line in lines}
    assert {"malloc", "malloc_failed", "free", "reset", "set_device"} <= kinds
    for line in lines:
        assert errors(line) == [], line


@pytest.mark.parametrize(("line", "problem"), [
    ({"event": "malloc", "ptr": 64}, "missing 'size'"),
    ({"event": "malloc", "size": 0, "ptr": 64}, "0 < 1"),
    ({"event": "free"}, "missing 'ptr'"),
    ({"event": "malloc", "size": 1, "ptr": 64, "stream": [1]}, "is not of type"),
    ({"event": "malloc", "size": 1, "ptr": 64, "policy": 1 << 40}, "> 4294967295"),
    ({"event": "malloc", "size": 1, "ptr": 64, "api": "cudaMalloc"}, "is not one of"),
    ({"format": "ascend-memsim-trace", "version": 2}, "matches 0 of the oneOf"),
    ({"size": 3}, "matches 0 of the oneOf"),
    ({"event": "", "device": 0}, "matches 0 of the oneOf"),
])
def test_lines_the_loader_refuses_break_the_schema(line, problem):
    found = errors(line)
    assert any(problem in e for e in found), found


def test_with_jsonschema_when_installed():
    jsonschema = pytest.importorskip("jsonschema", reason="optional: the minimal check runs "
                                     "without it")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for line in _recorded_lines():
        validator.validate(line)
    assert not validator.is_valid({"event": "malloc", "ptr": 64})
