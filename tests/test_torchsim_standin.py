"""The stand-in torch_npu as libraries and scripts see it: a package found by the probes
libraries make before importing it, the tree of the real package, its surface measured
against the real wheel's public names, ``transfer_to_npu`` and the fused optimizers."""

import importlib
import json
import os
import sys

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from test_torchsim_host import _run  # noqa: E402  (one estimate of a function, checked to run)

from ascend_memsim.torchsim.torch_npu._missing import NotModelled  # noqa: E402

SURFACE = os.path.join(os.path.dirname(__file__), "data", "torch_npu_surface.json")
MiB = 1 << 20


def test_libraries_probes_find_the_stand_in_as_a_package_of_its_version():
    # transformers' _is_package_available: find_spec, then importlib.metadata.version; its
    # is_torch_npu_available then imports it and asks torch.npu.is_available()
    import importlib.metadata
    import importlib.util

    def probe(out):
        out["spec"] = importlib.util.find_spec("torch_npu")
        out["sub"] = importlib.util.find_spec("torch_npu.contrib.transfer_to_npu")
        out["versions"] = {importlib.metadata.version(n) for n in ("torch_npu", "torch-npu")}
        import torch_npu
        out["available"] = torch.npu.is_available()
        out["version"] = torch_npu.__version__
        out["spec_of_module"] = torch_npu.__spec__

    out, _ = _run(probe)
    assert out["spec"] is not None and out["sub"] is not None and out["available"]
    assert out["versions"] == {out["version"]} == {torch.__version__.split("+")[0]}
    assert out["spec_of_module"] is not None
    # after the estimate nothing of the stand-in is left to find
    assert importlib.util.find_spec("torch_npu") is None
    assert not any(n == "torch_npu" or n.startswith("torch_npu.") for n in sys.modules)
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("torch_npu")


def test_the_surface_against_the_real_wheels_public_names():
    # tests/data/torch_npu_surface.json lists the public names of torch_npu 2.14.0's Python
    # modules, read from the wheel (tests/data/torch_npu_surface.py). Each name the stand-in
    # has is there; each it lacks raises NotModelled naming it (hasattr answers False)
    with open(SURFACE, encoding="utf-8") as f:
        surface = json.load(f)

    def measure(out):
        for module, names in surface["modules"].items():
            m = importlib.import_module(module)
            for name in names:
                try:
                    getattr(m, name)
                except NotModelled as e:
                    assert f"{module}.{name} is not modelled" in str(e)
                    out.setdefault("missing", []).append(f"{module}.{name}")
                else:
                    out.setdefault("present", []).append(f"{module}.{name}")

    out, _ = _run(measure)
    missing = out.get("missing", [])
    share = len(out["present"]) / (len(out["present"]) + len(missing))
    print(f"torch_npu surface: {len(out['present'])} of "
          f"{len(out['present']) + len(missing)} public names ({share:.0%})")
    # every name a training script reaches first is there
    for name in ("torch_npu.npu.set_device", "torch_npu.npu.get_rng_state",
                 "torch_npu.npu.amp.GradScaler", "torch_npu.optim.NpuFusedAdamW",
                 "torch_npu.npu.utils.get_cann_version", "torch_npu.profiler.profile",
                 "torch_npu.utils.get_cann_version", "torch_npu.distributed.is_hccl_available",
                 "torch_npu.testing.testcase.TestCase",
                 "torch_npu.dynamo.torchair.get_npu_backend"):
        assert name in out["present"], name
    # the share measured when this was written
    assert share >= 0.95


def test_a_cuda_script_with_transfer_to_npu_counts_its_cuda_tensors_and_torch_is_put_back():
    def cuda_script(out):
        import torch_npu.contrib.transfer_to_npu  # noqa: F401
        x = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")       # 64 MiB
        y = torch.zeros(16 * MiB, dtype=torch.uint8).cuda()               # 16 MiB
        z = torch.ones(8 * MiB, dtype=torch.uint8, device=torch.device("cuda", 0))
        model = torch.nn.Linear(1024, 1024).cuda()                        # 4 MiB + 4 KiB
        out["devices"] = {t.device.type for t in (x, y, z, model.weight)}
        out["is_cuda"] = x.is_cuda
        out["cuda_available"] = torch.cuda.is_available()
        out["allocated"] = torch.cuda.memory_allocated()

    before = (torch.empty, torch.zeros, torch.Tensor.to, torch.Tensor.cuda, torch.nn.Module.cuda,
              torch.cuda.is_available, torch.cuda.memory_allocated,
              torch.distributed.init_process_group)
    out, _ = _run(cuda_script)
    assert out["devices"] == {"npu"} and out["is_cuda"] and out["cuda_available"]
    # each block rounded up to 512 B after torch_npu's 32 B of padding (by hand)
    def block(n):
        return (n + 32 + 511) // 512 * 512
    assert out["allocated"] == (block(64 * MiB) + block(16 * MiB) + block(8 * MiB)
                                + block(1024 * 1024 * 4) + block(1024 * 4))
    # torch is as it was: a CUDA call is CUDA again
    assert (torch.empty, torch.zeros, torch.Tensor.to, torch.Tensor.cuda, torch.nn.Module.cuda,
            torch.cuda.is_available, torch.cuda.memory_allocated,
            torch.distributed.init_process_group) == before


def test_the_fused_optimizers_keep_the_states_of_their_torch_counterparts():
    def step(out, opt_class):
        import torch_npu
        model = torch.nn.Linear(1024, 1024).npu()
        opt = getattr(torch_npu.optim, opt_class)(model.parameters(), lr=1e-3)
        model(torch.randn(4, 1024).npu()).sum().backward()
        opt.step()
        out["state"] = sorted(k for s in opt.state.values() for k in s if k != "step")
        out["allocated"] = torch.npu.memory_allocated()

    def block(n):
        return (n + 32 + 511) // 512 * 512
    params = block(1024 * 1024 * 4) + block(1024 * 4)
    for name, states in (("NpuFusedAdamW", 2), ("NpuFusedSGD", 0), ("NpuFusedLamb", 2)):
        out, _ = _run(lambda o, name=name: step(o, name))
        # parameters, gradients and the states, each as large as the parameters (by hand;
        # Adam's step counters stay on the CPU, as torch.optim.adam's _init_group keeps them
        # unless capturable or fused)
        assert out["allocated"] == params * (2 + states), (name, out)


def test_a_name_the_stand_in_lacks_says_so_and_hasattr_answers_false():
    def probe(out):
        import torch_npu
        out["hasattr"] = hasattr(torch_npu.contrib, "BiLSTM"), hasattr(torch_npu, "npu_ffn")
        try:
            out["value"] = torch_npu.contrib.Mish
        except AttributeError as e:
            out["message"] = str(e)

    out, _ = _run(probe)
    assert out["hasattr"] == (False, False)
    assert out["message"].startswith("torch_npu.contrib.Mish is not modelled")


def test_legacy_typed_tensors_and_storages_are_made_on_the_npu():
    def script(out):
        import torch_npu
        a = torch_npu.npu.FloatTensor(256, 1024)                  # 1 MiB, uninitialised
        b = torch.npu.HalfTensor([1.0, 2.0])                      # from data
        s = torch.npu.ByteStorage(1 << 20)                        # 1 MiB of storage
        out["kinds"] = (a.dtype, a.device.type, b.dtype, isinstance(a, torch.npu.FloatTensor),
                        isinstance(b, torch.npu.FloatTensor), s.nbytes())
        out["allocated"] = torch.npu.memory_allocated()

    def block(n):
        return (n + 32 + 511) // 512 * 512

    out, _ = _run(script)
    assert out["kinds"] == (torch.float32, "npu", torch.float16, True, False, 1 << 20)
    assert out["allocated"] == 2 * block(1 << 20) + block(4)


def test_task_queue_enable_set_from_the_script_decides_where_workspaces_come_from():
    def script(out):
        import torch_npu
        torch_npu.npu.set_task_queue_enable(2)
        out["mode"] = torch_npu.npu.utils.get_task_queue_enable()
        x = torch.randn(1024, 1024, device="npu")
        (x @ x).sum()

    out, result = _run(script)
    assert out["mode"] == 2 and result.task_queue == 2
    assert result.sources["task_queue"] == "torch_npu.npu.set_task_queue_enable"


def test_transfer_to_npu_rewrites_devices_not_file_names(tmp_path):
    path = tmp_path / "cuda_ckpt"
    path.mkdir()
    weights = str(path / "w.pt")
    torch.save({"w": torch.ones(4)}, weights)

    def script(out):
        import torch_npu.contrib.transfer_to_npu  # noqa: F401
        out["w"] = float(torch.load(weights)["w"].sum())
        out["device"] = torch.empty(4, device="cuda:0").device.type

    out, _ = _run(script)
    assert out == {"w": 4.0, "device": "npu"}


def test_switches_the_script_sets_do_not_outlive_the_estimate():
    before = torch.are_deterministic_algorithms_enabled()

    def script(out):
        import torch_npu
        torch_npu.npu.set_deterministic_level(1)
        torch_npu.npu.manual_seed(7)
        torch_npu.npu.set_mm_bmm_format_nd(False)

    _run(script)
    assert torch.are_deterministic_algorithms_enabled() == before

    def again(out):
        import torch_npu
        out["seed"] = torch_npu.npu.initial_seed()
        out["nd"] = torch_npu.npu.get_mm_bmm_format_nd()

    out, _ = _run(again)
    assert out == {"seed": 0, "nd": True}


def test_a_raw_allocation_first_still_takes_the_scripts_settings(monkeypatch):
    monkeypatch.delenv("PYTORCH_NPU_ALLOC_CONF", raising=False)

    def script(out):
        import os

        import torch_npu
        os.environ["PYTORCH_NPU_ALLOC_CONF"] = "expandable_segments:True"
        ptr = torch_npu.npu.caching_allocator_alloc(1 << 20)
        out["ptr"] = ptr != 0
        torch_npu.npu.caching_allocator_delete(ptr)
        try:
            torch_npu.npu.caching_allocator_alloc(1 << 45)
        except torch.OutOfMemoryError:
            out["oom"] = "torch's"

    out, result = _run(script)
    assert out == {"ptr": True, "oom": "torch's"}
    assert result.alloc_conf == "expandable_segments:True"
