"""Every exception class maps to exactly one vendor code, and the built-in it claims to be."""

import pytest

from ascend_memsim.memory import errors
from ascend_memsim.memory.constants import ErrorCode


def test_every_error_class_carries_one_vendor_code():
    classes = errors.error_classes()
    assert len(classes) >= 14
    for cls in classes:
        assert isinstance(cls.code, ErrorCode), cls
        assert cls.code is not ErrorCode.SUCCESS, cls
        assert cls("x").code == cls.code


def test_every_error_class_is_exported():
    assert {c.__name__ for c in errors.error_classes()} <= set(errors.__all__)


@pytest.mark.parametrize("cls, builtin", [
    (errors.InvalidArgument, ValueError), (errors.InvalidArgumentType, TypeError),
    (errors.InvalidPointer, ValueError), (errors.OutOfHostMemory, MemoryError),
])
def test_builtin_bases_match_the_meaning(cls, builtin):
    assert issubclass(cls, builtin)


def test_device_out_of_memory_is_not_memory_error():
    assert not issubclass(errors.OutOfDeviceMemory, MemoryError)


def test_message_names_code_and_value():
    text = str(errors.OutOfDeviceMemory("no room"))
    assert "no room" in text and "ACL_ERROR_RT_MEMORY_ALLOCATION" in text and "207001" in text
