"""Dynamic batch, image size and dims gears (acl.mdl): what a stand-in declares, what the
queries report, what the set calls write and refuse, what an execution sees.

The rules are hicann/ge's (api/acl/acl_model/model/model.cpp, model_om2.cpp,
runtime/v1/executor/ge_executor.cc) and pyacl's (python/pyACL/mdl/mdl_wrap.cpp).
"""

import numpy as np
import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer, register_model, unregister_model
from ascend_memsim.compute.standins import parse_spec
from ascend_memsim.memory.errors import ModelParseError

SHAPE = "ascend_mbatch_shape_data"
BATCH = {"inputs": [{"name": "data", "shape": [-1, 3, 2, 2], "dtype": "float32"}],
         "outputs": [{"name": "prob", "shape": [-1, 5], "dtype": "float32"}],
         "dynamic_batch_size": [1, 2, 4, 8]}
HW = {"inputs": [{"name": "img", "shape": [1, -1, -1, 3], "dtype": "uint8"}],
      "outputs": [{"name": "prob", "shape": [1, 10], "dtype": "float32"},
                  {"name": "mask", "shape": [1, -1, -1], "dtype": "uint8"}],
      "dynamic_image_size": [[4, 4], [8, 6]]}
DIMS = {"inputs": [{"name": "data", "shape": [1, 1, 4, -1], "dtype": "float32"},
                   {"name": "label", "shape": [1, -1], "dtype": "int32"},
                   {"name": "mask", "shape": [-1, -1], "dtype": "float32"}],
        "outputs": [{"name": "out", "shape": [-1, 2], "dtype": "float32"}],
        "dynamic_dims": [[2, 2, 1, 1], [4, 4, 2, 2], [8, 6, 4, 4]]}


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


class Loaded:
    """A model loaded from ``spec``, its description, and datasets whose buffers are device
    blocks of the sizes the description reports (as the vendor's samples make them)."""

    def __init__(self, tmp_path, spec, fn=None):
        self.path = str(tmp_path / "net.om")
        register_model(self.path, spec, fn=fn)
        self.model_id, ret = acl.mdl.load_from_file(self.path)
        assert ret == 0, acl.get_recent_err_msg()
        self.desc = acl.mdl.create_desc()
        assert acl.mdl.get_desc(self.desc, self.model_id) == 0
        self.input = self._dataset(acl.mdl.get_num_inputs, acl.mdl.get_input_size_by_index)
        self.output = self._dataset(acl.mdl.get_num_outputs, acl.mdl.get_output_size_by_index)
        self.shape_index, ret = acl.mdl.get_input_index_by_name(self.desc, SHAPE)
        assert ret == 0

    def _dataset(self, count, size_of):
        dataset = acl.mdl.create_dataset()
        for i in range(count(self.desc)):
            size = size_of(self.desc, i)
            ptr, ret = acl.rt.malloc(size, 0)
            assert ret == 0
            assert acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(ptr, size))[1] == 0
        return dataset

    def ptr(self, dataset, i):
        return acl.get_data_buffer_addr(acl.mdl.get_dataset_buffer(dataset, i))

    def write(self, i, array):
        raw = np.ascontiguousarray(array).tobytes()
        assert acl.rt.memcpy(self.ptr(self.input, i), len(raw), acl.util.bytes_to_ptr(raw),
                             len(raw), 1) == 0

    def read(self, dataset, i, nbytes):
        host = bytes(nbytes)
        assert acl.rt.memcpy(acl.util.bytes_to_ptr(host), nbytes, self.ptr(dataset, i),
                             nbytes, 2) == 0
        return host

    def close(self):
        for ds in (self.input, self.output):
            for i in range(acl.mdl.get_dataset_num_buffers(ds)):
                buf = acl.mdl.get_dataset_buffer(ds, i)
                assert acl.rt.free(acl.get_data_buffer_addr(buf)) == 0
                assert acl.destroy_data_buffer(buf) == 0
            assert acl.mdl.destroy_dataset(ds) == 0
        assert acl.mdl.unload(self.model_id) == 0
        assert acl.mdl.destroy_desc(self.desc) == 0
        unregister_model(self.path)


@pytest.fixture
def loaded(rt, tmp_path):
    made = []

    def load(spec, fn=None):
        made.append(Loaded(tmp_path, spec, fn))
        return made[-1]

    yield load
    for m in made:
        m.close()


# -- what the description reports --------------------------------------------------------------

def test_a_dynamic_batch_model_reports_its_largest_gear_and_the_shape_input(loaded):
    m = loaded(BATCH)
    assert acl.mdl.get_num_inputs(m.desc) == 2 and m.shape_index == 1
    assert acl.mdl.get_input_dims(m.desc, 0) == (
        {"name": "data", "dimCount": 4, "dims": [-1, 3, 2, 2]}, 0)
    assert acl.mdl.get_input_size_by_index(m.desc, 0) == 8 * 3 * 2 * 2 * 4
    assert acl.mdl.get_input_dims(m.desc, 1) == ({"name": SHAPE, "dimCount": 1, "dims": [1]}, 0)
    assert acl.mdl.get_input_data_type(m.desc, 1) == acl.ACL_INT32
    assert acl.mdl.get_input_size_by_index(m.desc, 1) == 4
    assert acl.mdl.get_output_dims(m.desc, 0) == ({"name": "prob", "dimCount": 2,
                                                   "dims": [8, 5]}, 0)
    assert acl.mdl.get_output_size_by_index(m.desc, 0) == 8 * 5 * 4
    assert acl.mdl.get_dynamic_batch(m.desc) == ({"batchCount": 4, "batch": [1, 2, 4, 8]}, 0)
    assert acl.mdl.get_dynamic_hw(m.desc, -1) == ({"hwCount": 0, "hw": []}, 0)
    assert acl.mdl.get_input_dynamic_gear_count(m.desc, -1) == (0, 0)
    assert acl.mdl.get_cur_output_dims(m.desc, 0)[0]["dims"] == [8, 5]


def test_a_dynamic_hw_model_reports_its_gears(loaded):
    m = loaded(HW)
    assert acl.mdl.get_dynamic_hw(m.desc, m.shape_index) == (
        {"hwCount": 2, "hw": [[4, 4], [8, 6]]}, 0)
    assert acl.mdl.get_dynamic_batch(m.desc) == ({"batchCount": 0, "batch": []}, 0)
    assert acl.mdl.get_input_size_by_index(m.desc, 0) == 8 * 6 * 3
    assert acl.mdl.get_input_dims(m.desc, 1)[0]["dims"] == [2]
    assert acl.mdl.get_output_dims(m.desc, 1)[0]["dims"] == [1, 8, 6]


def test_dynamic_dims_are_every_input_concatenated_per_gear(loaded):
    """The example of the aclmdlGetInputDynamicDims documentation, scaled down."""
    m = loaded(DIMS)
    assert m.shape_index == 3
    assert acl.mdl.get_input_dynamic_gear_count(m.desc, -1) == (3, 0)
    dims, ret = acl.mdl.get_input_dynamic_dims(m.desc, -1, 4)
    assert ret == 0
    assert [d["dims"] for d in dims] == [[1, 1, 4, 2, 1, 2, 1, 1], [1, 1, 4, 4, 1, 4, 2, 2],
                                         [1, 1, 4, 8, 1, 6, 4, 4], []]
    assert dims[0]["dimCount"] == 8 and dims[3]["dimCount"] == 0
    # model_om2.cpp: the reserved index must be -1; fewer entries than gears is refused
    assert acl.mdl.get_input_dynamic_gear_count(m.desc, 0) == (0, 100000)
    assert acl.mdl.get_input_dynamic_gear_count(m.desc, 2**64 - 1) == (3, 0)
    assert acl.mdl.get_input_dynamic_dims(m.desc, -1, 2) == (None, 100000)
    assert acl.mdl.get_input_dynamic_dims(m.desc, -1, 4097) == (None, 100000)


def test_a_static_model_has_no_gears(rt, loaded, tmp_path):
    path = str(tmp_path / "static.om")
    register_model(path, {"inputs": [{"name": "x", "shape": [2], "dtype": "float32"}],
                          "outputs": [{"name": "y", "shape": [2], "dtype": "float32"}]})
    try:
        model_id, _ = acl.mdl.load_from_file(path)
        desc = acl.mdl.create_desc()
        acl.mdl.get_desc(desc, model_id)
        assert acl.mdl.get_dynamic_batch(desc) == ({"batchCount": 0, "batch": []}, 0)
        assert acl.mdl.get_input_index_by_name(desc, SHAPE)[1] == 100000
        assert acl.mdl.get_cur_output_dims(desc, 0)[0]["dims"] == [2]
        dataset = acl.mdl.create_dataset()
        ptr, _ = acl.rt.malloc(8, 0)
        acl.mdl.add_dataset_buffer(dataset, acl.create_data_buffer(ptr, 8))
        # ge_executor.cc: a model without gears matches no batch size
        assert acl.mdl.set_dynamic_batch_size(model_id, dataset, 0, 2) == 145013
        acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(dataset, 0))
        acl.mdl.destroy_dataset(dataset)
        acl.rt.free(ptr)
        acl.mdl.destroy_desc(desc)
        acl.mdl.unload(model_id)
    finally:
        unregister_model(path)


# -- the set calls ----------------------------------------------------------------------------

def test_set_dynamic_batch_size_writes_the_gear_and_execution_sees_it(loaded):
    seen = []

    def forward(inputs):
        seen.append(inputs[0].shape)
        return (inputs[0].reshape(inputs[0].shape[0], -1)[:, :5] * 2).astype(np.float32)

    m = loaded(BATCH, fn=forward)
    x = np.arange(2 * 12, dtype=np.float32).reshape(2, 3, 2, 2)
    m.write(0, x)
    assert acl.mdl.set_dynamic_batch_size(m.model_id, m.input, m.shape_index, 2) == 0
    # ge_executor.cc: a 4-byte dynamic input holds the batch size as a uint32
    assert m.read(m.input, m.shape_index, 4) == (2).to_bytes(4, "little")
    assert acl.mdl.get_cur_output_dims(m.desc, 0) == (
        {"name": "prob", "dimCount": 2, "dims": [2, 5]}, 0)
    assert acl.mdl.execute(m.model_id, m.input, m.output) == 0
    assert seen == [(2, 3, 2, 2)]                 # the data input only, at the gear
    out = np.frombuffer(m.read(m.output, 0, 2 * 5 * 4), np.float32).reshape(2, 5)
    assert (out == x.reshape(2, -1)[:, :5] * 2).all()


def test_execution_reads_the_gear_a_dataset_never_set_from_its_dynamic_input(loaded):
    """A new dataset over the same memory (acllite makes one per execution): the gear is
    what the dynamic input holds."""
    m = loaded(BATCH)
    assert acl.mdl.execute(m.model_id, m.input, m.output) == 145013   # never written
    assert "no gear" in acl.get_recent_err_msg()
    assert acl.mdl.set_dynamic_batch_size(m.model_id, m.input, m.shape_index, 4) == 0
    fresh = acl.mdl.create_dataset()
    for i in range(2):
        acl.mdl.add_dataset_buffer(fresh, acl.mdl.get_dataset_buffer(m.input, i))
    m.write(0, np.zeros((4, 3, 2, 2), np.float32))
    assert acl.mdl.execute(m.model_id, fresh, m.output) == 0
    assert acl.mdl.destroy_dataset(fresh) == 0


@pytest.mark.parametrize("call, args, code", [
    ("set_dynamic_batch_size", (3,), 145013),            # not a gear
    ("set_dynamic_batch_size", (0,), 100000),            # model.cpp: batch 0 refused
    ("set_dynamic_batch_size", (-2,), 145013),           # "K" wraps it: 2**64 - 2
    # ge_executor.cc checks the length first: the 4-byte batch input cannot hold h and w
    ("set_dynamic_hw_size", (4, 4), 145012),
    ("set_dynamic_hw_size", (0, 4), 100000),
])
def test_the_set_calls_refuse_what_ge_refuses(loaded, call, args, code):
    m = loaded(BATCH)
    assert getattr(acl.mdl, call)(m.model_id, m.input, m.shape_index, *args) == code
    assert acl.get_recent_err_msg()
    assert acl.mdl.get_cur_output_dims(m.desc, 0)[0]["dims"] == [8, 5]   # nothing changed


def test_a_dynamic_input_too_small_or_missing_is_refused(loaded, rt):
    m = loaded(BATCH)
    assert acl.mdl.set_dynamic_batch_size(m.model_id, m.input, 5, 2) == 100000   # no buffer
    small = acl.mdl.create_dataset()
    ptr, _ = acl.rt.malloc(2, 0)
    acl.mdl.add_dataset_buffer(small, acl.create_data_buffer(ptr, 2))
    assert acl.mdl.set_dynamic_batch_size(m.model_id, small, 0, 2) == 145012
    empty = acl.create_data_buffer(0, 0)
    acl.mdl.add_dataset_buffer(small, empty)
    assert acl.mdl.set_dynamic_batch_size(m.model_id, small, 1, 2) == 100000     # NULL
    assert acl.mdl.set_dynamic_batch_size(99, m.input, m.shape_index, 2) == 100011
    for i in range(2):
        acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(small, i))
    acl.mdl.destroy_dataset(small)
    acl.rt.free(ptr)


def test_set_dynamic_hw_size_writes_height_then_width(loaded):
    seen = []

    def forward(inputs):
        img = inputs[0]
        seen.append(img.shape)
        return (np.ones((1, 10), np.float32), img[..., 0].copy())

    m = loaded(HW, fn=forward)
    img = np.arange(8 * 6 * 3, dtype=np.uint8).reshape(1, 8, 6, 3)
    m.write(0, img)
    assert acl.mdl.set_dynamic_hw_size(m.model_id, m.input, m.shape_index, 8, 6) == 0
    assert m.read(m.input, m.shape_index, 8) == (8).to_bytes(4, "little") + \
        (6).to_bytes(4, "little")
    assert acl.mdl.get_cur_output_dims(m.desc, 1)[0]["dims"] == [1, 8, 6]
    assert acl.mdl.execute(m.model_id, m.input, m.output) == 0
    assert seen == [(1, 8, 6, 3)]
    mask = np.frombuffer(m.read(m.output, 1, 48), np.uint8).reshape(1, 8, 6)
    assert (mask == img[..., 0]).all()
    assert acl.mdl.set_dynamic_hw_size(m.model_id, m.input, m.shape_index, 6, 8) == 145013
    assert acl.mdl.set_dynamic_hw_size(m.model_id, m.input, m.shape_index, 4, 4) == 0
    assert acl.mdl.get_cur_output_dims(m.desc, 1)[0]["dims"] == [1, 4, 4]


def test_set_input_dynamic_dims_takes_every_input_dim(loaded):
    m = loaded(DIMS)
    full = [1, 1, 4, 4, 1, 4, 2, 2]
    dims = {"name": "", "dimCount": len(full), "dims": full}
    assert acl.mdl.set_input_dynamic_dims(m.model_id, m.input, m.shape_index, dims) == 0
    # ge_executor.cc GetCurDynamicDims: only the -1 dims go to the dynamic input
    assert m.read(m.input, m.shape_index, 16) == b"".join(
        v.to_bytes(4, "little") for v in (4, 4, 2, 2))
    assert acl.mdl.get_cur_output_dims(m.desc, 0)[0]["dims"] == [4, 2]
    assert acl.mdl.execute(m.model_id, m.input, m.output) == 0
    wrong = [dict(dims, dims=[1, 1, 5, 4, 1, 4, 2, 2]),      # a static dim differs: 145012
             dict(dims, dimCount=7),                          # another count: 145012
             dict(dims, dims=[1, 1, 4, 3, 1, 4, 2, 2]),       # no gear: 145013
             dict(dims, dims=[1, 1, 4, 2**40, 1, 4, 2, 2])]   # no gear either
    assert [acl.mdl.set_input_dynamic_dims(m.model_id, m.input, m.shape_index, d)
            for d in wrong] == [145012, 145012, 145013, 145013]


@pytest.mark.parametrize("dims", [
    [1, 2], {"dimCount": 0, "dims": []}, {"dimCount": 2, "dims": [1]},
    {"dimCount": 1, "dims": (1,)}, {"dimCount": 1, "dims": [1.0]}, {"dims": [1]},
    {"dimCount": 129, "dims": [1] * 129}, {"dimCount": True, "dims": [1]},
])
def test_set_input_dynamic_dims_refuses_what_pyacl_cannot_read(loaded, dims):
    m = loaded(DIMS)
    assert acl.mdl.set_input_dynamic_dims(m.model_id, m.input, m.shape_index, dims) == 100000
    assert acl.get_recent_err_msg()


# -- stand-ins ----------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, said", [
    ({"dynamic_batch_size": [1, 2], "dynamic_dims": [[1]]}, "one kind of gears"),
    ({"dynamic_batch_size": [4]}, "list of 2 to 128"),
    ({"dynamic_batch_size": [1, 1]}, "repeats a gear"),
    ({"dynamic_batch_size": [0, 2]}, "an int >= 1"),
    ({"dynamic_image_size": [[1, 2, 3], [4, 5]]}, "[height, width]"),
    ({"dynamic_dims": [[1, 2], [3, 4]]}, "each dynamic_dims gear has 2 values, the inputs have 1"),
    ({"dynamic_batch_size": [1, 2],
      "inputs": [{"name": SHAPE, "shape": [-1], "dtype": "int32"}]}, "do not list it"),
    ({"dynamic_batch_size": [1, 2],
      "inputs": [{"name": "x", "shape": [2], "dtype": "float32"}]}, "no input has a -1"),
    ({"dynamic_image_size": [[2, 2], [4, 4]],
      "inputs": [{"name": "x", "shape": [-1, 2], "dtype": "float32"}]}, "or two"),
])
def test_malformed_gears_are_parse_errors(extra, said):
    spec = {"inputs": [{"name": "x", "shape": [-1], "dtype": "float32"}],
            "outputs": [{"name": "y", "shape": [1], "dtype": "float32"}], **extra}
    with pytest.raises(ModelParseError, match=said.replace("[", r"\[")):
        parse_spec(spec)


def test_a_static_stand_in_still_refuses_negative_dims():
    with pytest.raises(ModelParseError, match="ints >= 0"):
        parse_spec({"inputs": [{"name": "x", "shape": [-1], "dtype": "float32"}],
                    "outputs": []})


# -- dataset tensor descriptors, aclSetTensorConst, numpy_contiguous_to_ptr ---------------------

def test_a_dataset_keeps_a_copy_of_a_tensor_desc(loaded):
    m = loaded(BATCH)
    desc = acl.create_tensor_desc(acl.ACL_FLOAT, [2, 3, 2, 2], acl.ACL_FORMAT_ND)
    assert acl.mdl.get_dataset_tensor_desc(m.input, 0) == 0
    assert acl.mdl.set_dataset_tensor_desc(m.input, desc, 0) == (m.input, 0)
    copy = acl.mdl.get_dataset_tensor_desc(m.input, 0)
    assert copy not in (0, desc)
    acl.destroy_tensor_desc(desc)                                 # the copy stays
    assert acl.get_tensor_desc_dim_v2(copy, 0) == (2, 0)
    acl.destroy_tensor_desc(copy)                                 # the dataset's: refused
    assert "aclmdlDestroyDataset" in acl.get_recent_err_msg()
    assert acl.get_tensor_desc_num_dims(copy) == 4
    assert acl.mdl.set_dataset_tensor_desc(m.input, 0, 0) == (m.input, 0)     # removed
    assert acl.mdl.get_dataset_tensor_desc(m.input, 0) == 0
    assert acl.mdl.set_dataset_tensor_desc(m.input, 0, 9)[1] == 100000
    assert acl.mdl.get_dataset_tensor_desc(m.input, 9) == 0


def test_destroying_a_dataset_frees_its_descriptor_copies(rt):
    dataset = acl.mdl.create_dataset()
    buf = acl.create_data_buffer(0, 0)
    acl.mdl.add_dataset_buffer(dataset, buf)
    desc = acl.create_tensor_desc(acl.ACL_FLOAT, [1], acl.ACL_FORMAT_ND)
    acl.mdl.set_dataset_tensor_desc(dataset, desc, 0)
    copy = acl.mdl.get_dataset_tensor_desc(dataset, 0)
    assert acl.mdl.destroy_dataset(dataset) == 0
    assert acl.get_tensor_desc_num_dims(copy) == 0 and acl.get_recent_err_msg()
    acl.destroy_tensor_desc(desc)
    acl.destroy_data_buffer(buf)
    assert [h for h in rt.extension("compute").handles.live()] == []


def test_set_tensor_const_copies_host_bytes(rt):
    desc = acl.create_tensor_desc(acl.ACL_INT32, [2], acl.ACL_FORMAT_ND)
    data = np.array([7, 9], np.int32).tobytes()
    assert acl.set_tensor_const(desc, acl.util.bytes_to_ptr(data), 8) == 0
    assert rt.extension("compute").tensor_desc(desc).const == data
    assert acl.set_tensor_const(desc, 0, 8) == 100000
    assert acl.set_tensor_const(desc, acl.util.bytes_to_ptr(data), 0) == 100000
    dev, _ = acl.rt.malloc(8, 0)
    assert acl.set_tensor_const(desc, dev, 8) == 107000          # device memory on a host
    acl.rt.free(dev)
    acl.destroy_tensor_desc(desc)


def test_numpy_contiguous_to_ptr_gives_a_contiguous_array_and_its_address(rt):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    ptr, same = acl.util.numpy_contiguous_to_ptr(a)
    assert same is a and acl.util.ptr_to_bytes(ptr, 48) == a.tobytes()
    column = a[:, 1]
    ptr, copy = acl.util.numpy_contiguous_to_ptr(column)
    assert copy is not column and copy.flags["C_CONTIGUOUS"]
    assert acl.util.ptr_to_bytes(ptr, 12) == np.array([1, 5, 9], np.int32).tobytes()
    with pytest.raises(TypeError):
        acl.util.numpy_contiguous_to_ptr([1, 2])


def test_a_dynamic_input_twice_as_large_gets_uint64_values(loaded, rt):
    """ge_executor.cc SetDynamicBatchSize: a buffer of 8 bytes or more holds the batch size as
    a uint64."""
    m = loaded(BATCH)
    wide = acl.mdl.create_dataset()
    ptr, _ = acl.rt.malloc(8, 0)
    acl.mdl.add_dataset_buffer(wide, acl.create_data_buffer(ptr, 8))
    assert acl.mdl.set_dynamic_batch_size(m.model_id, wide, 0, 4) == 0
    host = bytes(8)
    acl.rt.memcpy(acl.util.bytes_to_ptr(host), 8, ptr, 8, 2)
    assert host == (4).to_bytes(8, "little")
    acl.destroy_data_buffer(acl.mdl.get_dataset_buffer(wide, 0))
    acl.mdl.destroy_dataset(wide)
    acl.rt.free(ptr)
