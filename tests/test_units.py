"""One size parser for every size setting: Runtime keywords, the aclInit config, the CLI."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ascend_memsim import GiB, InvalidArgument, MiB, Runtime, acl
from ascend_memsim.cli import main
from ascend_memsim.memory.units import format_bytes, parse_size


def test_runtime_profile_and_sanitizer_sizes_accept_text():
    with Runtime("A2", hbm_bytes="1.5GiB", sanitizer={"quarantine_bytes": "2MiB"}) as rt:
        assert rt.profile.hbm_bytes == 3 * GiB // 2
        assert rt.sanitizer.quarantine_bytes == 2 * MiB
    with pytest.raises(InvalidArgument, match="is not a size"):
        Runtime("A2", hbm_bytes="lots")


def test_acl_init_config_takes_a_size_as_text(tmp_path):
    path = tmp_path / "acl.json"
    path.write_text(json.dumps({"memsim": {"product": "950PR", "hbm_bytes": "64MiB"}}))
    assert acl.init(str(path)) == 0
    try:
        assert acl.rt.set_device(0) == 0
        _, total, ret = acl.rt.get_mem_info(acl.ACL_HBM_MEM)
        assert (total, ret) == (64 * MiB, 0)
        acl.rt.reset_device(0)
    finally:
        acl.finalize()


def test_the_cli_reads_sizes_with_the_same_parser(capsys):
    assert main(["explain", "1.5GiB", "--product", "950PR"]) == 0
    assert str(parse_size("1.5GiB")) in capsys.readouterr().out


def test_fault_size_filters_take_text():
    from ascend_memsim import FailWhen, OutOfDeviceMemory
    from ascend_memsim.checks.faults import parse_faults

    with Runtime("A2", hbm_bytes="64MiB") as rt:
        rt.set_device(0)
        with FailWhen(size=("2MiB", None)).installed(rt):
            rt.free(rt.malloc(MiB))
            with pytest.raises(OutOfDeviceMemory):
                rt.malloc(3 * MiB)
        [fault] = parse_faults([{"size": {"min": "1.5MiB", "max": "2MiB"}}])
        with fault.installed(rt):
            rt.free(rt.malloc(3 * MiB))
            with pytest.raises(OutOfDeviceMemory):
                rt.malloc(2 * MiB)
    with pytest.raises(InvalidArgument, match="is not a size"):
        FailWhen(size="lots")


def test_units_are_binary_and_the_message_says_so():
    # DECISION: "2MB" is 2 MiB, as PyTorch users mean it; the refusal of a bad size says so.
    assert parse_size("2MB") == parse_size("2mb") == parse_size("2M") == 2 * MiB
    assert parse_size("1GB") == GiB and parse_size("4KB") == 4096
    with pytest.raises(InvalidArgument, match="units are binary, 2MB = 2MiB = 2097152 bytes"):
        parse_size("2 MBytes")


def test_plural_agrees_with_the_count():
    from ascend_memsim.memory.units import plural

    assert [plural(n, "block") for n in (0, 1, 2)] == ["0 blocks", "1 block", "2 blocks"]
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(5, "entry", "entries") == "5 entries"


@given(st.integers(min_value=0, max_value=1 << 50))
def test_a_printed_size_is_exact_and_short(n):
    """Teaching output: a size reads as one unit and a small remainder, or as its exact bytes;
    either way the bytes it names are the bytes there are."""
    text = format_bytes(n)
    if "(" in text:             # "2097120 B (2.00 MiB)": exact bytes first
        assert int(text.split(" B (")[0]) == n
    else:
        assert text.count("+") <= 1
        assert sum(parse_size(part.replace(" ", "")) for part in text.split(" + ")) == n
