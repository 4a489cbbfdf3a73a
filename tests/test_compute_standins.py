"""Stand-in files are hostile input: bounded reads, and what their "fn" may run (and when)."""

import json
import os

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer
from ascend_memsim.compute import standins

SPEC = {"inputs": [{"name": "x", "shape": [2, 3], "dtype": "float32"}],
        "outputs": [{"name": "y", "shape": [2, 3], "dtype": "float32"}],
        "weight_bytes": 1 * MiB, "work_bytes": 0}
#: a model function whose module appends a line to imports.txt each time it is executed
COUNTING = ("import pathlib\n"
            "_log = pathlib.Path(__file__).with_name('imports.txt')\n"
            "_log.write_text(_log.read_text() + 'x\\n' if _log.exists() else 'x\\n')\n"
            "def twice(inputs):\n"
            "    return inputs[0] * 2\n")


@pytest.fixture
def rt(monkeypatch):
    monkeypatch.delenv(standins.TRUST_ENV, raising=False)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


def stand_in(directory, fn=None, name="net.om", **extra):
    spec = dict(SPEC, **extra)
    if fn is not None:
        spec["fn"] = fn
    (directory / (name + ".memsim.json")).write_text(json.dumps(spec))
    return str(directory / name)


def load(path):
    model_id, ret = acl.mdl.load_from_file(path)
    if ret == 0:
        assert acl.mdl.unload(model_id) == 0
    return ret


def load_mem(blob):
    model_id, ret = acl.mdl.load_from_mem(acl.util.bytes_to_ptr(blob), len(blob))
    if ret == 0:
        assert acl.mdl.unload(model_id) == 0
    return ret


# -- bounded reads -------------------------------------------------------------------------------

def test_a_deeply_nested_stand_in_is_a_parse_error_not_a_recursion_error(rt, tmp_path):
    deep = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b', "outputs": []}'
    (tmp_path / "deep.om.memsim.json").write_bytes(deep)
    path = str(tmp_path / "deep.om")
    assert acl.mdl.query_size(path) == (0, 0, 100013)
    assert "nested 100001 deep" in acl.get_recent_err_msg()
    assert acl.mdl.load_from_file(path) == (0, 100013)
    assert acl.mdl.load_from_mem(acl.util.bytes_to_ptr(deep), len(deep)) == (0, 100013)
    assert acl.mdl.query_size_from_mem(acl.util.bytes_to_ptr(deep), len(deep)) == (0, 0, 100013)
    # brackets inside strings are not nesting
    path = stand_in(tmp_path, name="ok.om", note="[[[[" * 100)
    assert acl.mdl.query_size(path) == (0, 1 * MiB, 0)
    assert rt.blocks() == []


def test_a_stand_in_larger_than_the_limit_is_refused_without_reading_it_all(rt, tmp_path,
                                                                              monkeypatch):
    monkeypatch.setattr(standins, "MAX_STANDIN_BYTES", 1000)
    path = stand_in(tmp_path, note="x" * 2000)
    assert acl.mdl.query_size(path) == (0, 0, 100013)
    assert "more than a stand-in's 1000 bytes" in acl.get_recent_err_msg()


@pytest.mark.parametrize("tensor, said", [
    ({"name": ["x"], "shape": [1], "dtype": "float32"}, "name must be a string"),
    ({"shape": [[[[[[[[1]]]]]]]], "dtype": "float32"}, "shape must be a list of ints"),
    ({"shape": [1], "dtype": "float32", "format": True}, "is not an aclFormat"),
])
def test_malformed_tensors_are_parse_errors(rt, tmp_path, tensor, said):
    path = stand_in(tmp_path, inputs=[tensor])
    assert acl.mdl.query_size(path) == (0, 0, 100013)
    assert said in acl.get_recent_err_msg()


def test_an_empty_model_file_loads_with_a_stand_in_and_only_with_one(rt, tmp_path):
    """acllite checks that its model file exists (os.path.isfile), so an empty placeholder
    beside a stand-in must load (it failed with 100003 before); without a stand-in an empty
    file is still 100003, as GE refuses a 0-byte model."""
    path = stand_in(tmp_path)
    assert load(path) == 0                        # no .om here: the stand-in stands for it
    (tmp_path / "net.om").write_bytes(b"")
    assert load(path) == 0
    assert acl.mdl.query_size(path)[2] == 0
    (tmp_path / "net.om.memsim.json").unlink()
    assert acl.mdl.load_from_file(path) == (0, 100003)
    assert "empty" in acl.get_recent_err_msg() and "stand-in" in acl.get_recent_err_msg()
    assert acl.mdl.query_size(path) == (0, 0, 100003)


def test_a_path_whose_repr_raises_is_invalid_param(rt):
    class Hostile:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert acl.mdl.query_size(Hostile()) == (0, 0, 100000)
    assert acl.mdl.load_from_file(Hostile()) == (0, 100000)
    assert "Hostile (its __repr__ raised RuntimeError)" in acl.get_recent_err_msg()


def test_a_non_string_name_is_invalid_param(rt, tmp_path):
    model_id, ret = acl.mdl.load_from_file(stand_in(tmp_path))
    assert ret == 0
    desc = acl.mdl.create_desc()
    assert acl.mdl.get_desc(desc, model_id) == 0
    assert acl.mdl.get_input_index_by_name(desc, np.array([1, 2])) == (0, 100000)
    assert acl.mdl.get_output_index_by_name(desc, None) == (0, 100000)
    assert acl.mdl.get_input_index_by_name(desc, "x") == (0, 0)
    acl.mdl.destroy_desc(desc)
    acl.mdl.unload(model_id)


# -- sys.exit in a stand-in's code ---------------------------------------------------------------

def test_sys_exit_while_importing_a_stand_in_module_is_a_load_error(rt, tmp_path):
    (tmp_path / "quits.py").write_text("import sys\nsys.exit(3)\ndef f(inputs): pass\n")
    assert acl.mdl.load_from_file(stand_in(tmp_path, "quits.py:f")) == (0, 100013)
    assert "sys.exit(3)" in acl.get_recent_err_msg()
    assert rt.blocks() == []


def test_sys_exit_in_a_model_function_fails_the_execute(rt, tmp_path):
    (tmp_path / "quits.py").write_text("import sys\ndef f(inputs):\n    sys.exit('bye')\n")
    model_id, ret = acl.mdl.load_from_file(stand_in(tmp_path, "quits.py:f"))
    assert ret == 0
    sets = []
    for _ in range(2):
        dev, _ = acl.rt.malloc(24, 0)
        acl.rt.memset(dev, 24, 0, 24)
        ds = acl.mdl.create_dataset()
        acl.mdl.add_dataset_buffer(ds, acl.create_data_buffer(dev, 24))
        sets.append((ds, dev))
    assert acl.mdl.execute(model_id, sets[0][0], sets[1][0]) == 507015
    assert "sys.exit('bye')" in acl.get_recent_err_msg()
    for ds, dev in sets:
        acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(ds, 0))
        acl.mdl.destroy_dataset(ds)
        acl.rt.free(dev)
    acl.mdl.unload(model_id)


# -- what "fn" may run ---------------------------------------------------------------------------

def test_query_size_runs_no_code_and_load_runs_it_once(rt, tmp_path):
    (tmp_path / "counting.py").write_text(COUNTING)
    path = stand_in(tmp_path, "counting.py:twice")
    assert acl.mdl.query_size(path) == (0, 1 * MiB, 0)
    blob = (tmp_path / "net.om.memsim.json").read_bytes()
    assert acl.mdl.query_size_from_mem(acl.util.bytes_to_ptr(blob), len(blob))[2] == 0
    assert not (tmp_path / "imports.txt").exists()
    for _ in range(3):
        assert load(path) == 0
    assert (tmp_path / "imports.txt").read_text() == "x\n"


def test_a_file_in_a_subdirectory_of_the_stand_in_is_allowed(rt, tmp_path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "counting.py").write_text(COUNTING)
    assert load(stand_in(tmp_path, "code/counting.py:twice")) == 0


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink"])
def test_a_file_outside_the_stand_ins_directory_is_refused(rt, tmp_path, monkeypatch, where):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "counting.py").write_text(COUNTING)
    models = tmp_path / "models"
    models.mkdir()
    if where == "absolute":
        ref = f"{outside / 'counting.py'}:twice"
    elif where == "dotdot":
        ref = "../outside/counting.py:twice"
    else:
        os.symlink(outside / "counting.py", models / "link.py")
        ref = "link.py:twice"
    path = stand_in(models, ref)
    assert acl.mdl.query_size(path) == (0, 1 * MiB, 0)       # the rule bites at load
    assert acl.mdl.load_from_file(path) == (0, 100013)
    message = acl.get_recent_err_msg()
    assert "outside" in message or "inside its own directory" in message
    assert standins.TRUST_ENV in message
    assert not (outside / "imports.txt").exists()
    assert rt.blocks() == []
    monkeypatch.setenv(standins.TRUST_ENV, "1")              # the explicit opt-in
    assert load(path) == 0
    assert (outside / "imports.txt").read_text() == "x\n"


def test_a_stand_in_from_memory_may_name_a_module_not_a_file(rt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "counting.py").write_text(COUNTING)
    blob = json.dumps(dict(SPEC, fn="counting.py:twice")).encode()
    assert load_mem(blob) == 100013
    assert "read from memory" in acl.get_recent_err_msg()
    assert not (tmp_path / "imports.txt").exists()
    assert load_mem(json.dumps(dict(SPEC, fn="json:dumps")).encode()) == 0
    monkeypatch.setenv(standins.TRUST_ENV, "1")
    assert load_mem(blob) == 0                               # resolved in the current dir
    assert (tmp_path / "imports.txt").read_text() == "x\n"


@pytest.mark.parametrize("ref", ["no colon", "a/b:f", "mod:not an identifier", ":f", 3])
def test_a_malformed_fn_is_a_parse_error_at_query_size(rt, tmp_path, ref):
    assert acl.mdl.query_size(stand_in(tmp_path, ref)) == (0, 0, 100013)
    assert '"fn" must be' in acl.get_recent_err_msg()


# -- a model file that is itself the stand-in ----------------------------------------------------

def test_a_model_file_holding_the_stand_in_json_loads_from_the_file_and_from_its_bytes(
        rt, tmp_path):
    # A program that reads its .om and loads the bytes (load_from_mem) can only be given a
    # stand-in as the file's own content; the same file must then load by path too.
    (tmp_path / "counting.py").write_text(COUNTING)
    model = tmp_path / "net.om"
    model.write_text("  " + json.dumps(dict(SPEC, fn="counting.py:twice")))
    assert acl.mdl.query_size(str(model)) == (0, 1 * MiB, 0)
    assert not (tmp_path / "imports.txt").exists()            # query_size runs nothing
    assert load(str(model)) == 0                               # its fn: beside it
    assert (tmp_path / "imports.txt").read_text() == "x\n"
    assert load_mem(json.dumps(SPEC).encode()) == 0
    assert rt.blocks() == []


def test_a_model_file_that_is_neither_om_nor_stand_in_still_says_how_to_write_one(rt, tmp_path):
    model = tmp_path / "net.om"
    model.write_bytes(b"\x00OM binary")
    assert acl.mdl.load_from_file(str(model)) == (0, 100013)
    assert "cannot read .om models" in acl.get_recent_err_msg()
    assert load_mem(model.read_bytes()) == 100013
    assert "write the stand-in JSON as the model file itself" in acl.get_recent_err_msg()
    model.write_text('{"inputs": [')                             # a broken stand-in
    assert acl.mdl.load_from_file(str(model)) == (0, 100013)
    assert "not valid JSON" in acl.get_recent_err_msg()
