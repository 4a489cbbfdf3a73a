"""Every way a script can make NPU memory, in one table: each is counted while it lives and
freed when it dies, or stops the run at its line; never a silent 0 (torchsim/storages.py,
host.py, checkpoint.py, process.py). Figures by hand: a block is the request + 32 bytes,
rounded up to 512."""

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from ascend_memsim.torchsim import estimate  # noqa: E402

MiB = 1 << 20


def block(n):
    return (n + 32 + 511) // 512 * 512


ONE = block(MiB)          # 1 MiB of bytes

#: (how, code making `made` from nothing but torch and a 1 MiB uint8 NPU tensor `base`,
#: bytes `made` adds on the device)
WAYS = [
    ("factory", "made = torch.empty(MiB, dtype=torch.uint8, device='npu')", ONE),
    ("factory, full", "made = torch.full((MiB // 4,), 1.0, device='npu')", ONE),
    ("factory, random", "made = torch.randn(MiB // 4, device='npu')", ONE),
    ("from data", "made = torch.tensor([0.0] * (MiB // 4), device='npu')", ONE),
    ("copy from the CPU", "made = torch.zeros(MiB, dtype=torch.uint8).npu()", ONE),
    ("to()", "made = torch.zeros(MiB, dtype=torch.uint8).to('npu')", ONE),
    ("clone", "made = base.clone()", ONE),
    ("empty_like", "made = torch.empty_like(base)", ONE),
    ("new_empty", "made = base.new_empty(MiB)", ONE),
    ("a view shares", "made = base[: MiB // 2]", 0),
    ("set_ shares", "made = torch.empty(0, dtype=torch.uint8, device='npu')\n"
                    "made.set_(base.untyped_storage())", 0),
    ("DLPack shares", "from torch.utils.dlpack import from_dlpack, to_dlpack\n"
                      "made = from_dlpack(to_dlpack(base))", 0),
    ("a side stream", "with torch.npu.stream(torch.npu.Stream()):\n"
                      "    made = torch.empty(MiB, dtype=torch.uint8, device='npu')", ONE),
    ("UntypedStorage", "made = torch.UntypedStorage(MiB, device='npu')", ONE),
    ("resize_ grows", "made = torch.UntypedStorage(MiB // 2, device='npu')\n"
                      "made.resize_(MiB)", ONE),
    ("resize_ to 0", "made = torch.UntypedStorage(MiB, device='npu')\nmade.resize_(0)", 0),
    ("pinned host memory", "made = torch.zeros(MiB, dtype=torch.uint8).pin_memory()", 0),
    ("a thread", "import threading\nout = []\n"
                 "t = threading.Thread(target=lambda: out.append(torch.empty(\n"
                 "    MiB, dtype=torch.uint8, device='npu')))\nt.start(); t.join()\n"
                 "made = out.pop()", ONE),
]


@pytest.mark.parametrize("how, code, adds", WAYS, ids=[w[0] for w in WAYS])
def test_each_way_of_making_npu_memory_is_counted_while_alive_and_freed(tmp_path, capfd,
                                                                       how, code, adds):
    # read from the script's own torch.npu.memory_allocated(), then at the run's end
    path = tmp_path / "make.py"
    path.write_text(
        "import torch, torch_npu\nMiB = 1 << 20\n"
        "base = torch.zeros(MiB, dtype=torch.uint8, device='npu')\n"
        "before = torch.npu.memory_allocated()\n"
        f"{code}\n"
        "alive = torch.npu.memory_allocated() - before\n"
        "del made\nimport gc; gc.collect()\n"
        "print('figures', alive, torch.npu.memory_allocated() - before)\n")
    result = estimate(str(path), product="A2")
    assert result.status == 0, result
    lines = [x for x in capfd.readouterr().out.splitlines() if x.startswith("figures")]
    assert lines == [f"figures {adds} 0"]
    assert result.allocated_at_end == 0


def test_a_cuda_tensor_stops_the_run_at_its_line_never_a_silent_fit(tmp_path):
    path = tmp_path / "cuda.py"
    path.write_text("import torch\nx = torch.empty(4 << 30, dtype=torch.uint8, "
                    "device='cuda')\n")
    result = estimate(str(path), product="A2")
    assert result.status == 1 and not result.fits
    assert result.stopped.startswith(f"a tensor on a CUDA device at {path}:2 in <module>")
    assert "transfer_to_npu" in result.stopped


def test_each_storage_has_its_own_simulated_address():
    # code that tells storages apart by address (save_pretrained's shared-weight check)
    def script():
        a = torch.empty(1024, device="npu")
        b = torch.empty(1024, device="npu")
        assert a.data_ptr() != b.data_ptr() and a.data_ptr() != 0
        assert a[4:].data_ptr() == a.data_ptr() + 16
        assert a.untyped_storage().data_ptr() == a.data_ptr()
        view = a.view(32, 32)
        assert view.data_ptr() == a.data_ptr()
        cpu = torch.empty(1 << 22)                           # a fake CPU tensor (16 MiB)
        assert cpu.data_ptr() != 0

    result = estimate(script, product="A2")
    assert result.status == 0 and result.fits
