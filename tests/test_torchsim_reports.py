"""The estimate's reports at their edges: --json is JSON alone, a stop or an out-of-memory
shows the script's line and not the simulator's frames, and output paths are checked before
the script runs."""

import json

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from test_torchsim import run, script  # noqa: E402


def test_json_is_the_whole_of_stdout_and_the_scripts_prints_go_to_stderr(tmp_path, capsys):
    path = script(tmp_path, """
        import torch, torch_npu
        print("step 0 loss 1.0")
        x = torch.empty(1024, device="npu")
    """)
    code, out = run("estimate", "--json", path)
    captured = capsys.readouterr()
    assert code == 0
    assert json.loads(out)["fits"] is True
    assert "step 0 loss 1.0" in captured.err and "step 0" not in captured.out


@pytest.mark.parametrize("line, error", [
    ("y = torch.nonzero(x > 0)", "DataDependentOperation"),
    ("z = torch.empty(1 << 40, dtype=torch.uint8, device='npu')", "torch.OutOfMemoryError"),
])
def test_a_stop_or_an_out_of_memory_shows_the_scripts_line_and_no_internal_frame(
        tmp_path, capsys, line, error):
    path = script(tmp_path, f"""
        import torch, torch_npu
        x = torch.randn(100).npu()
        {line}
    """)
    code, _ = run("estimate", path)
    err = capsys.readouterr().err
    assert code == 1
    assert f'File "{path}", line 4, in <module>' in err and error in err
    assert "/ascend_memsim/" not in err
    assert "site-packages/torch" not in err and "During handling" not in err


def test_a_snapshot_path_is_checked_before_the_script_runs(tmp_path, capsys):
    path = script(tmp_path, """
        import torch, torch_npu
        print("the script ran")
    """)
    code, _ = run("estimate", "--snapshot", str(tmp_path / "missing" / "s.pickle"), path)
    captured = capsys.readouterr()
    assert code == 2
    assert "does not exist" in captured.err and "the script ran" not in captured.out


def test_torch_npu_is_checked_before_the_script_runs(tmp_path, capsys):
    path = script(tmp_path, """
        import torch, torch_npu
        print("the script ran")
    """)
    for args in (("--torch-npu", "2.99"), ("--torch-npu", "2.6", "--bisect")):
        code, _ = run("estimate", *args, path)
        captured = capsys.readouterr()
        assert code == 2 and "--torch-npu" in captured.err
        assert "the script ran" not in captured.out
    code, out = run("estimate", "--torch-npu", "2.7.1", path)
    assert code == 0 and ", torch_npu 2.7" in out
