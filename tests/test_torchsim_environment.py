"""torch_npu's settings as the script's environment has them at its first NPU allocation
(torchsim/environment.py): PYTORCH_NPU_ALLOC_CONF (else PYTORCH_ALLOC_CONF) and
TASK_QUEUE_ENABLE, the options winning, the summary saying where each came from."""

import textwrap

import pytest

torch = pytest.importorskip("torch", reason="torchsim runs scripts on torch's fake tensors; "
                                           "install the torch extra: pip install -e '.[torch]'")

from ascend_memsim.allocators.conf import AllocatorConfigError  # noqa: E402
from ascend_memsim.torchsim import estimate  # noqa: E402
from ascend_memsim.torchsim.environment import task_queue_from_env  # noqa: E402

MiB = 1 << 20

SETS_ITS_OWN = """
import os
os.environ["PYTORCH_NPU_ALLOC_CONF"] = "expandable_segments:True"
os.environ["TASK_QUEUE_ENABLE"] = "2"
import torch, torch_npu
x = torch.empty(30 << 20, dtype=torch.uint8, device="npu")
"""


@pytest.fixture
def clean_env(monkeypatch):
    for name in ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TASK_QUEUE_ENABLE",
                 "ASCEND_LAUNCH_BLOCKING"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_settings_the_script_puts_in_os_environ_are_read_at_its_first_allocation(
        tmp_path, clean_env):
    path = tmp_path / "train.py"
    path.write_text(SETS_ITS_OWN)
    result = estimate(str(path), product="A2")
    # expandable segments map 20 MiB granules: 30 MiB reserves 40; by default a large
    # block is rounded up to 2 MiB: 32 MiB
    assert result.peak_reserved == 40 * MiB
    assert (result.alloc_conf, result.task_queue) == ("expandable_segments:True", 2)
    assert result.sources == {"alloc_conf": "PYTORCH_NPU_ALLOC_CONF, set by the script",
                              "task_queue": "TASK_QUEUE_ENABLE, set by the script"}
    assert "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True (from PYTORCH_NPU_ALLOC_CONF, " \
           "set by the script)" in str(result)
    # what the script set ends with it, as with its process
    import os
    assert "PYTORCH_NPU_ALLOC_CONF" not in os.environ and "TASK_QUEUE_ENABLE" not in os.environ
    # the options win over the script
    given = estimate(str(path), product="A2", alloc_conf="", task_queue=1)
    assert (given.peak_reserved, given.task_queue) == (32 * MiB, 1)
    assert given.sources == {"alloc_conf": "--alloc-conf", "task_queue": "--task-queue"}


def test_the_callers_environment_is_read_and_named_as_such(tmp_path, clean_env):
    path = tmp_path / "plain.py"
    path.write_text("import torch, torch_npu\nx = torch.empty(30 << 20, dtype=torch.uint8, "
                    "device='npu')\n")
    clean_env.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    clean_env.setenv("ASCEND_LAUNCH_BLOCKING", "1")
    result = estimate(str(path), product="A2")
    assert result.peak_reserved == 40 * MiB and result.task_queue == 0
    assert result.sources == {"alloc_conf": "PYTORCH_ALLOC_CONF in the environment",
                              "task_queue": "ASCEND_LAUNCH_BLOCKING in the environment"}
    clean_env.delenv("PYTORCH_ALLOC_CONF")
    clean_env.delenv("ASCEND_LAUNCH_BLOCKING")
    plain = estimate(str(path), product="A2")
    assert plain.sources == {"alloc_conf": "default", "task_queue": "default"}
    assert (plain.peak_reserved, plain.task_queue) == (32 * MiB, 1)


def test_settings_torch_npu_refuses_fail_the_script_at_its_first_allocation(tmp_path,
                                                                             clean_env):
    path = tmp_path / "bad.py"
    path.write_text("import torch, torch_npu\ny = torch.empty(8, device='npu')\n")
    clean_env.setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True")
    clean_env.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    with pytest.raises(AllocatorConfigError, match="Both PYTORCH_NPU_ALLOC_CONF and "
                                                  "PYTORCH_ALLOC_CONF have been set"):
        estimate(str(path), product="A2")
    clean_env.delenv("PYTORCH_ALLOC_CONF")
    clean_env.setenv("TASK_QUEUE_ENABLE", "3")
    with pytest.raises(RuntimeError, match="TASK_QUEUE_ENABLE should be 0, 1 or 2"):
        estimate(str(path), product="A2")


@pytest.mark.parametrize("environ, expected", [
    ({}, (1, None)),
    ({"TASK_QUEUE_ENABLE": "0"}, (0, "TASK_QUEUE_ENABLE")),
    ({"TASK_QUEUE_ENABLE": " 2x"}, (2, "TASK_QUEUE_ENABLE")),     # strtol reads " 2"
    ({"TASK_QUEUE_ENABLE": "abc"}, (0, "TASK_QUEUE_ENABLE")),     # strtol: no digits, 0
    ({"TASK_QUEUE_ENABLE": "2", "ASCEND_LAUNCH_BLOCKING": "1"}, (0, "ASCEND_LAUNCH_BLOCKING")),
])
def test_task_queue_enable_is_read_as_torch_npus_options_manager_reads_it(environ, expected):
    assert task_queue_from_env(environ) == expected


def test_a_refused_setting_is_refused_again_at_the_next_allocation(tmp_path, clean_env):
    # torch_npu's static initialiser throws again at each use: a script that catches the
    # first error does not go on with the defaults
    path = tmp_path / "catches.py"
    path.write_text(textwrap.dedent("""
        import torch, torch_npu
        for _ in range(2):
            try:
                torch.empty(8, device="npu")
            except RuntimeError as e:
                print("refused:", e)
    """))
    clean_env.setenv("TASK_QUEUE_ENABLE", "7")
    result = estimate(str(path), product="A2")
    assert result.status == 0
    assert result.peak_allocated == 0


FRACTION_OF_ONE = """
import torch, torch_npu
torch.npu.set_per_process_memory_fraction(1.0)
x = torch.empty(600 << 20, dtype=torch.uint8, device="npu")
del x
y = torch.empty(700 << 20, dtype=torch.uint8, device="npu")
"""


def test_torch_npu_selects_a_releases_behaviours_and_the_summary_names_it(tmp_path, clean_env):
    # allocators/releases.py: up to 2.9 a fraction of 1.0 caps, and the cap turns
    # garbage_collection_threshold on (0.1 of 4 GiB: the cached 602 MiB segment goes before
    # the 702 MiB one is made); PYTORCH_ALLOC_CONF is read from 2.10 only
    path = tmp_path / "fraction.py"
    path.write_text(FRACTION_OF_ONE)
    clean_env.setenv("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.1")
    old = estimate(str(path), product="A2", capacity=4 << 30, torch_npu="2.6",
                   alloc_conf="garbage_collection_threshold:0.1")
    new = estimate(str(path), product="A2", capacity=4 << 30)
    assert (old.peak_reserved, new.peak_reserved) == (702 * MiB, (602 + 702) * MiB)
    assert old.torch_npu == "2.6" and new.torch_npu == "2.15"
    assert str(old).splitlines()[0].endswith(", torch_npu 2.6")
    # the newest read the caller's PYTORCH_ALLOC_CONF; 2.9 does not know the variable
    assert new.sources["alloc_conf"] == "PYTORCH_ALLOC_CONF in the environment"
    unread = estimate(str(path), product="A2", capacity=4 << 30, torch_npu="2.9")
    assert unread.alloc_conf == "" and unread.sources["alloc_conf"] == "default"
