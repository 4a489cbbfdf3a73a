"""The pyacl face: return shapes, error codes, init/finalize, config, contexts, queries."""

import importlib
import json
import os
import re
import sys
import threading

import pytest
from test_coverage import PYACL_BOUND

from ascend_memsim import GiB, MiB, Runtime, acl, aclrt, install_acl, uninstall_acl
from ascend_memsim.memory.constants import ErrorCode, MallocAttrType

E = ErrorCode
#: the reference page of the C APIs and their acl.rt names
C_API_PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                          "reference", "c-api.md")


def pyacl_cfg(*pairs):
    """An aclrtMallocConfig as pyacl takes it, from (attr_type, value) pairs."""
    key = {MallocAttrType.MODULE_ID: "moduleId"}
    return {"numAttrs": len(pairs),
            "attrs": [{"attr": int(t), "value": {key.get(t, "deviceId"): v}} for t, v in pairs]}


@pytest.fixture
def initialised(tmp_path):
    """acl.init with a 64 MiB A2 device 0 set; finalized afterwards."""
    config = tmp_path / "acl.json"
    config.write_text(json.dumps({"memsim": {"product": "A2", "hbm_bytes": 64 * MiB}}))
    assert acl.init(str(config)) == 0
    assert acl.rt.set_device(0) == 0
    yield
    acl.finalize()


def test_the_pyacl_shapes(initialised):
    ptr, ret = acl.rt.malloc(100, acl.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0 and isinstance(ptr, int) and ptr % 64 == 0
    free, total, ret = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
    assert (free, total, ret) == (64 * MiB - 192, 64 * MiB, 0)
    assert acl.rt.get_device() == (0, 0)
    assert acl.rt.get_device_count() == (1, 0)
    assert acl.rt.free(ptr) == 0


@pytest.mark.parametrize("call, expected", [
    (lambda: acl.rt.malloc(0, 0), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.malloc(1.5, 0), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.malloc(128 * MiB, 0), (0, E.RT_MEMORY_ALLOCATION)),
    (lambda: acl.rt.malloc(100, acl.ACL_MEM_MALLOC_HUGE1G_ONLY), (0, E.RT_MEMORY_ALLOCATION)),
    # memory.cpp (aclrtMallocCachedImpl) maps a _P2P policy to the default and goes on
    (lambda: acl.rt.malloc_cached(0, acl.ACL_MEM_MALLOC_HUGE_FIRST_P2P), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.free(0), E.INVALID_PARAM),
    (lambda: acl.rt.free("ptr"), E.INVALID_PARAM),
    (lambda: acl.rt.free(0x1234), E.RT_PARAM_INVALID),
    (lambda: acl.rt.get_mem_info(18), (0, 0, E.RT_INVALID_MEMORY_TYPE)),
    (lambda: acl.rt.get_mem_info(-1), (0, 0, E.RT_INVALID_MEMORY_TYPE)),
    (lambda: acl.rt.get_mem_info(1 << 70), (0, 0, E.RT_INVALID_MEMORY_TYPE)),
    (lambda: acl.rt.get_mem_info("1"), (0, 0, E.INVALID_PARAM)),
    (lambda: acl.rt.set_device(1 << 31), E.RT_INVALID_DEVICEID),
    (lambda: acl.rt.set_device(-1), E.RT_INVALID_DEVICEID),
    (lambda: acl.rt.set_device(1), E.RT_INVALID_DEVICEID),
    (lambda: acl.rt.set_device("0"), E.INVALID_PARAM),
    (lambda: acl.rt.get_mem_usage_info(0, 0), ([], E.INVALID_PARAM)),
    (lambda: acl.rt.get_mem_usage_info(3, 1), ([], E.RT_INVALID_DEVICEID)),
    (lambda: acl.rt.check_mem_type([], 2, 0), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.check_mem_type([1], 0x4, 0), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.check_mem_type([1], 0x2, 1), (0, E.INVALID_PARAM)),
    (lambda: acl.rt.malloc_with_cfg(100, 0, pyacl_cfg((9, 1))), (0, E.RT_PARAM_INVALID)),
    (lambda: acl.init(), E.REPEAT_INITIALIZE),
])
def test_bad_calls_return_vendor_codes(initialised, call, expected):
    assert call() == expected
    assert acl.get_recent_err_msg()


def test_calls_before_init_are_uninitialize():
    assert acl.rt.malloc(100, 0) == (0, E.UNINITIALIZE)
    assert acl.rt.set_device(0) == E.UNINITIALIZE
    assert acl.finalize() == E.REPEAT_FINALIZE


def test_memory_calls_need_a_current_device():
    with Runtime("A2", hbm_bytes=64 * MiB):
        assert acl.rt.malloc(100, 0) == (0, E.RT_CONTEXT_NULL)
        assert acl.rt.get_mem_info(1) == (0, 0, E.RT_CONTEXT_NULL)
        assert acl.rt.get_device() == (-1, E.RT_CONTEXT_NULL)


def test_finalize_discards_the_runtime_and_init_starts_fresh(tmp_path):
    assert acl.init() == 0
    acl.rt.set_device(0)
    first, _ = acl.rt.malloc(100, 0)
    acl.rt.malloc(100, 0)
    assert acl.finalize() == 0
    assert acl.rt.malloc(100, 0) == (0, E.UNINITIALIZE)
    assert acl.init() == 0
    acl.rt.set_device(0)
    again, _ = acl.rt.malloc(100, 0)
    assert again == first
    assert acl.finalize() == 0


def test_config_product_count_and_default_device(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({
        "memsim": {"product": "Atlas A3", "device_count": 4, "hbm_bytes": 256 * MiB},
        "defaultDevice": {"default_device": "2"},
        "dump": {"dump_path": "/tmp"},
    }))
    assert acl.init(str(config)) == 0
    try:
        assert acl.rt.get_device_count() == (4, 0)
        assert acl.rt.get_device() == (2, 0)  # no set_device needed
        _, ret = acl.rt.malloc(100, 0)
        assert ret == 0
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM) == (256 * MiB - 192, 256 * MiB, 0)
    finally:
        acl.finalize()


@pytest.mark.parametrize("text", ['{"memsim": {"product": "H100"}}', '{"memsim": {"colour": 1}}',
                                  '{"memsim": [1]}', "not json", '{"memsim": {"hbm_bytes": -64}}',
                                  '{"defaultDevice": {"default_device": "x"}}'])
def test_bad_configs_are_invalid_param_and_leave_nothing(tmp_path, text):
    config = tmp_path / "bad.json"
    config.write_text(text)
    assert acl.init(str(config)) == E.INVALID_PARAM
    assert acl.rt.malloc(100, 0) == (0, E.UNINITIALIZE)


def test_missing_config_file_is_invalid_param(tmp_path):
    assert acl.init(str(tmp_path / "absent.json")) == E.INVALID_PARAM
    assert acl.init(42) == E.INVALID_PARAM


def test_init_inside_an_active_runtime_adopts_it():
    with Runtime("950PR", hbm_bytes=64 * MiB) as rt:
        assert acl.init() == 0
        assert acl.init() == E.REPEAT_INITIALIZE
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(100, 0)
        assert rt.block(ptr).rule_size == 128  # the 950 rule: the adopted runtime
        assert acl.finalize() == 0
        assert rt.block(ptr) is not None  # finalize did not discard the adopted runtime


def test_set_device_is_reference_counted():
    with Runtime("A2", hbm_bytes=64 * MiB):
        acl.rt.set_device(0)
        acl.rt.set_device(0)
        ptr, _ = acl.rt.malloc(100, 0)
        assert acl.rt.reset_device(0) == 0
        assert acl.rt.get_mem_info(1)[0] == 64 * MiB - 192  # still set: one reference left
        assert acl.rt.reset_device(0) == 0
        assert acl.rt.get_device() == (-1, E.RT_CONTEXT_NULL)
        acl.rt.set_device(0)
        assert acl.rt.get_mem_info(1)[0] == 64 * MiB  # the last reset discarded the blocks
        assert acl.rt.free(ptr) == E.RT_PARAM_INVALID


def test_current_device_is_per_thread():
    with Runtime("A3", hbm_bytes=64 * MiB):
        acl.rt.set_device(0)
        seen = {}

        def worker():
            seen["before"] = acl.rt.get_device()
            acl.rt.set_device(1)
            seen["after"] = acl.rt.get_device()
            seen["ptr"] = acl.rt.malloc(100, 0)[0]

        t = threading.Thread(target=worker)
        t.start()
        t.join()
        assert seen["before"] == (-1, E.RT_CONTEXT_NULL)
        assert seen["after"] == (1, 0)
        assert acl.rt.get_device() == (0, 0)
        # a pointer names its device: freeing from device 0's thread finds device 1's block
        assert acl.rt.free(seen["ptr"]) == 0


# -- get_mem_info ------------------------------------------------------------------------------

ALL_ATTRS = range(18)


@pytest.mark.parametrize("attr", ALL_ATTRS)
def test_every_attribute_answers_on_every_product(attr):
    for product in ("950PR", "950DT", "A2", "A3", "310P"):
        with Runtime(product) as rt:
            rt.set_device(0)
            free, total, ret = acl.rt.get_mem_info(attr)
            assert ret == 0 and 0 <= free <= total


def test_hbm_attributes_on_a_ddr_only_part_are_answered_from_ddr():
    with Runtime("310P", ddr_bytes=64 * MiB) as rt:
        rt.set_device(0)
        rt.malloc(100)
        ddr = acl.rt.get_mem_info(acl.ACL_DDR_MEM)
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM) == ddr == (64 * MiB - 192, 64 * MiB, 0)
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM_HUGE1G) == (0, 0, 0)  # no 1 GB pages


def test_ddr_attributes_on_an_hbm_part_are_zero():
    with Runtime("A2") as rt:
        rt.set_device(0)
        for attr in (acl.ACL_DDR_MEM, acl.ACL_DDR_MEM_HUGE, acl.ACL_DDR_MEM_P2P_NORMAL):
            assert acl.rt.get_mem_info(attr) == (0, 0, 0)


def test_huge_figures_count_whole_free_pages():
    with Runtime("A2", hbm_bytes=3 * GiB) as rt:
        rt.set_device(0)
        rt.malloc(100, acl.ACL_MEM_MALLOC_NORMAL_ONLY)  # spoils the first 2 MiB and 1 GiB page
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM_HUGE) == (3 * GiB - 2 * MiB, 3 * GiB, 0)
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM_HUGE1G) == (2 * GiB, 3 * GiB, 0)
        assert acl.rt.get_mem_info(acl.ACL_MEM_HUGE1G) == (2 * GiB, 3 * GiB, 0)
    with Runtime("950PR") as rt:
        rt.set_device(0)
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM_HUGE1G) == (0, 0, 0)


# -- usage info and check_mem_type --------------------------------------------------------------

def test_usage_info_by_component(initialised):
    acl.rt.malloc_with_cfg(1000, 0, pyacl_cfg((MallocAttrType.MODULE_ID, 3)))
    acl.rt.malloc_with_cfg(5000, 0, pyacl_cfg((MallocAttrType.MODULE_ID, 45),
                                              (MallocAttrType.VA_FLAG, 0)))
    acl.rt.malloc(100, 0)
    infos, ret = acl.rt.get_mem_usage_info(0, 2)
    assert ret == 0
    # footprints: aclrtMallocWithCfg rounds to 32 with no +32 (memory.cpp), then to 64
    assert [(i.name, i.cur_mem_size, i.mem_peak_size) for i in infos] == [
        ("GE", 5056, 5056), ("HCCL", 1024, 1024)]


def test_usage_info_is_not_supported_on_950():
    with Runtime("950PR") as rt:
        rt.set_device(0)
        assert acl.rt.get_mem_usage_info(0, 4) == ([], E.RT_FEATURE_NOT_SUPPORT)


def test_malloc_with_cfg_device_must_be_current(initialised):
    assert acl.rt.malloc_with_cfg(100, 0, pyacl_cfg((MallocAttrType.DEVICE_ID, 0)))[1] == 0
    assert acl.rt.malloc_with_cfg(100, 0, pyacl_cfg((MallocAttrType.DEVICE_ID, 5))) == (
        0, E.RT_INVALID_DEVICEID)
    assert acl.rt.malloc_with_cfg(100, 0, "module=3") == (0, E.INVALID_PARAM)


def test_check_mem_type(initialised):
    a, _ = acl.rt.malloc(100, 0)
    b, _ = acl.rt.malloc(4 * MiB, 0)
    dev = acl.ACL_RT_MEM_TYPE_DEV
    assert acl.rt.check_mem_type([a, a + 100, b + 4 * MiB - 1], dev, 0) == (1, 0)
    assert acl.rt.check_mem_type([a, 0x1000], dev, 0) == (0, 0)
    assert acl.rt.check_mem_type([a], acl.ACL_RT_MEM_TYPE_DVPP, 0) == (0, 0)
    acl.rt.free(a)
    assert acl.rt.check_mem_type([a], dev, 0) == (0, 0)


# -- the C names and install_acl ----------------------------------------------------------------

C_TO_PYACL = {
    "aclInit": "init", "aclFinalize": "finalize",
    "aclrtSetDevice": "rt.set_device", "aclrtResetDevice": "rt.reset_device",
    "aclrtGetDevice": "rt.get_device", "aclrtGetDeviceCount": "rt.get_device_count",
    "aclrtMalloc": "rt.malloc", "aclrtMallocAlign32": "rt.malloc_align32",
    "aclrtMallocCached": "rt.malloc_cached", "aclrtMallocWithCfg": "rt.malloc_with_cfg",
    "aclrtMallocForTaskScheduler": "rt.malloc_for_task_scheduler", "aclrtFree": "rt.free",
    "aclrtFreeWithDevSync": "rt.free_with_dev_sync", "aclrtGetMemInfo": "rt.get_mem_info",
    "aclrtGetMemUsageInfo": "rt.get_mem_usage_info", "aclrtCheckMemType": "rt.check_mem_type",
    "aclrtMemcpy": "rt.memcpy", "aclrtMemset": "rt.memset",
    "aclrtMemcpyAsync": "rt.memcpy_async", "aclrtMemsetAsync": "rt.memset_async",
    "aclrtCmoAsync": "rt.cmo_async",
    "aclrtValueWrite": "rt.value_write", "aclrtValueWait": "rt.value_wait",
    "aclrtMallocHost": "rt.malloc_host", "aclrtFreeHost": "rt.free_host",
    "aclrtCreateStream": "rt.create_stream", "aclrtDestroyStream": "rt.destroy_stream",
    "aclrtSynchronizeStream": "rt.synchronize_stream",
    "aclrtSynchronizeDevice": "rt.synchronize_device",
    "aclrtCreateContext": "rt.create_context", "aclrtDestroyContext": "rt.destroy_context",
    "aclrtSetCurrentContext": "rt.set_context", "aclrtGetCurrentContext": "rt.get_context",
    "aclrtGetRunMode": "rt.get_run_mode",
    "aclrtMemFlush": "rt.mem_flush", "aclrtMemInvalidate": "rt.mem_invalidate",
    "acldvppMalloc": "media.dvpp_malloc", "acldvppFree": "media.dvpp_free",
    "aclCreateDataBuffer": "create_data_buffer", "aclDestroyDataBuffer": "destroy_data_buffer",
    "aclGetDataBufferAddr": "get_data_buffer_addr", "aclGetDataBufferSize": "get_data_buffer_size",
    "aclGetDataBufferSizeV2": "get_data_buffer_size_v2",
    "aclUpdateDataBuffer": "update_data_buffer", "aclDataTypeSize": "data_type_size",
    "aclCreateTensorDesc": "create_tensor_desc", "aclDestroyTensorDesc": "destroy_tensor_desc",
    "aclGetTensorDescType": "get_tensor_desc_type",
    "aclGetTensorDescFormat": "get_tensor_desc_format",
    "aclGetTensorDescSize": "get_tensor_desc_size",
    "aclGetTensorDescElementCount": "get_tensor_desc_element_count",
    "aclGetTensorDescNumDims": "get_tensor_desc_num_dims",
    "aclGetTensorDescDim": "get_tensor_desc_dim",
    "aclGetTensorDescDimV2": "get_tensor_desc_dim_v2",
    "aclGetTensorDescName": "get_tensor_desc_name", "aclSetTensorDescName": "set_tensor_desc_name",
    "aclSetTensorShape": "set_tensor_shape", "aclSetTensorFormat": "set_tensor_format",
    "aclSetTensorConst": "set_tensor_const",
    "aclrtGetSocName": "get_soc_name", "aclopSetModelDir": "op.set_model_dir",
    "aclopCreateAttr": "op.create_attr", "aclopDestroyAttr": "op.destroy_attr",
    "aclopSetAttrBool": "op.set_attr_bool", "aclopSetAttrInt": "op.set_attr_int",
    "aclopSetAttrFloat": "op.set_attr_float", "aclopSetAttrString": "op.set_attr_string",
    "aclopSetAttrListBool": "op.set_attr_list_bool", "aclopSetAttrListInt": "op.set_attr_list_int",
    "aclopSetAttrListFloat": "op.set_attr_list_float",
    "aclopSetAttrListString": "op.set_attr_list_string",
    "aclopSetAttrListListInt": "op.set_attr_list_list_int",
    "aclopSetAttrDataType": "op.set_attr_data_type",
    "aclopSetAttrListDataType": "op.set_attr_list_data_type", "aclopExecuteV2": "op.execute_v2",
    "aclopExecute": "op.execute", "aclopCreateHandle": "op.create_handle",
    "aclopExecWithHandle": "op.execute_with_handle", "aclopDestroyHandle": "op.destroy_handle",
    "aclopCast": "op.cast", "aclopCreateHandleForCast": "op.create_handle_for_cast",
    "aclmdlLoadFromFile": "mdl.load_from_file", "aclmdlLoadFromMem": "mdl.load_from_mem",
    "aclmdlLoadFromFileWithMem": "mdl.load_from_file_with_mem",
    "aclmdlLoadFromMemWithMem": "mdl.load_from_mem_with_mem", "aclmdlQuerySize": "mdl.query_size",
    "aclmdlQuerySizeFromMem": "mdl.query_size_from_mem", "aclmdlUnload": "mdl.unload",
    "aclmdlCreateDesc": "mdl.create_desc", "aclmdlGetDesc": "mdl.get_desc",
    "aclmdlDestroyDesc": "mdl.destroy_desc", "aclmdlGetNumInputs": "mdl.get_num_inputs",
    "aclmdlGetNumOutputs": "mdl.get_num_outputs",
    "aclmdlGetInputSizeByIndex": "mdl.get_input_size_by_index",
    "aclmdlGetOutputSizeByIndex": "mdl.get_output_size_by_index",
    "aclmdlGetInputDims": "mdl.get_input_dims", "aclmdlGetInputDimsV2": "mdl.get_input_dims_v2",
    "aclmdlGetOutputDims": "mdl.get_output_dims",
    "aclmdlGetCurOutputDims": "mdl.get_cur_output_dims",
    "aclmdlGetInputDataType": "mdl.get_input_data_type",
    "aclmdlGetOutputDataType": "mdl.get_output_data_type",
    "aclmdlGetInputFormat": "mdl.get_input_format",
    "aclmdlGetOutputFormat": "mdl.get_output_format",
    "aclmdlGetInputNameByIndex": "mdl.get_input_name_by_index",
    "aclmdlGetOutputNameByIndex": "mdl.get_output_name_by_index",
    "aclmdlGetInputIndexByName": "mdl.get_input_index_by_name",
    "aclmdlGetOutputIndexByName": "mdl.get_output_index_by_name",
    "aclmdlGetDynamicBatch": "mdl.get_dynamic_batch", "aclmdlGetDynamicHW": "mdl.get_dynamic_hw",
    "aclmdlGetInputDynamicGearCount": "mdl.get_input_dynamic_gear_count",
    "aclmdlGetInputDynamicDims": "mdl.get_input_dynamic_dims",
    "aclmdlCreateDataset": "mdl.create_dataset",
    "aclmdlAddDatasetBuffer": "mdl.add_dataset_buffer",
    "aclmdlGetDatasetNumBuffers": "mdl.get_dataset_num_buffers",
    "aclmdlGetDatasetBuffer": "mdl.get_dataset_buffer",
    "aclmdlDestroyDataset": "mdl.destroy_dataset", "aclmdlExecute": "mdl.execute",
    "aclmdlSetDynamicBatchSize": "mdl.set_dynamic_batch_size",
    "aclmdlSetDynamicHWSize": "mdl.set_dynamic_hw_size",
    "aclmdlSetInputDynamicDims": "mdl.set_input_dynamic_dims",
    "aclmdlSetDatasetTensorDesc": "mdl.set_dataset_tensor_desc",
    "aclmdlGetDatasetTensorDesc": "mdl.get_dataset_tensor_desc",
    "aclmdlExecuteAsync": "mdl.execute_async",
    "aclrtCreateStreamWithConfig": "rt.create_stream_with_config",
    "aclrtCreateEvent": "rt.create_event", "aclrtCreateEventWithFlag": "rt.create_event_with_flag",
    "aclrtCreateEventExWithFlag": "rt.create_event_ex_with_flag",
    "aclrtRecordEvent": "rt.record_event", "aclrtResetEvent": "rt.reset_event",
    "aclrtSynchronizeEvent": "rt.synchronize_event",
    "aclrtSynchronizeEventWithTimeout": "rt.synchronize_event_with_timeout",
    "aclrtQueryEventStatus": "rt.query_event_status", "aclrtQueryEvent": "rt.query_event",
    "aclrtQueryEventWaitStatus": "rt.query_event_wait_status",
    "aclrtStreamWaitEvent": "rt.stream_wait_event",
    "aclrtEventElapsedTime": "rt.event_elapsed_time",
    "aclrtEventGetTimestamp": "rt.event_get_timestamp", "aclrtDestroyEvent": "rt.destroy_event",
    "aclrtSubscribeReport": "rt.subscribe_report",
    "aclrtUnSubscribeReport": "rt.unsubscribe_report", "aclrtProcessReport": "rt.process_report",
    "aclrtLaunchCallback": "rt.launch_callback",
    # the rest of the memory chapter (acl/_rt_memory.py)
    "aclrtDeviceCanAccessPeer": "rt.device_can_access_peer",
    "aclrtDeviceEnablePeerAccess": "rt.device_enable_peer_access",
    "aclrtDeviceDisablePeerAccess": "rt.device_disable_peer_access",
    "aclrtDevicePeerAccessStatus": "rt.device_peer_access_status",
    "aclrtMallocHostWithCfg": "rt.malloc_host_with_cfg",
    "aclrtFreeHostWithDevSync": "rt.free_host_with_dev_sync",
    "aclrtHostRegister": "rt.host_register", "aclrtHostRegisterV2": "rt.host_register_v2",
    "aclrtHostUnregister": "rt.host_unregister",
    "aclrtHostGetDevicePointer": "rt.host_get_device_pointer",
    "aclrtHostMemMapCapabilities": "rt.host_mem_map_capabilities",
    "aclrtMemcpy2d": "rt.memcpy2d", "aclrtMemcpy2dAsync": "rt.memcpy2d_async",
    "aclrtMemcpyBatch": "rt.memcpy_batch", "aclrtMemcpyBatchV2": "rt.memcpy_batch_v2",
    "aclrtMemcpyBatchAsync": "rt.memcpy_batch_async",
    "aclrtMemcpyBatchAsyncV2": "rt.memcpy_batch_async_v2",
    "aclrtGetMemcpyDescSize": "rt.get_memcpy_desc_size",
    "aclrtSetMemcpyDesc": "rt.set_memcpy_desc",
    "aclrtMemcpyAsyncWithDesc": "rt.memcpy_async_with_desc",
    "aclrtMemcpyAsyncWithOffset": "rt.memcpy_async_with_offset",
    "aclrtMemsetD32": "rt.memset_d32", "aclrtMemsetD32Async": "rt.memset_d32_async",
    "aclrtMemcpyAsyncWithCondition": "rt.memcpy_async_with_condition",
    "aclrtReserveMemAddress": "rt.reserve_mem_address",
    "aclrtReserveMemAddressNoUCMemory": "rt.reserve_mem_address_no_uc_memory",
    "aclrtReleaseMemAddress": "rt.release_mem_address",
    "aclrtMallocPhysical": "rt.malloc_physical", "aclrtFreePhysical": "rt.free_physical",
    "aclrtMapMem": "rt.map_mem", "aclrtMemMapNoAccess": "rt.mem_map_no_access",
    "aclrtDeviceGetBareTgid": "rt.device_get_bare_tgid",
    "aclrtMemExportToShareableHandle": "rt.mem_export_to_shareable_handle",
    "aclrtMemSetPidToShareableHandle": "rt.mem_set_pid_to_shareable_handle",
    "aclrtMemImportFromShareableHandle": "rt.mem_import_from_shareable_handle",
    "aclrtMemExportToShareableHandleV2": "rt.mem_export_to_shareable_handle_v2",
    "aclrtMemSetPidToShareableHandleV2": "rt.mem_set_pid_to_shareable_handle_v2",
    "aclrtMemImportFromShareableHandleV2": "rt.mem_import_from_shareable_handle_v2",
    "aclrtIpcMemGetExportKey": "rt.ipc_mem_get_export_key",
    "aclrtIpcMemSetImportPid": "rt.ipc_mem_set_import_pid",
    "aclrtIpcMemImportByKey": "rt.ipc_mem_import_by_key",
    "aclrtIpcMemSetAttr": "rt.ipc_mem_set_attr", "aclrtIpcMemClose": "rt.ipc_mem_close",
    "aclrtUnmapMem": "rt.unmap_mem",
    "aclrtMemGetAllocationGranularity": "rt.mem_get_allocation_granularity",
    "aclrtMemSetAccess": "rt.mem_set_access", "aclrtMemGetAccess": "rt.mem_get_access",
    "aclrtMemRetainAllocationHandle": "rt.mem_retain_allocation_handle",
    "aclrtMemGetAllocationPropertiesFromHandle": "rt.mem_get_allocation_properties_from_handle",
    "aclrtMemGetAddressRange": "rt.mem_get_address_range",
    "aclrtPointerGetAttributes": "rt.pointer_get_attributes",
    "aclrtMemPoolCreate": "rt.mem_pool_create",
    "aclrtMemPoolDestroy": "rt.mem_pool_destroy",
    "aclrtMemPoolSetAttr": "rt.mem_pool_set_attr",
    "aclrtMemPoolGetAttr": "rt.mem_pool_get_attr",
    "aclrtMemPoolMallocAsync": "rt.mem_pool_malloc_async",
    "aclrtMemPoolFreeAsync": "rt.mem_pool_free_async",
    "aclrtMemPoolTrimTo": "rt.mem_pool_trim_to",
    "aclrtAllocatorCreateDesc": "rt.allocator_create_desc",
    "aclrtAllocatorDestroyDesc": "rt.allocator_destroy_desc",
    "aclrtAllocatorSetObjToDesc": "rt.allocator_set_obj_to_desc",
    "aclrtAllocatorSetAllocFuncToDesc": "rt.allocator_set_alloc_func_to_desc",
    "aclrtAllocatorSetFreeFuncToDesc": "rt.allocator_set_free_func_to_desc",
    "aclrtAllocatorSetAllocAdviseFuncToDesc": "rt.allocator_set_alloc_advise_func_to_desc",
    "aclrtAllocatorSetGetAddrFromBlockFuncToDesc":
        "rt.allocator_set_get_addr_from_block_func_to_desc",
    "aclrtAllocatorRegister": "rt.allocator_register",
    "aclrtAllocatorGetByStream": "rt.allocator_get_by_stream",
    "aclrtAllocatorUnregister": "rt.allocator_unregister",
    "aclrtCmoAsyncWithBarrier": "rt.cmo_async_with_barrier",
    "aclrtCmoWaitBarrier": "rt.cmo_wait_barrier", "aclrtCmoGetDescSize": "rt.cmo_get_desc_size",
    "aclrtCmoSetDesc": "rt.cmo_set_desc", "aclrtCmoAsyncWithDesc": "rt.cmo_async_with_desc",
    "aclrtGetSymbolAddress": "rt.get_symbol_address",
    "aclrtGetSymbolSize": "rt.get_symbol_size",
    "aclrtMemcpyFromSymbol": "rt.memcpy_from_symbol",
    "aclrtMemcpyFromSymbolAsync": "rt.memcpy_from_symbol_async",
    "aclrtMemcpyToSymbol": "rt.memcpy_to_symbol",
    "aclrtMemcpyToSymbolAsync": "rt.memcpy_to_symbol_async",
    "aclrtMemAllocManaged": "rt.mem_alloc_managed",
    "aclrtMemManagedAdvise": "rt.mem_managed_advise",
    "aclrtMemManagedGetAttr": "rt.mem_managed_get_attr",
    "aclrtMemManagedGetAttrs": "rt.mem_managed_get_attrs",
    "aclrtMemManagedPrefetchAsync": "rt.mem_managed_prefetch_async",
    "aclrtMemManagedPrefetchBatchAsync": "rt.mem_managed_prefetch_batch_async",
    "aclrtMemP2PMap": "rt.mem_p2p_map",
}


def test_every_c_name_is_its_pyacl_function():
    # acl.media's C names beyond these two follow acl_dvpp.h's rule (test_media_descs.py)
    media = {c for c in aclrt.C_NAMES if c.startswith(("acldvpp", "aclvdec", "aclvenc"))}
    assert set(aclrt.C_NAMES) - media == set(C_TO_PYACL) - media
    assert {"acldvppMalloc", "acldvppFree"} <= set(C_TO_PYACL)
    for c_name, path in C_TO_PYACL.items():
        target = acl
        for part in path.split("."):
            target = getattr(target, part)
        assert getattr(aclrt, c_name) is target, c_name


def test_c_names_follow_the_documented_rules(initialised):
    ptr, ret = aclrt.aclrtMallocAlign32(2 * MiB, aclrt.ACL_MEM_MALLOC_HUGE_FIRST)
    assert ret == 0
    assert aclrt.aclrtGetMemInfo(aclrt.ACL_HBM_MEM)[:2] == (62 * MiB, 64 * MiB)  # no +32
    assert aclrt.aclrtFreeWithDevSync(ptr) == 0


def test_install_acl_makes_import_acl_the_simulator():
    previous = install_acl()
    try:
        import acl as real_looking

        assert real_looking is acl
        from acl import rt  # noqa: F401  (the submodule import form works too)

        assert real_looking.init() == 0
        real_looking.rt.set_device(0)
        assert real_looking.rt.malloc(100, 0)[1] == 0
        assert real_looking.finalize() == 0
    finally:
        uninstall_acl(previous)
    assert "acl" not in sys.modules or sys.modules["acl"] is previous


def test_constants_have_vendor_values():
    assert (acl.ACL_MEM_MALLOC_HUGE_FIRST, acl.ACL_MEM_MALLOC_HUGE1G_ONLY_P2P) == (0, 7)
    assert acl.ACL_MEM_ACCESS_USER_SPACE_READONLY == 0x100000
    assert (acl.ACL_HBM_MEM, acl.ACL_MEM_P2P_HUGE1G) == (1, 17)
    assert acl.ACL_ERROR_RT_MEMORY_ALLOCATION == 207001
    assert acl.ACL_MEMCPY_INTER_DEVICE_TO_DEVICE == 7
    assert acl.ACL_RT_MEM_TYPE_RSVD == 0x10


def test_a_bug_in_the_core_still_raises(monkeypatch, initialised):
    from ascend_memsim import Runtime

    def broken(self, *args, **kwargs):
        raise KeyError("bug")

    monkeypatch.setattr(Runtime, "malloc", broken)
    with pytest.raises(KeyError):
        acl.rt.malloc(100, 0)


# -- regressions from review --------------------------------------------------------------------

@pytest.mark.parametrize("content", [b"\xff\xfe{}", b'{"a": ' + b"9" * 5000 + b"}",
                                     b"[" * 100000, b"null", b"[]", b"false", b"0"])
def test_unreadable_configs_are_invalid_param_not_exceptions(tmp_path, content):
    config = tmp_path / "c.json"
    config.write_bytes(content)
    assert acl.init(str(config)) == E.INVALID_PARAM
    assert acl.rt.malloc(100, 0) == (0, E.UNINITIALIZE)


def test_nul_in_the_config_path_is_invalid_param():
    assert acl.init("a\0b.json") == E.INVALID_PARAM


@pytest.mark.parametrize("default", [True, 1.9, "x", [], "-1"])
def test_default_device_must_be_an_id(tmp_path, default):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"memsim": {"product": "A3"},
                                  "defaultDevice": {"default_device": default}}))
    assert acl.init(str(config)) in (E.INVALID_PARAM, E.RT_INVALID_DEVICEID)


def test_default_device_section_must_be_an_object(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"defaultDevice": "0"}))
    assert acl.init(str(config)) == E.INVALID_PARAM


def test_init_applies_its_config_to_an_adopted_runtime_without_devices(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"memsim": {"product": "950PR", "hbm_bytes": 64 * MiB},
                                  "defaultDevice": {"default_device": "0"}}))
    with Runtime("A2") as rt:
        assert acl.init(str(config)) == 0
        ptr, ret = acl.rt.malloc(100, 0)  # no set_device: the config's default device
        assert ret == 0 and rt.block(ptr).rule_size == 128  # 950PR's rule
        assert acl.rt.get_mem_info(acl.ACL_HBM_MEM)[1] == 64 * MiB
        acl.rt.free(ptr)
        assert acl.finalize() == 0


def test_init_refuses_a_product_change_once_devices_exist(tmp_path):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"memsim": {"product": "950PR"},
                                  "defaultDevice": {"default_device": "0"}}))
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        rt.set_device(0)
        assert acl.init(str(config)) == E.INVALID_PARAM
        assert "already has devices" in acl.get_recent_err_msg()
        assert rt.profile.name == "A2" and not rt.acl_initialized and rt.default_device is None


def test_finalize_finds_the_initialised_runtime_under_a_with_block():
    assert acl.init() == 0
    with Runtime("950PR"):
        assert acl.finalize() == 0
    assert acl.rt.malloc(100, 0) == (0, E.UNINITIALIZE)


def test_entering_the_same_runtime_twice_closes_it_once():
    rt = Runtime("A2", hbm_bytes=64 * MiB)
    with rt:
        with rt:
            rt.set_device(0)
        ptr, ret = acl.rt.malloc(100, 0)
        assert ret == 0
        acl.rt.free(ptr)


def test_numpy_pointers_find_their_device():
    np = pytest.importorskip("numpy", reason="numpy is an optional extra")
    with Runtime("A3", hbm_bytes=64 * MiB) as rt:
        rt.set_device(1)
        on_one = rt.malloc(100)
        rt.set_device(0)
        assert rt.block(np.uint64(on_one)) is rt.block(on_one)
        assert acl.rt.free(np.uint64(on_one)) == 0


def test_usage_info_needs_a_device_and_a_failed_call_makes_none():
    with Runtime("A3", hbm_bytes=64 * MiB) as rt:
        assert acl.rt.get_mem_usage_info(0, 1) == ([], E.RT_CONTEXT_NULL)
        rt.set_device(0)
        assert acl.rt.get_mem_usage_info(1, 0) == ([], E.INVALID_PARAM)
        assert acl.rt.get_mem_usage_info(1, 5) == ([], 0)
        assert [d.device_id for d in rt.devices()] == [0]
    with Runtime("950PR") as rt:
        rt.set_device(0)
        assert acl.rt.get_mem_usage_info(0, 0) == ([], E.RT_FEATURE_NOT_SUPPORT)


def test_free_with_dev_sync_of_a_bad_pointer_leaves_the_queue(initialised):
    from ascend_memsim import current_runtime

    streams = current_runtime().streams
    ptr, _ = acl.rt.malloc(100, 0)
    assert acl.rt.memset_async(ptr, 100, 7, 100, 0) == 0
    assert acl.rt.free_with_dev_sync(0) == E.INVALID_PARAM
    assert acl.rt.free_with_dev_sync(ptr + 64) == E.RT_PARAM_INVALID
    assert acl.rt.free_with_dev_sync(0x1234) == E.RT_PARAM_INVALID
    assert streams.pending == 1
    assert acl.rt.free_with_dev_sync(ptr) == 0
    assert streams.pending == 0


def test_free_refuses_dvpp_memory_and_dvpp_free_refuses_the_rest(initialised):
    from ascend_memsim import current_runtime

    dvpp, _ = acl.media.dvpp_malloc(1000)
    plain, _ = acl.rt.malloc(64, 0)
    assert acl.rt.memset_async(plain, 64, 1, 64, 0) == 0
    for free in (acl.rt.free, acl.rt.free_with_dev_sync):
        assert free(dvpp) == E.RT_PARAM_INVALID
        assert "acl.media.dvpp_free" in acl.get_recent_err_msg()
    assert current_runtime().streams.pending == 1  # the refused free_with_dev_sync ran nothing
    assert acl.media.dvpp_free(plain) == E.RT_PARAM_INVALID
    assert current_runtime().block(dvpp) is not None
    assert acl.media.dvpp_free(dvpp) == 0
    assert acl.rt.free(plain) == 0


@pytest.mark.parametrize(("section", "key"), [
    ({"memsim": {"sanitizer": {"print_limit": "x"}}}, "print_limit"),
    ({"memsim": {"sanitizer": {"print_limit": 1e400}}}, "print_limit"),
    ({"memsim": {"sanitizer": {"output": "report.txt"}}}, "output"),
    ({"memsim": {"sanitizer": {"output": 1}}}, "output"),
    ({"memsim": {"sanitizer": {"history": None}}}, "history"),
    ({"memsim": {"sanitizer": {"site_depth": "x"}}}, "site_depth"),
    ({"memsim": {"sanitizer": {"site_depth": 0}}}, "site_depth"),
    ({"memsim": {"sanitizer": {"quarantine_bytes": -1}}}, "quarantine_bytes"),
    ({"memsim": {"sanitizer": {"quarantine_bytes": 1.5}}}, "quarantine_bytes"),
    ({"memsim": {"sanitizer": {"initcheck": 1}}}, "initcheck"),
    ({"memsim": {"sanitizer": {"leaks": "no"}}}, "leaks"),
    ({"memsim": {"sanitizer": {"record_sites": None}}}, "record_sites"),
    ({"memsim": {"sanitizer": {"mode": ["strict"]}}}, "mode"),
    ({"memsim": {"sanitizer": {"colour": 1}}}, "colour"),
    ({"defaultDevice": {"default_device": "\u00b2"}}, "default_device"),
    ({"defaultDevice": {"default_device": "01"}}, "default_device"),
    ({"defaultDevice": {"default_device": "9" * 5000}}, "default_device"),
    ({"memsim": {"faults": [{"nth": "x"}]}}, "faults[0]"),
    ({"memsim": {"faults": [{"probability": 1e400}]}}, "faults[0]"),
])
def test_every_bad_config_value_is_refused_at_init_naming_its_key(tmp_path, section, key):
    """Issue 9: these raised ValueError / OverflowError at init, or were accepted and made a
    later free or finalize raise. Now acl.init refuses each with 100000 and names the key
    (defaultDevice: json_parser.cpp accepts only "0|[1-9]\\d*")."""
    config = tmp_path / "bad.json"
    config.write_text(json.dumps(section))
    assert acl.init(str(config)) == E.INVALID_PARAM
    assert key in acl.get_recent_err_msg()
    assert acl.rt.malloc(100, 0) == (0, E.UNINITIALIZE)


def test_sanitizer_output_stdout_prints_reports_there(tmp_path, capsys):
    config = tmp_path / "c.json"
    config.write_text(json.dumps({"memsim": {"sanitizer": {"output": "stdout"}}}))
    assert acl.init(str(config)) == 0
    try:
        assert acl.rt.set_device(0) == 0
        assert acl.rt.free(0x1234) == E.RT_PARAM_INVALID
        assert acl.rt.reset_device(0) == 0
    finally:
        assert acl.finalize() == 0
    assert "invalid-free" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["mem_flush", "mem_invalidate"])
def test_mem_flush_and_invalidate_check_their_arguments_and_do_nothing(name):
    """acl_rt.h: aclrtMemFlush / aclrtMemInvalidate(void *devPtr, size_t size); memory.cpp
    refuses NULL and size 0 with 100000, then rtFlushCache / rtInvalidCache needs a context
    (107002) and on the standard SoCs returns at once, checking no range."""
    call = getattr(acl.rt, name)
    c_call = getattr(aclrt, {"mem_flush": "aclrtMemFlush",
                             "mem_invalidate": "aclrtMemInvalidate"}[name])
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        assert call(0, 64) == E.INVALID_PARAM            # NULL before the context
        assert call(0x1234, 64) == E.RT_CONTEXT_NULL
        rt.set_device(0)
        ptr = rt.malloc(100)
        before = (rt.get_mem_info(acl.ACL_HBM_MEM), rt.block(ptr))
        assert call(ptr, 100) == 0 and c_call(ptr, 100) == 0
        assert call(ptr + 4096, 1 << 20) == 0            # no range check, as the runtime
        for bad in [(ptr, 0), (0, 100), (None, 100), (ptr, 1.5), (ptr, -1), (2**64, 1),
                    (True, 1), (ptr, "8")]:
            assert call(*bad) == E.INVALID_PARAM, bad
        assert (rt.get_mem_info(acl.ACL_HBM_MEM), rt.block(ptr)) == before
        rt.free(ptr)


def test_finalize_of_an_adopted_runtime_takes_back_what_init_added(tmp_path):
    """acl.init inside `with Runtime()` adds the config's faults and holds the default
    device; acl.finalize takes both back, so repeated init/finalize pairs do not pile up."""
    config = tmp_path / "acl.json"
    config.write_text('{"memsim": {"faults": [{"nth": 1000, "api": "malloc"}]},'
                      ' "defaultDevice": {"default_device": "0"}}')
    with Runtime("A2", hbm_bytes=64 * MiB) as rt:
        for _ in range(3):
            assert acl.init(str(config)) == 0
            assert len(rt.interceptors) == 1 and rt.default_device == 0
            assert acl.finalize() == 0
            assert rt.interceptors == [] and rt.default_device is None
        assert acl.rt.set_device(0) == 0
        ptr, _ = acl.rt.malloc(100, 0)
        # the program's own reset is the last reference: the block is discarded (a leak)
        acl.rt.reset_device(0)
        assert rt.device(0).block(ptr) is None


# -- strict where pyacl is strict (hicann/runtime python/pyACL/) ---------------------------------

def test_async_copies_need_their_stream(initialised):
    """rt_memory.cpp parses "kkkkik" / "kkikk": the stream is not optional. A program that
    left it out passed here and raised on hardware."""
    ptr, _ = acl.rt.malloc(64, 0)
    with pytest.raises(TypeError):
        acl.rt.memset_async(ptr, 64, 0, 64)
    with pytest.raises(TypeError):
        acl.rt.memcpy_async(ptr, 64, ptr, 64, 3)
    assert acl.rt.memset_async(ptr, 64, 0, 64, 0) == 0
    assert acl.rt.synchronize_device() == 0


def test_memset_value_is_an_int32(initialised):
    """aclrtMemset's value is an int32_t, parsed "i" by pyacl (rt_memory.cpp): 2**40 raised
    there and was taken here (its low byte used)."""
    ptr, _ = acl.rt.malloc(64, 0)
    for value in (2**31, -(2**31) - 1, 2**40):
        assert acl.rt.memset(ptr, 64, value, 64) == E.INVALID_PARAM
        assert acl.rt.memset_async(ptr, 64, value, 64, 0) == E.INVALID_PARAM
    for value in (2**31 - 1, -(2**31), 0x1FF):
        assert acl.rt.memset(ptr, 64, value, 64) == 0


def test_c_strings_hold_no_nul(initialised):
    """pyacl's "s" format refuses a str holding NUL (ValueError); set_model_dir("a\\0")
    returned 0 here."""
    assert acl.op.set_model_dir("dir\0x") == E.INVALID_PARAM
    assert "NUL" in acl.get_recent_err_msg()
    assert acl.mdl.load_from_file("m\0.om") == (0, E.INVALID_PARAM)
    attr = acl.op.create_attr()
    assert acl.op.set_attr_string(attr, "a", "x\0y") == E.INVALID_PARAM
    assert acl.op.set_attr_string(attr, "a", "") == 0
    acl.op.destroy_attr(attr)
    desc = acl.create_tensor_desc(0, [2], 0)
    assert acl.set_tensor_desc_name(desc, "n\0") is None
    assert acl.get_tensor_desc_name(desc) == ""
    acl.destroy_tensor_desc(desc)


def test_a_failed_call_returns_a_fresh_empty_list(initialised):
    """get_mem_usage_info's [] on an error was one shared list: what a caller appended
    came back from the next failed call."""
    infos, ret = acl.rt.get_mem_usage_info(7, 1)
    assert (infos, ret) == ([], E.RT_INVALID_DEVICEID)
    infos.append("stale")
    assert acl.rt.get_mem_usage_info(7, 1) == ([], E.RT_INVALID_DEVICEID)


def test_face_functions_take_no_keywords(initialised):
    """pyacl's functions are METH_VARARGS: a keyword argument is a TypeError there."""
    with pytest.raises(TypeError):
        acl.rt.malloc(size=64, policy=0)
    with pytest.raises(TypeError):
        acl.rt.free(dev_ptr=0)
    with pytest.raises(TypeError):
        acl.util.ptr_to_bytes(ptr=0, size=1)


def test_malloc_with_cfg_takes_pyacl_s_dict_only(initialised):
    """rt_memory.cpp (WrapAclRtMallocWithCfg): cfg is required and a dict, {} for none, else
    {"numAttrs": n, "attrs": [{"attr": t, "value": {"moduleId": m}}]}. The face took None,
    {attr_type: value} and a list of pairs, which raise on hardware."""
    with pytest.raises(TypeError):
        acl.rt.malloc_with_cfg(100, 0)
    for cfg in (None, {MallocAttrType.MODULE_ID: 3}, [(MallocAttrType.MODULE_ID, 3)],
                {"attrs": "x"}, {"numAttrs": 2, "attrs": [{"attr": 1, "value": {"moduleId": 3}}]},
                {"numAttrs": 1, "attrs": [{"attr": 1, "value": {"other": 3}}]},
                {"numAttrs": 1, "attrs": [{"attr": 1, "value": {"moduleId": -1}}]},
                {"numAttrs": 1, "attrs": [5]}):
        assert acl.rt.malloc_with_cfg(100, 0, cfg) == (0, E.INVALID_PARAM), cfg
        assert acl.rt.malloc_for_task_scheduler(100, 0, cfg) == (0, E.INVALID_PARAM), cfg
    ptr, ret = acl.rt.malloc_with_cfg(100, 0, {})
    assert ret == 0 and acl.rt.free(ptr) == 0
    # moduleId is a uint16 in the union: 3 + 65536 names module 3 (HCCL in log_types.h)
    ptr, ret = acl.rt.malloc_with_cfg(100, 0, pyacl_cfg((MallocAttrType.MODULE_ID, 3 + 65536)))
    assert ret == 0
    infos, _ = acl.rt.get_mem_usage_info(0, 4)
    assert any(i.name == "HCCL" for i in infos)
    assert acl.rt.free(ptr) == 0


def test_cfg_is_read_as_the_c_api_reads_it(initialised):
    """PyDict_GetItemString / PyList_GetItem: a subclass's overridden methods do not run, an
    object that only claims to be a dict is not one, an enum member is an int."""
    class Loud(dict):
        def get(self, *args):
            raise RuntimeError("not called by pyacl")

    class Liar:
        @property
        def __class__(self):
            return dict

    ptr, ret = acl.rt.malloc_with_cfg(64, 0, Loud(numAttrs=1, attrs=[
        {"attr": MallocAttrType.MODULE_ID, "value": {"moduleId": 3}}]))
    assert ret == 0 and acl.rt.free(ptr) == 0
    assert acl.rt.malloc_with_cfg(64, 0, Liar()) == (0, E.INVALID_PARAM)
    assert acl.rt.malloc_with_cfg(64, 0, {"numAttrs": Liar(), "attrs": []}) == (
        0, E.INVALID_PARAM)


def test_init_takes_a_path_or_nothing():
    """py_init_acl.cpp parses "|s": acl.init() or acl.init(path); None raised there."""
    assert acl.init(None) == E.INVALID_PARAM
    assert "config path" in acl.get_recent_err_msg()
    assert acl.init() == 0
    assert acl.finalize() == 0


def test_start_thread_needs_its_args_and_app_log_a_str(initialised):
    """thread.cpp parses "OO" (args may be None, not left out); app_log parses "is"."""
    with pytest.raises(TypeError):
        acl.util.start_thread(lambda: None)
    thread_id, ret = acl.util.start_thread(lambda: None, None)
    assert ret == 0 and acl.util.stop_thread(thread_id) == 0
    assert acl.app_log(1, 5) == E.INVALID_PARAM
    assert acl.app_log(1, "fine") is None


# pyacl's method tables (hicann/runtime python/pyACL/: rt/pyrt_methods.cpp, util/
# pyutil_methods.cpp, op/pyop_methods.cpp, mdl/pymdl_methods.cpp, py_init_acl.cpp), the
# names the simulator offers or might: a function the face adds must be in its table or in
# NOT_IN_PYACL.
PYACL = {
    "rt": {"set_device", "reset_device", "get_device", "get_device_count", "get_run_mode",
           "create_context", "destroy_context", "set_context", "get_context", "malloc", "free",
           "get_mem_info", "malloc_cached", "mem_flush", "mem_invalidate", "malloc_host",
           "free_host", "memcpy", "memcpy_async", "memset", "memset_async", "create_stream",
           "create_stream_with_config", "destroy_stream", "create_event",
           "create_event_with_flag", "create_event_ex_with_flag", "destroy_event",
           "synchronize_stream", "process_report", "subscribe_report", "unsubscribe_report",
           "launch_callback", "synchronize_device", "record_event", "reset_event",
           "query_event", "query_event_status", "query_event_wait_status",
           "synchronize_event", "synchronize_event_with_timeout", "event_elapsed_time",
           "event_get_timestamp", "stream_wait_event", "malloc_with_cfg",
           "malloc_for_task_scheduler", "malloc_align32", "reserve_mem_address",
           "release_mem_address", "malloc_physical", "free_physical", "map_mem", "unmap_mem",
           "mem_get_allocation_granularity", "pointer_get_attributes",
           # the allocator descriptor calls (pyrt_methods.cpp binds them all)
           "allocator_create_desc", "allocator_destroy_desc", "allocator_set_obj_to_desc",
           "allocator_set_alloc_func_to_desc", "allocator_set_free_func_to_desc",
           "allocator_set_alloc_advise_func_to_desc",
           "allocator_set_get_addr_from_block_func_to_desc"},
    "util": {"numpy_to_ptr", "numpy_contiguous_to_ptr", "ptr_to_numpy", "bytes_to_ptr",
             "ptr_to_bytes", "start_thread", "stop_thread"},
}
# the memory chapter's names pyacl binds, and peer access (pyrt_methods.cpp)
PYACL["rt"] |= PYACL_BOUND | {"device_can_access_peer", "device_enable_peer_access",
                              "device_disable_peer_access", "device_peer_access_status",
                              "device_get_bare_tgid"}


def _face_modules():
    """acl, every public module under it, and aclrt (the C names)."""
    import pkgutil
    subs = [importlib.import_module(f"{acl.__name__}.{info.name}")
            for info in pkgutil.iter_modules(acl.__path__) if not info.name.startswith("_")]
    return [acl, *subs, aclrt]


def test_a_face_shows_its_own_names_only():
    # Regression: dir(acl.util) showed Any, Callable, annotations, current_runtime, the
    # helpers the face imports; pyacl's modules show their functions (and, here, the
    # documented extras: the flat constants, the calls marked not in pyacl).
    modules = _face_modules()
    assert {m.__name__.rpartition(".")[2] for m in modules} >= {
        "acl", "rt", "util", "op", "mdl", "media", "aclrt"}
    for module in modules:
        shown = set(dir(module))
        own = {n for n in shown if n.startswith("__") and n.endswith("__")}
        assert shown - own == set(module.__all__), module.__name__
        assert not {"Any", "Callable", "annotations", "current_runtime"} & shown
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)


def test_not_in_pyacl_marks_agree_with_pyacl_and_the_reference():
    """acl.rt.NOT_IN_PYACL names the functions pyacl does not bind; each says so in its
    docstring and in the C API reference's table; every other acl.rt / acl.util function is in
    pyacl's method table."""
    assert set(acl.rt.__all__) - set(acl.rt.NOT_IN_PYACL) <= PYACL["rt"]
    assert set(acl.util.__all__) <= PYACL["util"]
    assert not set(acl.rt.NOT_IN_PYACL) & PYACL["rt"]
    for name in acl.rt.NOT_IN_PYACL:
        assert "not in pyacl" in getattr(acl.rt, name).__doc__.lower()
    with open(C_API_PAGE, encoding="utf-8") as f:
        section = f.read()
    marked = set()
    for line in section.splitlines():
        if "not in pyacl" in line and line.startswith("| `"):
            marked.update(re.findall(r"`([a-z_0-9]+)\(", line))
    assert marked == set(acl.rt.NOT_IN_PYACL)
