"""The host side of an estimate (torchsim/host.py, checkpoint.py): CPU tensors small enough
are real, DataLoader workers and pinned memory run as on the machine, modules move, and
checkpoints hold shapes, not weights. Figures by hand: a block is torch_npu's request + 32
bytes rounded up to 512."""

import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from ascend_memsim.torchsim import estimate  # noqa: E402
from ascend_memsim.torchsim.checkpoint import NotWeights  # noqa: E402
from ascend_memsim.torchsim.host import HOST_REAL_MAX  # noqa: E402

MiB = 1 << 20


def block(n):
    return (n + 32 + 511) // 512 * 512


def _hook_answers_torch_npu():
    """Whether this environment's startup hook (site-packages/ascend_memsim.pth, written at
    install) answers torch_npu in a spawned process."""
    import pathlib
    import site

    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any("install_torch_npu" in (pathlib.Path(d) / "ascend_memsim.pth").read_text()
               for d in dirs if (pathlib.Path(d) / "ascend_memsim.pth").exists())


spawned = pytest.mark.skipif(
    not _hook_answers_torch_npu(),
    reason="a spawned process imports the stand-in through the startup hook that pip "
           "install -e . writes; it is not installed here (or is an older one)")


def linear(n_in, n_out):
    """The blocks of a float32 Linear's weight and bias."""
    return block(4 * n_in * n_out) + block(4 * n_out)


def _run(fn, **kwargs):
    out = {}
    result = estimate(lambda: fn(out), product="A2", **kwargs)
    assert result.status == 0, result
    return out, result


def test_small_cpu_tensors_are_real_and_weights_stay_fake():
    from torch._subclasses.fake_tensor import FakeTensor

    def script(out):
        small = torch.arange(10).float()
        out["small"] = (type(small) is torch.Tensor, small.sum().item(), small.tolist()[-1])
        big = torch.empty(HOST_REAL_MAX // 4 + 1)           # one element over the line
        out["big"] = isinstance(big, FakeTensor)
        layer = torch.nn.Linear(4096, 4096)                  # a 64 MiB weight, made on the CPU
        out["weight"], out["bias"] = (isinstance(layer.weight, FakeTensor),
                                      isinstance(layer.bias, FakeTensor))
        out["mixed"] = isinstance(small[:4] + torch.empty(4, device="npu").cpu(), FakeTensor)

    out, result = _run(script)
    # real values where the data is small (no value read is counted for them)
    assert out["small"] == (True, 45.0, 9.0) and result.values_read == 0
    assert out["big"] and out["weight"] and not out["bias"] and out["mixed"]


def test_a_real_cpu_batch_moved_to_the_npu_is_allocated_there():
    def script(out):
        x = torch.randn(8, 1024)                             # 32 KiB: real
        out["before"] = torch.npu.memory_allocated()
        y = x.npu()
        out["after"] = torch.npu.memory_allocated()
        out["values"] = y.sum().item()                       # fake on the NPU: 0 by default

    out, _ = _run(script)
    assert (out["before"], out["after"]) == (0, block(8 * 1024 * 4))
    assert out["values"] == 0.0


LOADER = """
import torch, torch_npu
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return torch.full((3, 8, 8), float(i)), i * i

if __name__ == "__main__":
    loader = DataLoader(Squares(), batch_size=16, num_workers={workers}, pin_memory=True)
    seen = []
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        seen.append(int(y.sum()))                           # real labels: real values
        x = x.npu(non_blocking=True)
    print("labels", seen, "allocated", torch.npu.memory_allocated())
"""


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataloader_with_workers_and_pinned_memory_runs_as_on_the_machine(tmp_path, capfd,
                                                                            workers):
    path = tmp_path / "loader.py"
    path.write_text(LOADER.replace("{workers}", str(workers)))
    result = estimate(str(path), product="A2")
    printed = capfd.readouterr().out
    assert result.status == 0 and result.fits, result
    # the real labels of each batch (sums of i*i over 16 indices), as on the machine
    sums = [sum(i * i for i in range(b * 16, b * 16 + 16)) for b in range(4)]
    assert f"labels {sums}" in printed
    # no read of a value was needed: the data was real
    assert result.values_read == 0
    # each pinned batch: 16 x 3 x 8 x 8 float32 (12,288 B: a 16,384-byte block of the host
    # allocator, a power of two) and 16 int64 labels (128 B); the loader holds up to 2 per
    # worker (prefetch_factor) besides the one in use, and freed blocks are used again
    batch = 16384 + 128
    assert batch <= result.host_pinned_peak <= (2 * max(workers, 1) + 1) * batch
    assert "pinned host memory" in str(result)


def test_a_dataset_too_large_to_be_real_still_leaves_the_workers_as_zeros(tmp_path, capfd):
    # a TensorDataset of 2 MiB of fake samples: a fake tensor cannot cross to the worker's
    # parent, so the worker sends real zeros of the same shapes
    path = tmp_path / "big.py"
    path.write_text(textwrap.dedent("""
        import torch, torch_npu
        from torch.utils.data import DataLoader, TensorDataset

        if __name__ == "__main__":
            data = TensorDataset(torch.randn(512, 1024), torch.arange(512))
            for x, y in DataLoader(data, batch_size=128, num_workers=2):
                print(tuple(x.shape), float(x.abs().sum()), int(y[-1]))
    """))
    result = estimate(str(path), product="A2")
    printed = capfd.readouterr().out
    assert result.status == 0
    assert printed.count("(128, 1024) 0.0") == 4
    # the labels were real (4 KiB): the last of each batch
    assert [int(line.split()[-1]) for line in printed.splitlines()] == [127, 255, 383, 511]


def test_modules_move_and_change_dtype_after_a_forward():
    def script(out):
        model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 1024)).npu()
        model(torch.randn(4, 1024).npu()).sum().backward()
        out["trained"] = torch.npu.memory_allocated()
        model.cpu()
        out["cpu"] = torch.npu.memory_allocated()
        model.half().npu()
        out["half"] = torch.npu.memory_allocated()
        model.to("cpu", dtype=torch.float32)
        out["back"] = torch.npu.memory_allocated()

    out, _ = _run(script)
    fp32 = 2 * linear(1024, 1024)
    fp16 = 2 * (block(2 * 1024 * 1024) + block(2 * 1024))
    # parameters and their gradients move together
    assert out == {"trained": 2 * fp32, "cpu": 0, "half": 2 * fp16, "back": 0}


def test_a_checkpoint_saves_shapes_and_loads_them_on_the_npu(tmp_path):
    path = str(tmp_path / "ck.pt")

    def script(out):
        model = torch.nn.Linear(1024, 1024).npu()
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(4, 1024).npu()).sum().backward()
        opt.step()
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": 7}, path)
        del model, opt
        out["freed"] = torch.npu.memory_allocated()
        ck = torch.load(path, map_location="npu")
        out["loaded"] = torch.npu.memory_allocated()
        out["step"], out["device"] = ck["step"], ck["model"]["weight"].device.type
        out["cpu"] = torch.load(path, map_location="cpu")["model"]["weight"].device.type
        out["still"] = torch.npu.memory_allocated()

    out, _ = _run(script)
    # the weight and bias, Adam's two states of each, and its two step counters: saved from
    # the CPU, map_location="npu" puts them on the NPU too, as torch.load does
    loaded = 3 * linear(1024, 1024) + 2 * block(4)
    assert out == {"freed": 0, "loaded": loaded, "step": 7, "device": "npu",
                   "cpu": "cpu", "still": loaded}
    # the file holds no weights: outside an estimate it cannot be taken for a checkpoint
    assert os.path.getsize(path) < 4096
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(path)
    with pytest.raises(NotWeights, match="written by an ascend-memsim estimate"):
        torch.load(path, weights_only=False)


def test_a_real_checkpoint_loaded_onto_the_npu_is_counted_and_its_cpu_values_kept(tmp_path):
    path = str(tmp_path / "real.pt")
    torch.save({"w": torch.full((1024, 1024), 2.0), "b": torch.ones(1024)}, path)

    def script(out):
        sd = torch.load(path, map_location="npu")
        out["npu"] = torch.npu.memory_allocated(), sd["w"].device.type
        cpu = torch.load(path)
        out["cpu"] = torch.npu.memory_allocated(), float(cpu["w"][0, 0]), float(cpu["b"].sum())

    out, _ = _run(script)
    assert out["npu"] == (linear(1024, 1024), "npu")
    assert out["cpu"] == (linear(1024, 1024), 2.0, 1024.0)


def test_torch_load_and_save_are_torchs_again_after_the_estimate(tmp_path):
    save, load = torch.save, torch.load
    _run(lambda out: None)
    assert (torch.save, torch.load) == (save, load)
    assert "__reduce_ex__" not in torch._subclasses.fake_tensor.FakeTensor.__dict__
    assert sys.modules.get("torch_npu") is None


@pytest.mark.parametrize("ending, status", [
    ("sys.exit(True)", 1),          # unittest.main's exit when a test failed
    ("sys.exit(False)", 0),
    ("sys.exit(3)", 3),
    ("sys.exit('failed: bad config')", 1),
    ("sys.exit()", 0),
    ("os._exit(4)", 4),
    ("atexit.register(os._exit, 5)", 5),
    ("atexit.register(lambda: torch.empty(1 << 20, device='npu'))", 0),
    # as the interpreter: a sys.exit in a handler is printed and ignored
    ("atexit.register(sys.exit, 5)", 0),
    ("atexit.register(sys.exit, 5)\nsys.exit(2)", 2),
    ("atexit.register(print, 'never')\natexit.unregister(print)\nsys.exit(6)", 6),
])
def test_every_way_a_script_ends_is_its_status_never_a_silent_fit(tmp_path, ending, status):
    path = tmp_path / "ends.py"
    path.write_text(f"import atexit, os, sys\nimport torch, torch_npu\n"
                    f"x = torch.empty(1024, device='npu')\n{ending}\n")
    result = estimate(str(path), product="A2")
    assert result.status == status
    assert result.fits == (status == 0)
    if "atexit.register(lambda" in ending:
        # the handler ran in the estimate: its 4 MiB (1 Mi float32) were allocated
        assert result.peak_allocated == block(4 * 1024) + block(4 << 20)


def test_a_forked_child_that_returns_out_of_the_script_prints_no_second_summary(tmp_path,
                                                                               capfd):
    path = tmp_path / "forks.py"
    path.write_text("import os, torch, torch_npu\npid = os.fork()\n"
                    "if pid:\n    os.waitpid(pid, 0)\n")
    code = (f"from ascend_memsim.torchsim import estimate\n"
            f"print(estimate({str(path)!r}, product='A2').fits)\n")
    import subprocess
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=os.path.dirname(
                              os.path.dirname(os.path.abspath(__file__)))))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


def test_the_scripts_threads_allocate_on_the_device_and_their_oom_is_raised_there():
    # transformers loads checkpoint shards in a thread pool: each shard is counted
    from concurrent.futures import ThreadPoolExecutor

    def script(out):
        with ThreadPoolExecutor(4) as pool:
            shards = list(pool.map(
                lambda i: torch.empty(1 << 20, dtype=torch.uint8, device="npu"), range(8)))
        out["shards"] = torch.npu.memory_allocated()
        del shards
        out["freed"] = torch.npu.memory_allocated()
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(torch.empty, 1 << 40, dtype=torch.uint8, device="npu")
            try:
                future.result()
            except torch.OutOfMemoryError as e:
                out["oom"] = str(e).split(".")[0]

    out, result = _run(script)
    assert out == {"shards": 8 * block(1 << 20), "freed": 0, "oom": "NPU out of memory"}
    assert not result.fits and "Tried to allocate 1024.00 GiB" in result.out_of_memory["message"]
    import threading
    assert threading.Thread._bootstrap_inner.__qualname__ == "Thread._bootstrap_inner"


# -- found in review: each of these failed before its fix ------------------------------------

@spawned
def test_a_dataloader_whose_workers_are_spawned_runs(tmp_path, capfd):
    # spawn (forkserver is Python 3.14's default on Linux) pickles the worker's loop and
    # re-imports the script, whose `import torch_npu` the worker's startup hook answers
    path = tmp_path / "spawned.py"
    path.write_text(textwrap.dedent("""
        import torch, torch_npu
        from torch.utils.data import DataLoader, TensorDataset

        if __name__ == "__main__":
            data = TensorDataset(torch.arange(64).float().reshape(16, 4), torch.arange(16))
            loader = DataLoader(data, batch_size=4, num_workers=1,
                                multiprocessing_context="spawn")
            print("labels", [int(y.sum()) for _, y in loader])
    """))
    result = estimate(str(path), product="A2")
    assert result.status == 0 and "labels [6, 22, 38, 54]" in capfd.readouterr().out


@spawned
def test_a_spawned_multiprocessing_pool_imports_the_stand_in_and_returns(tmp_path, capfd):
    # each spawned child re-imports the script (its `import torch_npu` answered by the
    # startup hook) and runs its task on the CPU; the pool ends instead of hanging
    path = tmp_path / "pool.py"
    path.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import torch, torch_npu

        def work(n):
            import torch_npu
            return int(torch.arange(n).sum()), hasattr(torch_npu, "npu_rms_norm")

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(2) as pool:
                print("results", pool.map(work, [4, 5, 6]))
            x = torch.empty(1 << 20, device="npu")
    """))
    result = estimate(str(path), product="A2")
    printed = capfd.readouterr().out
    assert result.status == 0 and "results [(6, True), (10, True), (15, True)]" in printed
    assert result.peak_allocated == block(4 << 20)


def test_os_exit_ends_the_script_under_the_command_line_without_running_its_handlers(
        tmp_path, capsys):
    import io

    from ascend_memsim.cli import main
    path = tmp_path / "exits.py"
    path.write_text("import atexit, os\nimport torch, torch_npu\n"
                    "atexit.register(print, 'a handler ran')\nos._exit(3)\n")
    assert main(["estimate", str(path)], out=io.StringIO()) == 1
    captured = capsys.readouterr()
    assert "a handler ran" not in captured.out + captured.err


def test_a_thread_subclass_that_overrides_run_allocates_on_the_device():
    import threading

    class Loader(threading.Thread):
        def run(self):
            self.made = torch.empty(1 << 20, dtype=torch.uint8, device="npu")

    def script(out):
        t = Loader()
        t.start()
        t.join()
        out["allocated"] = torch.npu.memory_allocated()

    out, _ = _run(script)
    assert out["allocated"] == block(1 << 20)


def test_a_checkpoint_is_loaded_from_a_thread_and_a_callable_map_location_keeps_the_cpu(
        tmp_path):
    path = str(tmp_path / "ck.pt")
    from concurrent.futures import ThreadPoolExecutor

    def script(out):
        torch.save({"w": torch.empty(1 << 20, dtype=torch.uint8, device="npu")}, path)
        with ThreadPoolExecutor(1) as pool:
            loaded = pool.submit(torch.load, path, map_location="npu").result()
        out["thread"] = loaded["w"].device.type
        before = torch.npu.memory_allocated()
        kept = torch.load(path, map_location=lambda storage, location: storage)
        out["callable"] = kept["w"].device.type, torch.npu.memory_allocated() - before

    out, _ = _run(script)
    assert out == {"thread": "npu", "callable": ("cpu", 0)}


def test_a_random_npu_scalar_leaves_the_scripts_cpu_generator_as_it_was():
    def script(out):
        torch.manual_seed(0)
        torch.randint(0, 10, (1,), device="npu")
        out["after"] = torch.randint(0, 1000, (3,)).tolist()
        torch.manual_seed(0)
        out["plain"] = torch.randint(0, 1000, (3,)).tolist()

    out, _ = _run(script)
    assert out["after"] == out["plain"]


@spawned
def test_a_spawned_pool_of_the_script_imports_the_stand_in_and_returns(tmp_path, capfd):
    # spawn re-imports the script in each child, whose `import torch_npu` the children's
    # startup hook answers (it hung or failed before)
    path = tmp_path / "pool.py"
    path.write_text(textwrap.dedent("""
        import multiprocessing as mp
        import torch, torch_npu

        def square(x):
            return x * x

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(2) as pool:
                print("squares", pool.map(square, range(5)))
    """))
    result = estimate(str(path), product="A2")
    assert result.status == 0 and "squares [0, 1, 4, 9, 16]" in capfd.readouterr().out


def test_a_session_that_fails_to_start_leaves_torch_as_it_was(monkeypatch):
    # an install that fails half-way through the session's start undoes the ones before it
    from ascend_memsim.torchsim import session as session_module

    save, load, record_stream = torch.save, torch.load, torch.Tensor.record_stream

    def fails(s):
        raise RuntimeError("an install failed")

    monkeypatch.setattr(session_module, "_install_storages", fails)
    with pytest.raises(RuntimeError, match="an install failed"):
        estimate(lambda: None, product="A2")
    assert (torch.save, torch.load, torch.Tensor.record_stream) == (save, load, record_stream)
    monkeypatch.undo()
    # and the next estimate runs: no session was left active
    assert estimate(lambda: None, product="A2").fits
