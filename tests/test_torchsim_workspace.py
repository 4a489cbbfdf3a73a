"""The workspace operators take during an estimate: the table, its overrides, where the
bytes come from (TASK_QUEUE_ENABLE), the summary's line and hostile table files."""

import contextlib
import io
import json
import types

import pytest

torch = pytest.importorskip("torch", reason="the estimate runs torch scripts on fake tensors; "
                                           "CI installs torch from the project's extras")

from ascend_memsim.allocators.workspace import workspace_block_size  # noqa: E402
from ascend_memsim.cli import main  # noqa: E402
from ascend_memsim.torchsim import estimate  # noqa: E402
from ascend_memsim.torchsim.torch_npu import npu as npu_module  # noqa: E402
from ascend_memsim.torchsim.workspace_table import (  # noqa: E402
    MAX_FILE_BYTES,
    WorkspaceTable,
    WorkspaceTableError,
    load_overrides,
)

MiB = 1 << 20


def square(steps=1):
    """A 4 MiB matrix squared ``steps`` times (one mm each)."""
    def run():
        a = torch.empty(1024, 1024, device="npu")
        for _ in range(steps):
            b = a @ a
        del b
    return run


def test_a_matmul_takes_20_mib_from_the_workspace_allocator_kept_across_steps():
    seen = {}

    def run():
        square(steps=3)()
        ws = npu_module.active().allocator.workspace
        seen["blocks"] = ws.blocks()
        seen["stats"] = ws.memory_stats()

    result = estimate(run, product="A2", task_queue=2)
    assert result.fits and result.workspace_calls == 3
    assert result.workspace_largest_request == 20 * MiB
    # 20 MiB + 32 rounded up to 2 MiB: one block, taken once and used by all three calls
    block = workspace_block_size(20 * MiB)
    assert block == 22 * MiB
    assert [(size, stream) for _ptr, size, _req, stream in seen["blocks"]] == [(block, 0)]
    assert seen["stats"]["reserved_bytes.allocated"] == block
    assert result.workspace_peak == block
    # the tensors' 20 MiB segment (a and the product fit one kLargeBuffer) and the block
    assert result.peak_reserved == 20 * MiB
    assert result.device_peak == 20 * MiB + block
    assert result.margin == result.capacity - result.device_peak - result.runtime_share


def test_the_workspace_grows_to_the_largest_request_and_keeps_it():
    def run():
        a = torch.empty(64, 64, device="npu")
        a @ a                                  # mm: 4 MiB -> a 6 MiB block
        torch.addmm(a, a, a)                   # addmm: 10 MiB -> grown to 12 MiB
        a @ a                                  # fits the 12 MiB block: kept
        seen.update(npu_module.active().allocator.workspace.memory_stats())

    seen = {}
    result = estimate(run, task_queue=2, workspace={"mm": "4MiB", "addmm": 10 * MiB})
    assert seen["reserved_bytes.allocated"] == 6 * MiB + 12 * MiB
    assert seen["reserved_bytes.current"] == result.workspace_peak == 12 * MiB
    assert result.workspace_largest_request == 10 * MiB


def test_with_the_default_task_queue_the_workspace_is_a_caching_allocator_block():
    result = estimate(square(), product="A2", snapshot=True)
    assert result.task_queue == 1 and result.workspace_calls == 1
    # 20 MiB + 32, in 512-byte steps: a block of its own 22 MiB segment, freed at once
    assert result.workspace_peak == 20 * MiB + 512
    assert result.peak_reserved == result.device_peak == 20 * MiB + 22 * MiB
    assert result.peak_allocated == 2 * (4 * MiB + 512) + 20 * MiB + 512
    # issue 36, item 28: the breakdown at the peak summed to 8 MiB + 1 KiB of the 28 MiB
    assert result.at_peak["workspace"] == 20 * MiB + 512
    assert sum(result.at_peak.values()) == result.peak_allocated
    assert "    workspace (of one operator)     20.00 MiB\n" in str(result)
    traces = result.snapshot["device_traces"][0]
    taken = [e for e in traces if e["action"] == "alloc" and e["size"] == 20 * MiB]
    assert [e["frames"][0] for e in taken] == [
        {"filename": "<workspace>", "line": 0, "name": "workspace of mm"}]


def test_the_workspace_allocators_block_is_a_segment_of_its_own_in_the_snapshot():
    result = estimate(square(), product="A2", task_queue=2, snapshot=True)
    segments = result.snapshot["segments"]
    # torch_npu's memorySnapshot: the workspace allocator's blocks after the segments
    assert segments[-1]["total_size"] == 22 * MiB
    assert segments[-1]["blocks"][0]["requested_size"] == 20 * MiB
    head = [e["action"] for e in result.snapshot["device_traces"][0][:3]]
    assert head == ["workspace_snapshot", "segment_alloc", "alloc"]


def test_an_override_changes_the_figure():
    assert estimate(square(), task_queue=2).workspace_peak == 22 * MiB
    smaller = estimate(square(), task_queue=2, workspace={"mm": "3MiB"})
    assert smaller.workspace_largest_request == 3 * MiB
    assert smaller.workspace_peak == workspace_block_size(3 * MiB) == 4 * MiB
    none = estimate(square(), task_queue=2, workspace={"mm": 0})
    assert none.workspace_calls == 0 and none.workspace_peak == 0


def test_an_operator_outside_the_table_counts_zero_and_is_reported():
    def run():
        a = torch.empty(1024, device="npu")
        torch.cumsum(a, 0)
        torch.cumsum(a, 0)

    result = estimate(run, task_queue=2)
    assert result.uncovered == {"cumsum": 2}
    assert result.workspace_calls == 0 and result.workspace_peak == 0
    text = str(result)
    assert "outside the workspace table (counted 0): 2 calls of 1 operators (cumsum 2)" in text
    assert "NPUWorkspaceAllocator)" not in text.split("not counted:")[1]
    # "*" gives the operators outside the table a figure
    star = estimate(run, task_queue=2, workspace={"*": "1MiB"})
    assert star.uncovered == {} and star.workspace_calls == 2
    assert star.workspace_peak == 2 * MiB
    assert WorkspaceTable({"*": 5}).source("cumsum") == "override *: 5 bytes per call"
    assert "MatMulV3" in WorkspaceTable().source("mm")


def test_a_job_that_fits_without_workspace_does_not_fit_with_it():
    # By hand: the 4 MiB matrix and its product (4 MiB + 512 each) share one 20 MiB
    # segment (kLargeBuffer); the matmul's 20 MiB workspace needs a 22 MiB segment
    # (TASK_QUEUE_ENABLE=1) or workspace block (2). 32 MiB holds 20 MiB, not 42 MiB; the
    # runtime's share is taken first (512 MiB, A2's ESTIMATE), so the card has that more
    capacity = 512 * MiB + 32 * MiB
    without = estimate(square(), capacity=capacity, workspace=False)
    assert without.fits and without.peak_reserved == 20 * MiB
    assert without.runtime_share == 512 * MiB and without.margin == 12 * MiB
    assert "operator workspaces (switched off)" in str(without)
    assert "runtime share    512.00 MiB" in str(without)
    not_counted = next(line for line in str(without).splitlines() if "not counted" in line)
    assert "HCCL" in not_counted and "runtime's context" not in not_counted
    with_it = estimate(square(), capacity=capacity)
    assert not with_it.fits
    assert with_it.out_of_memory["message"].startswith(
        "NPU out of memory. Tried to allocate 22.00 MiB")
    # the verdict names the workspace and the script's line, not "<workspace>:0"
    verdict = next(line for line in str(with_it).splitlines() if "verdict" in line)
    assert "for the workspace of mm at " in verdict and "<workspace>" not in verdict
    assert verdict.split(" at ")[-1].startswith(__file__)
    with_it = estimate(square(), capacity=capacity, task_queue=2)
    assert with_it.out_of_memory["message"].startswith(
        "NPU out of memory. NPUWorkspaceAllocator tried to allocate 20.00 MiB")
    assert estimate(square(), capacity=512 * MiB + 48 * MiB, task_queue=2).fits
    # without the share, as before it was counted: 32 MiB alone holds the job
    assert estimate(square(), capacity=32 * MiB, workspace=False, runtime_share=0).fits
    assert not estimate(square(), capacity=512 * MiB + 20 * MiB - 64, workspace=False).fits


@pytest.mark.parametrize("content, says", [
    (b"[1, 2]", "a JSON object"),
    (b"{\"mm\": -1}", "out of range"),
    (b"{\"mm\": 1.5}", "must be an int"),
    (b"{\"mm\": true}", "must be an int"),
    (b"{\"mm\": \"lots\"}", "mm:"),
    (b"{\"aten.mm\": 1}", "is not an operator name"),
    (b"{\"mm\": 1, \"mm\": 2}", "named twice"),
    (b"{\"mm\": NaN}", "not JSON"),
    (b"{\"mm\": " + b"9" * 5000 + b"}", "not JSON"),
    (b"[" * 100_000, "not JSON"),
    (b"\xff\xfe{}", "not JSON"),
    (b"{\"mm\": 1}" + b" " * MAX_FILE_BYTES, "larger than"),
    (b"{\"mm\": {\"x\": 1}}", "must be an int"),
])
def test_hostile_table_files_are_refused_with_a_message(tmp_path, content, says):
    path = tmp_path / "table.json"
    path.write_bytes(content)
    with pytest.raises(WorkspaceTableError, match=says):
        load_overrides(str(path))


def test_a_table_file_is_read_as_sizes(tmp_path):
    path = tmp_path / "table.json"
    path.write_text(json.dumps({"mm": "24MiB", "_foreach_add_": 0, "*": 512}))
    assert load_overrides(str(path)) == {"mm": 24 * MiB, "_foreach_add_": 0, "*": 512}
    with pytest.raises(WorkspaceTableError, match="not an operator name"):
        estimate(square(), workspace={"mm mm": 1})
    with pytest.raises(ValueError, match="TASK_QUEUE_ENABLE"):
        estimate(square(), task_queue=3)


SCRIPT = """\
import torch
import torch_npu
a = torch.empty(1024, 1024).npu()
b = a @ a
print(torch_npu.npu.max_memory_reserved())
"""


def cli(tmp_path, *options):
    """``ascend-memsim estimate OPTIONS job.py``, in this process (the command's own
    ``main``; the tests of the installed command's process are in test_torchsim.py)."""
    path = tmp_path / "job.py"
    path.write_text(SCRIPT)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", *options, str(path)], out=out)
    return types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def test_the_command_line_shows_the_workspace_and_takes_overrides(tmp_path):
    done = cli(tmp_path, "--task-queue", "2")
    assert done.returncode == 0, done.stderr
    assert "  workspace         22.00 MiB   (NPUWorkspaceAllocator" in done.stdout
    assert "  device peak       42.00 MiB   (reserved + workspace)" in done.stdout
    table = tmp_path / "t.json"
    table.write_text('{"mm": "1MiB"}')
    done = cli(tmp_path, "--json", "--task-queue", "2", "--workspace-table", str(table),
               "--workspace", "addmm=3MiB")
    out = json.loads(done.stdout[done.stdout.index("{"):])
    assert out["workspace_peak"] == 2 * MiB and out["workspace_largest_request"] == MiB
    assert out["device_peak"] == 22 * MiB and out["task_queue"] == 2
    assert not any("NPUWorkspaceAllocator" in line for line in out["not_counted"])


def test_the_command_line_refuses_a_bad_table(tmp_path):
    table = tmp_path / "t.json"
    table.write_text('{"mm": [1]}')
    done = cli(tmp_path, "--workspace-table", str(table))
    assert done.returncode == 2 and "mm: the bytes must be an int" in done.stderr
    done = cli(tmp_path, "--workspace", "mm")
    assert done.returncode == 2 and "expected OP=SIZE" in done.stderr
    done = cli(tmp_path, "--workspace-table", str(tmp_path / "missing.json"))
    assert done.returncode == 2 and "missing.json" in done.stderr
