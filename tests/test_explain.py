"""explain(): every step names its rule, and it agrees with the simulated device."""

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ascend_memsim import AclError, Api, Device, FeatureNotSupported, GiB, MiB, explain, get_profile


def test_the_two_mib_gotcha_on_a2():
    text = str(explain(2 * MiB, 0, product="A2"))
    assert "ALIGN_UP(2097152, 32) + 32 = 2097184" in text
    assert "= 4194304 (4 MiB)" in text and "fallback, normal pages" in text
    assert "api_ref 11-01, aclrtMalloc" in text and "acl_rt.h" in text


def test_only_the_steps_taken_are_numbered():
    """The untaken branch (HUGE_FIRST's normal pages, for a block that went on huge pages) is a
    note after the result, not a step; it read "4. fallback, normal pages" before."""
    e = explain(2 * MiB, 0, product="A2")
    assert [s.text.split(":")[0] for s in e.steps] == ["size rule", "pages", "huge pages"]
    assert [s.text.split(":")[0] for s in e.fallback] == ["fallback, normal pages"]
    last = str(e).splitlines()[-1]
    assert last.startswith("  only if no huge page can be had: fallback, normal pages")
    assert explain(100, 0, product="A2").fallback == ()


def test_the_page_alignments_are_stated_per_product_and_policy():
    """A property-test writer reads them instead of hard-coding 64 B, 2 MiB and 1 GiB."""
    assert get_profile("A3").page_bytes == {"normal": 64, "huge": 2 * MiB, "huge1g": GiB}
    assert "huge1g" not in get_profile("950PR").page_bytes
    assert [explain(size, policy, product="A3").alignment
            for size, policy in ((100, 0), (3 * MiB, 0), (100, 2), (GiB, 6))] == [
        64, 2 * MiB, 64, GiB]


def test_align32_avoids_it():
    e = explain(2 * MiB, 0, product="A2", api="malloc_align32")
    assert (e.rule_size, e.footprint) == (2 * MiB, 2 * MiB)


def test_one_gib_pages_step_says_no_plus_32():
    assert "no +32 on 1 GB pages" in str(explain(GiB, 6, product="A3"))


def test_out_of_enum_policy_is_explained():
    assert "outside the enum" in str(explain(3 * MiB, 42))


def test_out_of_enum_is_said_once():
    """It read "policy 0x63 (outside the enum) is outside the enum"."""
    text = str(explain(100, 0x63))
    assert text.count("outside the enum") == 2  # the request line, and the pages step once
    assert "(outside the enum) is outside" not in text


def test_malloc_cached_does_not_pad_huge1g_only_p2p():
    """memory.cpp, aclrtMallocCachedImpl: isPadding = !huge1g for HUGE1G_ONLY and
    HUGE1G_ONLY_P2P; the second gets default pages there. It used to be 160."""
    e = explain(100, 7, product="A2", api="malloc_cached")
    assert (e.rule_size, e.page.value, e.footprint) == (128, "normal", 128)
    assert "aclrtMallocCachedImpl" in str(e) and "no +32" in str(e)
    assert explain(100, 5, product="A2", api="malloc_cached").rule_size == 160


def test_the_valid_size_range_is_stated():
    """A size past size_t said "outside [0, ...]" though 0 is refused too."""
    with pytest.raises(ValueError, match=r"outside \[1, 18446744073709551615\]"):
        explain(2**70)
    with pytest.raises(ValueError, match="must be > 0"):
        explain(0)


def test_no_citation_of_project_documents():
    for policy, api in ((0, "malloc"), (6, "malloc"), (42, "malloc"), (0, "malloc_align32"),
                        (7, "malloc_cached"), (0, "malloc_with_cfg")):
        text = str(explain(3 * MiB, policy, product="A3", api=api))
        assert "SPEC" not in text and "seed chapter" not in text


def test_errors_are_the_core_errors():
    with pytest.raises(FeatureNotSupported):
        explain(GiB, 6, product="950PR")
    with pytest.raises(ValueError):
        explain(0)


@given(size=st.integers(1, 8 * MiB), policy=st.sampled_from([0, 1, 2, 3, 4, 5, 9]),
       product=st.sampled_from(["A2", "950PR", "310P"]), api=st.sampled_from(list(Api)))
def test_explain_agrees_with_the_device(size, policy, product, api):
    e = explain(size, policy, product=product, api=api)
    profile = get_profile(product)
    capacity = {"hbm_bytes": 64 * MiB} if profile.hbm_bytes else {"ddr_bytes": 64 * MiB}
    block = Device(profile.with_overrides(**capacity)).allocate(size, policy, api=api)
    assert (e.page, e.rule_size, e.footprint) == (block.page, block.rule_size, block.footprint)
    assert block.ptr % e.alignment == 0 and e.alignment == profile.page_bytes[e.page.value]


_ANY_SIZE = st.one_of(st.integers(-2, 2**64 + 2), st.integers(2**64 - 200, 2**64 - 1),
                      st.sampled_from([0, 1, 2**63, 2**64 - 33, 2**64 - 32, 2**64 - 1, 1.5,
                                       True, None, "8"]))
_ANY_POLICY = st.one_of(st.integers(-(2**31) - 2, 2**32 + 2), st.sampled_from(
    [0, 1, 2, 3, 4, 5, 6, 7, 9, -(2**31), 2**32 - 1, 2**32, 0x100, 0x10000, 1.0, None]))


def _outcome(fn):
    try:
        fn()
    except AclError as error:
        return int(error.code)
    return 0


@given(size=_ANY_SIZE, policy=_ANY_POLICY,
       product=st.sampled_from(["A2", "A3", "950PR", "310P"]), api=st.sampled_from(list(Api)),
       small=st.booleans())
@example(size=2**64 - 1, policy=0, product="A2", api=Api.MALLOC, small=False)
@example(size=2**40, policy=0, product="A2", api=Api.MALLOC, small=False)
def test_explain_refuses_what_malloc_refuses_with_the_same_code(size, policy, product, api,
                                                               small):
    """Issue 9: explain(2**64 - 1) explained a footprint while malloc returned 100000."""
    profile = get_profile(product)
    if small:
        profile = profile.with_overrides(
            **({"hbm_bytes": 64 * MiB} if profile.hbm_bytes else {"ddr_bytes": 64 * MiB}))
    said = _outcome(lambda: explain(size, policy, product=profile, api=api))
    did = _outcome(lambda: Device(profile).allocate(size, policy, api=api))
    assert said == did
