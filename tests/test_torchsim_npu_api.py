"""The stand-in torch_npu's device, stream, graph, profiler-marker, recovery and collective
calls beyond memory: what a script relies on of each, on the simulated device."""

import ctypes
import json
import mmap
import os
import textwrap
import warnings

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from test_torchsim_host import _run  # noqa: E402  (one estimate of a function, checked to run)

from ascend_memsim.torchsim import estimate, estimate_ranks  # noqa: E402

MiB = 1 << 20


def block(nbytes: int) -> int:
    """A storage's block on A2 (CANN 9.1.0): + 32, then 512-byte steps."""
    return -(-(nbytes + 32) // 512) * 512


def pending(snapshot: dict) -> int:
    """The blocks freed but waiting for another stream's work."""
    return sum(b["state"] == "active_pending_free" for s in snapshot["segments"]
               for b in s["blocks"])


# -- tensors and streams ---------------------------------------------------------------------

def test_a_hifloat8_tensor_holds_one_byte_an_element_and_reports_its_nominal_dtype():
    def script(out):
        import torch_npu

        x = torch.empty(1024, 1024, device="npu", requires_grad=True)   # 4 MiB of float32
        before = torch.npu.memory_allocated()
        h = torch_npu.HiFloat8Tensor.to_hifloat8(x)
        out["cast"] = torch.npu.memory_allocated() - before
        out["nominal"] = (h.dtype, h.element_size(), tuple(h.shape))
        out["data"] = (h._data.dtype, h._data.element_size())
        before = torch.npu.memory_allocated()
        wide = h.from_hifloat8(torch.bfloat16)
        out["widened"] = (wide.dtype, torch.npu.memory_allocated() - before)
        # views share the one-byte data; an in-place operator writes back into it
        before = torch.npu.memory_allocated()
        v = h.view(2048, 512)
        h.add_(1)
        out["view"] = (type(v).__name__, tuple(v.shape), type(h[:4]).__name__,
                       torch.npu.memory_allocated() - before)
        # gradients pass through the casts unchanged
        (h.float() * 2).sum().backward()
        out["grad"] = tuple(x.grad.shape)
        for data in (torch.empty(4, dtype=torch.float16, device="npu"),
                     torch.empty(4, dtype=torch.float8_e4m3fn, device="npu",
                                 requires_grad=True)):
            try:
                torch_npu.HiFloat8Tensor(data=data)
            except ValueError as e:
                out.setdefault("refused", []).append(str(e))

    out, _ = _run(script)
    # 1024 * 1024 elements, one byte each (not the four of its nominal float32)
    assert out["cast"] == block(1024 * 1024)
    assert out["nominal"] == (torch.float32, 4, (1024, 1024))
    assert out["data"] == (torch.uint8, 1)
    assert out["widened"] == (torch.bfloat16, block(1024 * 1024 * 2))
    assert out["view"] == ("HiFloat8Tensor", (2048, 512), "HiFloat8Tensor", 0)
    assert out["grad"] == (1024, 1024)
    assert "8-bit dtype" in out["refused"][0] and "non-differentiable" in out["refused"][1]


def test_erase_stream_lets_a_recorded_block_go_back_at_once():
    def script(out):
        import torch_npu

        side = torch_npu.npu.Stream()
        for erase in (False, True):
            t = torch.empty(MiB, dtype=torch.uint8, device="npu")
            t.record_stream(side)
            if erase:
                torch_npu.erase_stream(t, side)
            del t
            out[erase] = pending(torch_npu.npu.memory._snapshot())
        for bad in ((torch.empty(1), "side"), ("t", side)):
            try:
                torch_npu.erase_stream(*bad)
            except TypeError as e:
                out.setdefault("refused", []).append(str(e))

    out, _ = _run(script)
    # recorded on a stream whose work never completes here, the freed block waits for it;
    # erased first, it goes back to the pool when freed (the first one still waits)
    assert out[False] == 1 and out[True] == 1
    assert len(out["refused"]) == 2


def test_erase_stream_leaves_a_block_of_another_stream_waiting():
    def script(out):
        import torch_npu

        side, other = torch_npu.npu.Stream(), torch_npu.npu.Stream()
        with torch_npu.npu.stream(other):
            t = torch.empty(MiB, dtype=torch.uint8, device="npu")
        t.record_stream(side)
        # eraseStream skips a block not allocated on its device's current stream
        torch_npu.erase_stream(t, side)
        del t
        out["pending"] = pending(torch_npu.npu.memory._snapshot())

    out, _ = _run(script)
    assert out["pending"] == 1


def test_matmul_checksum_is_a_bool_on_the_device_and_its_reads_are_counted():
    def script(out):
        import torch_npu

        a, b = torch.empty(64, 32, device="npu"), torch.empty(32, 16, device="npu")
        c = a @ b
        before = torch.npu.memory_allocated()
        flag = torch_npu.matmul_checksum(a, b, c)
        out["flag"] = (flag.dtype, tuple(flag.shape), flag.device.type, bool(flag))
        out["kept"] = torch.npu.memory_allocated() - before
        try:
            torch_npu.matmul_checksum(a.half(), b.half(), c.half())
        except TypeError as e:
            out["dtype"] = str(e)

    out, result = _run(script)
    # with reads giving 0 no anomaly is found; only the bool scalar is left
    assert out["flag"] == (torch.bool, (), "npu", False) and out["kept"] == block(1)
    assert "bfloat16 and float32" in out["dtype"]
    # the bound's choice and the anomaly test inside, then the script's bool()
    assert result.values_read == 3


def test_an_external_stream_wraps_a_stream_npurt_made_and_npurt_answers_codes():
    def script(out):
        import torch_npu

        rt = torch_npu.npu.npurt()
        handle = ctypes.c_uint64(0)
        out["create"] = rt.npuStreamCreate(ctypes.addressof(handle))
        s = torch_npu.npu.ExternalStream(handle.value)
        with torch_npu.npu.stream(s):
            torch.empty(1024, device="npu")
        snap = torch_npu.npu.memory._snapshot()
        out["streams"] = sorted(seg["stream"] for seg in snap["segments"])
        out["handle"] = handle.value
        out["null"] = rt.npuStreamCreate(0)
        page = mmap.mmap(-1, 4096)          # page-aligned host memory (11-02 asks for it)
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(page))
        out["register"] = rt.npuHostRegister(ptr, 4096, 0x2)   # ACL_HOST_REG_MAPPED
        out["twice"] = rt.npuHostRegister(ptr, 4096, 0x2)
        out["unregister"] = (rt.npuHostUnregister(ptr), rt.npuHostUnregister(ptr))
        out["destroy"] = rt.npuStreamDestroy(handle.value)

    out, _ = _run(script)
    assert out["create"] == 0 and out["handle"] != 0
    assert out["streams"] == [out["handle"]]
    # ACL_ERROR_INVALID_PARAM (the binding's NULL check), 0, then already registered
    assert out["null"] == 100000 and out["register"] == 0 and out["twice"] == 507910
    # 0, then ACL_ERROR_HOST_MEMORY_NOT_REGISTERED (rt_error_codes.h)
    assert out["unregister"] == (0, 507911) and out["destroy"] == 0


def test_an_external_event_records_waits_and_resets():
    def script(out):
        import torch_npu

        e = torch_npu.npu.ExternalEvent()
        e.wait()                    # before record: allowed for an external event
        e.record(torch_npu.npu.current_stream())
        e.reset()
        out["event"] = (isinstance(e, torch_npu.npu.Event), e.query())

    out, _ = _run(script)
    assert out["event"] == (True, True)


# -- switches --------------------------------------------------------------------------------

def test_matmul_and_conv_switches_read_back_what_was_set_and_start_fresh():
    def script(out):
        import torch_npu.npu as npu

        out["defaults"] = (npu.matmul.allow_hf32, npu.matmul.cube_math_type,
                           npu.conv.allow_hf32, npu.are_compatible_impl_enabled())
        npu.matmul.allow_hf32 = True
        npu.conv.allow_hf32 = False
        npu.matmul.cube_math_type = npu.CubeMathType.USE_HF32
        out["set"] = (npu.matmul.allow_hf32, npu.matmul.cube_math_type, npu.conv.allow_hf32)
        npu.set_option({"ALLOW_MATMUL_HF32": "disable"})
        out["option"] = npu.matmul.allow_hf32
        for bad in (lambda: setattr(npu.matmul, "allow_hf32", 1),
                    lambda: setattr(npu.matmul, "cube_math_type", 3)):
            try:
                bad()
            except TypeError:
                out["refused"] = out.get("refused", 0) + 1
        npu.use_compatible_impl(True)
        out["compatible"] = npu.are_compatible_impl_enabled()

    out, result = _run(script)
    assert out["defaults"] == (False, None, True, False)
    assert out["set"] == (True, 3, False) and out["option"] is False
    assert out["refused"] == 2 and out["compatible"] is True
    # the estimate says the compatible kernels are not what it follows
    assert any("use_compatible_impl(True)" in note for note in result.notes)
    # a new estimate starts as a new process does
    again, _ = _run(lambda o: o.update(
        v=(__import__("torch_npu").npu.matmul.allow_hf32,
           __import__("torch_npu").npu.are_compatible_impl_enabled())))
    assert again["v"] == (False, False)


def test_current_blas_handle_and_the_host_overflow_check():
    def script(out):
        import torch_npu

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out["blas"] = torch_npu.npu.current_blas_handle()
            torch_npu.npu.clear_npu_overflow_flag()
        out["warned"] = [str(w.message) for w in seen]
        out["forced"] = torch_npu.npu.utils.is_force_overflow_check()
        out["inf"] = torch_npu.npu.utils.npu_check_overflow(float("inf"))
        out["tensor"] = torch_npu.npu.utils.npu_check_overflow(torch.empty(8, device="npu"))
        try:
            torch_npu.npu.get_npu_overflow_flag()
        except RuntimeError as e:
            out["flag"] = str(e)

    out, result = _run(script)
    assert out["blas"] is None and out["warned"][0] == "NPU does not use blas handle."
    assert "useless" in out["warned"][1]
    assert out["forced"] is False and out["inf"] is True and out["tensor"] is False
    assert "npu_check_overflow" in out["flag"]
    assert result.values_read == 1      # the tensor's sum, read on the host


def test_a_forced_overflow_check_reads_the_device_status(monkeypatch):
    monkeypatch.setenv("FORCE_OVERFLOW_CHECK", "1")

    def script(out):
        import torch_npu

        before = torch.npu.max_memory_allocated()
        out["forced"] = torch_npu.npu.utils.is_force_overflow_check()
        out["flag"] = torch_npu.npu.get_npu_overflow_flag()
        out["peak"] = torch.npu.max_memory_allocated() - before

    out, result = _run(script)
    # CANN 9.1.0 (the default): a float32 status of 8 and an int32 result of 8, 32 B each
    assert out["forced"] is True and out["flag"] is False
    assert out["peak"] == 2 * block(32) and result.values_read == 1


def test_obfuscation_operators_give_their_outputs_shapes():
    def script(out):
        import torch_npu

        fd = torch_npu.npu.obfuscation_initialize(3584, 0, 1, data_type=torch.bfloat16)
        x = torch.empty(1024, 3584, dtype=torch.bfloat16, device="npu")
        before = torch.npu.memory_allocated()
        y = torch_npu.npu.obfuscation_calculate(fd, x, torch.tensor([3584], device="npu"))
        out["y"] = (y.dtype, tuple(y.shape), torch.npu.memory_allocated() - before)
        closed = torch_npu.npu.obfuscation_finalize(fd)
        out["fd"] = (fd.dtype, tuple(fd.shape), closed.dtype, tuple(closed.shape))
        try:
            torch_npu.npu.utils.obfuscation_initialize(3584, 0, 1)
        except RuntimeError as e:
            out["no_dtype"] = str(e)

    out, _ = _run(script)
    # y like x: 1024 * 3584 bfloat16 (the param, a temporary, is gone by then)
    assert out["y"] == (torch.bfloat16, (1024, 3584), block(1024 * 3584 * 2))
    assert out["fd"] == (torch.int32, (1,), torch.int32, (1,))
    assert out["no_dtype"] == "data_type cannot be empty"


def test_mstx_markers_are_no_ops_that_answer_as_with_no_profiler():
    def script(out):
        import torch_npu

        mstx = torch_npu.npu.mstx
        out["ids"] = (mstx.range_start("step"), mstx.range_push("fwd"), mstx.range_pop(),
                      mstx.mark("here"))
        mstx.range_end(0)

        @mstx.mstx_range("decorated")
        def twice(v):
            return 2 * v

        with mstx.annotate("block"):
            out["ran"] = twice(21)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            out["bad"] = (mstx.range_start(""), mstx.range_push("x", stream="s"))
        out["warned"] = len(seen)

    out, _ = _run(script)
    assert out["ids"] == (0, -1, -1, None) and out["ran"] == 42
    assert out["bad"] == (0, -1) and out["warned"] == 2


# -- graphs and recovery ---------------------------------------------------------------------

def test_graph_task_calls_fail_as_outside_a_capture_and_handlers_register():
    def script(out):
        import torch_npu

        s = torch_npu.npu.current_stream()
        for call in (torch_npu.npu.graph_task_group_begin, torch_npu.npu.graph_task_group_end,
                     torch_npu.npu.graph_task_update_end,
                     lambda st: torch_npu.npu.graph_task_update_begin(st, None)):
            try:
                call(s)
            except (RuntimeError, TypeError) as e:
                out.setdefault("errors", []).append((type(e).__name__, str(e)))

        @torch_npu.npu.register_npu_graph_handler(["my_op", "my_op.default"])
        class Handler(torch_npu.npu.NpuGraphOpHandler):
            UPDATE_SPECS = {"my_op.default": [("arg", 1, "batch")]}  # noqa: RUF012

        out["handler"] = (Handler.__name__, Handler.get_update_specs("my_op.default"),
                          Handler.prepare_capture("f", (1,), {}))
        for name in (None, ""):
            try:
                torch_npu.npu.super_kernel_scope_begin(name)
            except RuntimeError as e:
                out.setdefault("scope", []).append(str(e))

    out, _ = _run(script)
    kinds = [k for k, _ in out["errors"]]
    assert kinds == ["RuntimeError", "RuntimeError", "RuntimeError", "TypeError"]
    # ACL_ERROR_RT_STREAM_NOT_CAPTURED twice, ACL_ERROR_STREAM_TASK_GROUP_STATUS
    assert "107029" in out["errors"][0][1] and "107029" in out["errors"][1][1]
    assert "107033" in out["errors"][2][1]
    assert out["handler"] == ("Handler", [("arg", 1, "batch")], ("f", (1,), {}))
    # Atlas A2 has no super kernels; an empty name is refused before that
    assert "not supported on A2" in out["scope"][0]
    assert out["scope"][1] == "scope_name should be None or a non-empty string."


def test_super_kernel_scopes_run_on_atlas_a3():
    def script(out):
        import torch_npu

        torch_npu.npu.super_kernel_scope_begin("layer")
        torch_npu.npu.super_kernel_scope_end("layer")
        out["ok"] = True

    result = estimate(lambda: script({}), product="A3")
    assert result.status == 0


@pytest.mark.parametrize("call", ["stop_device(0)", "restart_device(0, True)"])
def test_device_fault_recovery_stops_the_estimate_at_the_line(tmp_path, call):
    path = tmp_path / "recover.py"
    path.write_text(textwrap.dedent(f"""
        import torch, torch_npu
        x = torch.empty(16, device="npu")
        torch_npu.npu.{call}
        y = torch.empty(16, device="npu")
    """))
    result = estimate(str(path), product="A2")
    assert not result.fits and result.stopped is not None
    name = call.split("(")[0]
    assert f"torch_npu.npu.{name} at {path}:4" in result.stopped
    assert "verdict: unknown" in str(result)


# -- the flop counter ------------------------------------------------------------------------

def test_the_flops_counter_counts_matmuls_forward_and_backward_attention_and_convolution():
    def script(out):
        import torch_npu
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        counter = torch_npu.utils.FlopsCounter()
        a = torch.empty(64, 128, device="npu", requires_grad=True)
        b = torch.empty(128, 32, device="npu", requires_grad=True)
        counter.start()
        c = a @ b
        out["forward"] = counter.get_flops()
        c.sum().backward()
        out["backward"] = counter.get_flops()
        counter.pause()
        a @ b
        counter.resume()
        out["paused"] = counter.get_flops()
        # CPU tensors are not the device's
        torch.ones(4, 4) @ torch.ones(4, 4)
        out["cpu"] = counter.get_flops()
        counter.stop()
        out["stopped"] = counter.get_flops()
        counter.start()
        q = torch.empty(2, 8, 128, 64, dtype=torch.float16, device="npu")
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
        out["attention"] = counter.get_flops()
        counter.stop()
        counter.start()
        conv = torch.nn.Conv2d(3, 8, 3, bias=False).npu()
        conv(torch.empty(2, 3, 10, 10, device="npu"))
        out["conv"] = counter.get_flops()
        try:
            with torch_npu.utils.FlopsCounter():
                pass
        except AttributeError as e:
            out["with"] = str(e)
        # left running: the estimate's end takes it off the stack
        out["stack"] = [type(m).__name__ for m in _get_current_dispatch_mode_stack()]

    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    out, _ = _run(script)
    mm = 2 * 128 * 64 * 32                  # 2 * K * M * N
    assert out["forward"] == [mm, mm]
    # the two gradients: (64, 32) @ (32, 128) and (128, 64) @ (64, 32), each 2 * 64*32*128
    assert out["backward"] == [3 * mm, 3 * mm]
    # paused: traversed only
    assert out["paused"] == [3 * mm, 4 * mm] and out["cpu"] == out["paused"]
    assert out["stopped"] == [0, 0]
    # npu_fusion_attention (BNSD): B*N*Sq*D*Skv + B*N*Sq*Skv*Dv, no factor 2 (the source)
    fa = 2 * 8 * 128 * 64 * 128 * 2
    assert out["attention"] == [fa, fa]
    # 8 x 8 outputs, a 3 x 3 filter, batch 2, Cout 8, Cin 3, times 2
    conv = 8 * 8 * 9 * 2 * 8 * 3 * 2
    assert out["conv"] == [conv, conv]
    assert "count_enable" in out["with"]
    assert out["stack"] == ["FakeMode", "_FlopMode", "_Tracker"]
    assert _get_current_dispatch_mode_stack() == []
    # the next estimate counts nothing it was not asked to
    again, _ = _run(lambda o: o.update(f=__import__("torch_npu").utils.FlopsCounter()
                                        .get_flops()))
    assert again["f"] == [0, 0]


# -- collectives -----------------------------------------------------------------------------

UNEVEN = """
    import os, torch, torch.distributed as dist
    import torch_npu
    rank = int(os.environ["RANK"])
    torch.npu.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("hccl")
    x = torch.empty(3 if rank == 0 else 5, 1024, device="npu")    # 12 KiB or 20 KiB
    out = torch.empty(8, 1024, device="npu")                       # 32 KiB
    torch_npu.distributed.all_gather_into_tensor_uneven(out, x, output_split_sizes=[3, 5])
    work = torch_npu.distributed.reduce_scatter_tensor_uneven(
        x, out, input_split_sizes=[3, 5], op=dist.ReduceOp.AVG, async_op=True)
    work.wait()
    m = [[2, 3], [4, 1]]
    send = torch.empty(sum(m[rank]), device="npu")
    recv = torch.empty(sum(row[rank] for row in m), device="npu")
    torch_npu.distributed.all_to_all_vc(recv, send, m)
    errors = []
    for call in (
            lambda: torch_npu.distributed.all_gather_into_tensor_uneven(out, x, [3, 4]),
            lambda: torch_npu.distributed.all_gather_into_tensor_uneven(out, x, [8]),
            lambda: torch_npu.distributed.all_to_all_vc(recv, send, [[1, 1]]),
            lambda: torch_npu.distributed.all_to_all_vc(send, send, m)):
        try:
            call()
        except (RuntimeError, ValueError) as e:
            errors.append(type(e).__name__)
    assert errors == ["RuntimeError", "RuntimeError", "ValueError", "RuntimeError"], errors
"""


def test_uneven_collectives_write_into_the_callers_tensors_under_two_ranks(tmp_path,
                                                                         monkeypatch):
    monkeypatch.delenv("HCCL_BUFFSIZE", raising=False)
    path = tmp_path / "uneven.py"
    path.write_text(textwrap.dedent(UNEVEN))
    result = estimate_ranks(str(path), world_size=2, runtime_share=0)
    assert result.fits, result.first_failure()
    for rank, rows, (sends, receives) in ((0, 3, (5, 6)), (1, 5, (5, 4))):
        f = result.rank(rank)
        # the group's one communicator, 2 x 200 MB, made by the first uneven collective
        assert [(c.kind, c.size) for c in f.communicators] == [("group", 2 * 200 * MiB)]
        # only the script's own tensors: x, out, send, recv (float32); the collectives
        # make none
        assert f.estimate.peak_allocated == (block(rows * 1024 * 4) + block(8 * 1024 * 4)
                                             + block(sends * 4) + block(receives * 4))


def test_uneven_collectives_need_a_process_group():
    def script(out):
        import torch_npu

        t = torch.empty(4, device="npu")
        try:
            torch_npu.distributed.all_gather_into_tensor_uneven(t, t)
        except ValueError as e:
            out["error"] = str(e)

    out, _ = _run(script)
    assert "init_process_group" in out["error"]


# -- testing ---------------------------------------------------------------------------------

def test_perf_baseline_reads_the_baseline_file_and_writes_nothing(tmp_path):
    from ascend_memsim.torchsim.torch_npu.testing.testcase import Baseline

    path = tmp_path / "performance_baseline.json"
    path.write_text(json.dumps({"TestAdd.test_add": 0.5}))
    baseline = Baseline(str(path))
    assert baseline.get_baseline("TestAdd.test_add") == 0.5
    assert baseline.get_baseline("TestAdd.test_sub") is None
    baseline.set_baseline("TestAdd.test_sub", 0.25)
    baseline.save_baseline()
    assert baseline.get_baseline("TestAdd.test_sub") == 0.25
    assert json.loads(path.read_text()) == {"TestAdd.test_add": 0.5}
    assert Baseline(str(tmp_path / "absent.json")).get_baseline("x") is None
    for text in ("not json", "[1, 2]", '{"a": "slow"}'):
        path.write_text(text)
        with pytest.raises(ValueError, match="performance baseline"):
            Baseline(str(path))

    def script(out):
        from torch_npu.testing.testcase import PerfBaseline

        PerfBaseline.set_baseline("T.t", 1.0)
        PerfBaseline.save_baseline()
        out["got"] = PerfBaseline.get_baseline("T.t")

    default = os.path.join(os.getcwd(), "performance_baseline.json")
    existed = os.path.exists(default)
    out, _ = _run(script)
    assert out["got"] == 1.0
    # nothing written where torch_npu would write (the working directory's file)
    assert os.path.exists(default) == existed
