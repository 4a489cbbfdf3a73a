"""Placement does not drift: a recorded random workload gets the very addresses it got when
they were recorded (tests/data/placement.json, made by tests/placement_workload.py before the
allocator and device were reworked for speed, and made again, identical to what the reworked
code gives, by the code that first had the fidelity corrections of the cfg APIs' rounding,
malloc_cached's policies and A2's reserved memory). The 310P's were made again when the
workload stopped giving that DDR-only part HBM: the same placement, each address at DDR's
base instead of HBM's."""

from __future__ import annotations

import json
import pathlib

import pytest
from placement_workload import PRODUCTS, run, run_allocator

_RECORDED = json.loads((pathlib.Path(__file__).parent / "data" / "placement.json").read_text())


@pytest.mark.parametrize("product", PRODUCTS)
def test_every_malloc_gets_its_recorded_address(product):
    got = run(product)
    want = _RECORDED[product]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == w, f"malloc #{i} on {product}: {g:#x} now, {w:#x} recorded"


def test_allocator_churn_gets_its_recorded_addresses():
    got = run_allocator()
    want = _RECORDED["allocator"]
    assert len(got) == len(want)
    first = next((i for i, (g, w) in enumerate(zip(got, want)) if g != w), None)
    assert first is None, f"allocation #{first}: {got[first]:#x} now, {want[first]:#x} recorded"
