"""Data buffers, tensor descriptors, the aclDataType/aclFormat enums and get_soc_name."""

import pytest

import ascend_memsim.acl as acl
from ascend_memsim import MiB, Runtime, Sanitizer
from ascend_memsim.memory.constants import DataType, Format

INVALID_PARAM = 100000
INVALID_HANDLE = 107017


@pytest.fixture
def rt():
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=Sanitizer(output=None)) as runtime:
        runtime.set_device(0)
        yield runtime


def test_enum_values_are_the_headers():
    # acl_base_rt.h
    assert (acl.ACL_FLOAT, acl.ACL_FLOAT16, acl.ACL_INT32, acl.ACL_BOOL, acl.ACL_BF16) == (
        0, 1, 3, 12, 27)
    assert acl.ACL_DT_UNDEFINED == -1 and acl.ACL_FLOAT4_E1M2 == 41
    assert (acl.ACL_FORMAT_NCHW, acl.ACL_FORMAT_ND, acl.ACL_FORMAT_NC1HWC0) == (0, 2, 3)
    assert acl.ACL_FRACTAL_Z_3D == 33 and acl.ACL_FORMAT_FRACTAL_NZ == 29
    assert acl.ACL_ERROR_OP_NOT_FOUND == 100024
    assert acl.ACL_UNKNOWN_RANK == 0xFFFFFFFFFFFFFFFE
    assert DataType(5 + 1) is DataType.INT16 and Format(-1) is Format.UNDEFINED


def test_data_buffer_round_trip(rt):
    dev = rt.malloc(256)
    buf = acl.create_data_buffer(dev, 256)
    assert buf != 0
    assert acl.get_data_buffer_addr(buf) == dev
    assert acl.get_data_buffer_size(buf) == acl.get_data_buffer_size_v2(buf) == 256
    assert acl.update_data_buffer(buf, dev, 128) == 0
    assert acl.get_data_buffer_size_v2(buf) == 128
    assert acl.destroy_data_buffer(buf) == 0
    # destroyed: the runtime's code, and the getters give their C defaults
    assert acl.destroy_data_buffer(buf) == INVALID_HANDLE
    assert acl.get_data_buffer_addr(buf) == 0
    assert "destroyed" in acl.get_recent_err_msg()
    rt.free(dev)


def test_empty_data_buffer_and_bad_arguments(rt):
    empty = acl.create_data_buffer(0, 0)
    assert empty != 0 and acl.get_data_buffer_size_v2(empty) == 0
    assert acl.create_data_buffer(0, 16) == 0          # data 0 needs size 0
    assert "size 0" in acl.get_recent_err_msg()
    assert acl.create_data_buffer("x", 16) == 0
    assert acl.update_data_buffer(empty, 0, 8) == INVALID_PARAM
    assert acl.get_data_buffer_size_v2(empty) == 0     # the failed update changed nothing
    assert acl.destroy_data_buffer(0x1234) == INVALID_HANDLE
    assert acl.destroy_data_buffer(0) == INVALID_PARAM
    acl.destroy_data_buffer(empty)


def test_tensor_desc_queries(rt):
    desc = acl.create_tensor_desc(acl.ACL_INT32, [8, 16], acl.ACL_FORMAT_ND)
    assert acl.get_tensor_desc_size(desc) == 512        # the Add sample's 8*16*4
    assert acl.get_tensor_desc_element_count(desc) == 128
    assert acl.get_tensor_desc_num_dims(desc) == 2
    assert acl.get_tensor_desc_dim(desc, 1) == 16
    assert acl.get_tensor_desc_dim_v2(desc, 0) == (8, 0)
    assert acl.get_tensor_desc_dim_v2(desc, 2) == (-1, INVALID_PARAM)
    assert acl.get_tensor_desc_dim(desc, 2) == -1
    assert acl.get_tensor_desc_type(desc) == acl.ACL_INT32
    assert acl.get_tensor_desc_format(desc) == acl.ACL_FORMAT_ND
    assert acl.destroy_tensor_desc(desc) is None
    assert acl.get_tensor_desc_type(desc) == -1
    assert acl.get_tensor_desc_format(desc) == -1
    assert acl.get_tensor_desc_size(desc) == 0
    assert acl.destroy_tensor_desc(desc) is None
    assert acl.get_recent_err_msg().startswith("tensor_desc")


def test_tensor_desc_sizes_per_type(rt):
    cases = {acl.ACL_FLOAT16: 2 * 600 * 3000, acl.ACL_DOUBLE: 8 * 600 * 3000,
             acl.ACL_INT4: 600 * 3000 // 2}
    for dtype, size in cases.items():
        desc = acl.create_tensor_desc(dtype, [600, 3000], acl.ACL_FORMAT_ND)
        assert acl.get_tensor_desc_size(desc) == size
        acl.destroy_tensor_desc(desc)
    scalar = acl.create_tensor_desc(acl.ACL_FLOAT, [], acl.ACL_FORMAT_ND)
    assert (acl.get_tensor_desc_num_dims(scalar), acl.get_tensor_desc_size(scalar)) == (0, 4)
    dynamic = acl.create_tensor_desc(acl.ACL_FLOAT, [-1, 3], acl.ACL_FORMAT_ND)
    assert acl.get_tensor_desc_size(dynamic) == 0
    assert acl.get_tensor_desc_dim_v2(dynamic, 0) == (-1, 0)
    unknown = acl.create_tensor_desc(acl.ACL_FLOAT, [-2], acl.ACL_FORMAT_ND)
    assert acl.get_tensor_desc_num_dims(unknown) == acl.ACL_UNKNOWN_RANK
    for d in (scalar, dynamic, unknown):
        acl.destroy_tensor_desc(d)
    assert acl.data_type_size(acl.ACL_FLOAT16) == 2 and acl.data_type_size(acl.ACL_INT4) == 1


@pytest.mark.parametrize("args", [
    (99, [2], 2), (acl.ACL_FLOAT, (2, 3), 2), (acl.ACL_FLOAT, [2, "3"], 2),
    (acl.ACL_FLOAT, [2], 7), (acl.ACL_FLOAT, [-3], 2), (1.0, [2], 2),
])
def test_bad_tensor_desc_gives_zero_and_a_message(rt, args):
    assert acl.create_tensor_desc(*args) == 0
    assert acl.get_recent_err_msg()
    assert rt.extension("compute", None).handles.live() == []


def test_desc_name_shape_format(rt):
    desc = acl.create_tensor_desc(acl.ACL_FLOAT, [2, 3], acl.ACL_FORMAT_ND)
    assert acl.set_tensor_desc_name(desc, "x") is None
    assert acl.get_tensor_desc_name(desc) == "x"
    assert acl.set_tensor_shape(desc, [4]) == 0 and acl.get_tensor_desc_size(desc) == 16
    assert acl.set_tensor_shape(desc, (4,)) == INVALID_PARAM
    assert acl.set_tensor_format(desc, acl.ACL_FORMAT_NCHW) == 0
    assert acl.set_tensor_format(desc, 1000) == INVALID_PARAM
    assert acl.get_tensor_desc_format(desc) == acl.ACL_FORMAT_NCHW
    acl.destroy_tensor_desc(desc)


def test_a_handle_of_another_kind_is_refused(rt):
    desc = acl.create_tensor_desc(acl.ACL_FLOAT, [2], acl.ACL_FORMAT_ND)
    assert acl.get_data_buffer_addr(desc) == 0
    assert "tensor descriptor" in acl.get_recent_err_msg()
    assert acl.destroy_data_buffer(desc) == INVALID_HANDLE
    assert acl.get_tensor_desc_size(desc) == 8   # still there
    acl.destroy_tensor_desc(desc)


def test_handles_never_destroyed_are_leaks_at_finalize():
    sanitizer = Sanitizer(output=None)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=sanitizer) as rt:
        assert acl.init() == 0
        acl.rt.set_device(0)
        acl.create_tensor_desc(acl.ACL_FLOAT, [2], acl.ACL_FORMAT_ND)
        kept = acl.create_data_buffer(0, 0)
        gone = acl.create_data_buffer(0, 0)
        acl.destroy_data_buffer(gone)
        acl.rt.reset_device(0)
        assert acl.finalize() == 0
        rt.close()
    leaks = [r for r in sanitizer.reports if r.kind == "leak"]
    assert sorted(r.address for r in leaks) == sorted([kept, kept - 64])
    assert any("aclDestroyTensorDesc" in r.where for r in leaks)
    assert any("aclDestroyDataBuffer" in r.where for r in leaks)


def test_a_leaked_data_buffer_counts_no_bytes_of_the_memory_it_describes():
    # Regression: the sanitizer reported "Leaked 4096 bytes" for a data buffer whose memory
    # had been freed; a handle holds no memory of its own
    sanitizer = Sanitizer(output=None)
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer=sanitizer) as rt:
        assert acl.init() == 0
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(4096, 0)
        buffer = acl.create_data_buffer(ptr, 4096)
        assert acl.rt.free(ptr) == 0
        assert acl.finalize() == 0
        rt.close()
    [leak] = [r for r in sanitizer.reports if r.kind == "leak"]
    assert (leak.address, leak.size) == (buffer, 0)
    assert "data buffer" in leak.where and "never destroyed" in leak.where
    assert "Leaked handle 0x" in leak.format() and "4096" not in leak.format()


@pytest.mark.parametrize("product, soc", [
    ("A2", "Ascend910B2"), ("A3", "Ascend910_9392"), ("310P", "Ascend310P3"),
    ("950PR", "Ascend950PR_9599"), ("950DT", "Ascend950DT_9591"),
])
def test_soc_name_per_product(product, soc):
    with Runtime(product, sanitizer="off"):
        assert acl.get_soc_name() == soc


def test_soc_name_without_a_runtime_is_none():
    assert acl.get_soc_name() is None
