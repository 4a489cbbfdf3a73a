"""The trace player in a real browser: Selenium driving the system's Chromium, headless.

Runs when selenium (the test extra), Chromium and chromedriver are installed
(``apt-get install chromium chromium-driver``, as CI does); skipped with the reason otherwise.
What the page draws at three events is checked against the replay's own figures.
"""

import shutil

import pytest

from ascend_memsim import MiB, OutOfDeviceMemory, Runtime
from ascend_memsim.memory.units import format_bytes
from ascend_memsim.observe.player import save_player
from ascend_memsim.observe.replay import replay
from ascend_memsim.observe.stream import open_trace
from ascend_memsim.observe.trace import Recorder

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome"))), None)
webdriver = pytest.importorskip("selenium.webdriver",
                                reason="the browser test needs selenium (the test extra)")
pytestmark = pytest.mark.skipif(
    not (CHROMEDRIVER and CHROMIUM),
    reason="no Chromium and chromedriver on PATH (apt-get install chromium chromium-driver)")

from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

CAPACITY = 14 * MiB
PRODUCTS = ["A2", "950PR"]


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1320,900"):
        options.add_argument(arg)
    # the system's chromedriver by path: Selenium Manager never downloads anything
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def _record(path):
    """A trace with stacks: blocks come and go; on 14 MiB the 3 MiB malloc of event 4
    fails on A2 (its 2 MiB malloc costs two huge pages)."""
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        with Recorder(rt, stacks=True) as rec:
            first = rt.malloc(2 * MiB)                 # 0
            rt.malloc_with_cfg(100, 2, {1: 3})         # 1
            blocks = [rt.malloc(3 * MiB) for _ in range(3)]   # 2, 3, 4
            rt.free(first)                             # 5
            rt.malloc(100)                             # 6
            rt.malloc_align32(2 * MiB)                 # 7
            for ptr in blocks:                         # 8, 9, 10
                rt.free(ptr)
    rec.trace.save(str(path))


def _replayed(trace, product, index):
    """(footprint bytes, blocks) live on device 0 after event ``index``, by the replay."""
    result = replay(trace, product, capacity=CAPACITY, stop_after=index, keep_runtime=True)
    try:
        blocks = list(result.runtime.device(0).blocks())
        return sum(b.footprint for b in blocks), len(blocks)
    finally:
        result.runtime.close()


def _go(driver, index):
    """Move the slider to ``index`` with the keyboard, as a user does."""
    slider = driver.find_element(By.ID, "slider")
    slider.send_keys(Keys.HOME)
    for _ in range(index):
        slider.send_keys(Keys.ARROW_RIGHT)
    assert slider.get_attribute("value") == str(index)


def test_player_draws_what_the_replay_computes(browser, tmp_path):
    trace_path = tmp_path / "train_step.jsonl"
    _record(trace_path)
    trace = open_trace(str(trace_path))
    page = tmp_path / "player.html"
    save_player(str(page), trace, PRODUCTS, capacity=CAPACITY)
    browser.get(page.as_uri())
    assert browser.execute_script("return document.querySelectorAll('script[src]').length") == 0
    panels = browser.find_elements(By.CSS_SELECTOR, "section.panel")
    assert [p.get_attribute("data-product") for p in panels] == PRODUCTS
    whole = {p: replay(trace, p, capacity=CAPACITY) for p in PRODUCTS}
    assert whole["A2"].first_failure is not None and whole["A2"].first_failure.index == 4

    # three events: early, the A2 peak, after the last free
    for index in (1, whole["A2"].peak_index, 10):
        _go(browser, index)
        for panel, product in zip(panels, PRODUCTS):
            in_use, count = _replayed(trace, product, index)
            assert panel.get_attribute("data-event") == str(index)
            assert int(panel.get_attribute("data-bytes")) == in_use
            assert int(panel.get_attribute("data-blocks")) == count
            drawn = {r.get_attribute("data-id") for r in
                     panel.find_elements(By.CSS_SELECTOR, "svg.map rect.blk.data")}
            assert len(drawn) == count
            assert f"{format_bytes(in_use)} in use" in panel.find_element(
                By.CLASS_NAME, "figs").text

    # the peak and the first failure are marked where the replay has them
    for panel, product in zip(panels, PRODUCTS):
        mark = panel.find_element(By.CSS_SELECTOR, "g.peak-mark")
        assert mark.get_attribute("data-index") == str(whole[product].peak_index)
        assert mark.get_attribute("data-bytes") == str(whole[product].peak_bytes)
        first = panel.find_elements(By.CSS_SELECTOR, "line.first-failure")
        if whole[product].first_failure is None:
            assert first == []
        else:
            assert first[0].get_attribute("data-index") == str(
                whole[product].first_failure.index)

    # hovering a block shows its size, footprint, page, API and the stack that allocated it
    _go(browser, 3)
    block = panels[0].find_element(By.CSS_SELECTOR, "svg.map rect.blk.data[data-id='2']")
    ActionChains(browser).move_to_element(block).perform()
    tip = browser.find_element(By.ID, "tip")
    assert tip.is_displayed()
    text = tip.text
    assert "3 MiB requested (3145728 bytes), aclrtMalloc" in text
    assert "footprint 4 MiB" in text and "huge pages" in text
    assert "allocated at:" in text and "test_player_browser.py" in text and "_record" in text

    # the product switch replays the same trace on another product
    Select(panels[1].find_element(By.CSS_SELECTOR, "select.product")).select_by_index(0)
    panels = browser.find_elements(By.CSS_SELECTOR, "section.panel")
    assert panels[1].get_attribute("data-product") == "A2"
    assert panels[1].get_attribute("data-bytes") == str(_replayed(trace, "A2", 3)[0])

    shot = tmp_path / "player.png"
    assert browser.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _errors(browser) == []


def _errors(driver):
    """The page's script errors (and anything else the browser logged as severe)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_player_of_an_empty_trace_loads_without_errors(browser, tmp_path):
    from ascend_memsim.observe.trace import Trace

    page = tmp_path / "empty.html"
    save_player(str(page), Trace(name="empty.jsonl"), ["A2", "950PR"])
    browser.get(page.as_uri())
    panels = browser.find_elements(By.CSS_SELECTOR, "section.panel")
    assert [p.get_attribute("data-blocks") for p in panels] == ["0", "0"]
    assert browser.find_element(By.ID, "to-peak").get_attribute("disabled") == "true"
    assert _errors(browser) == []


def test_player_shows_hostile_stack_text_as_text(browser, tmp_path):
    """Stacks and names are hostile input: shown as text, never run or parsed as markup."""
    hostile = '</script><img src=x onerror="document.title=1"><b>bold</b>'
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        with Recorder(rt) as rec:
            rt.malloc(4096)
    rec.trace.events[-1]["stack"] = [hostile, "x$\\sqrt{$ & <!-- -->"]
    rec.trace.name = hostile
    page = tmp_path / "hostile.html"
    save_player(str(page), rec.trace, ["A2"])
    browser.get(page.as_uri())
    assert browser.execute_script("return document.querySelectorAll('img, b').length") == 0
    assert hostile in browser.find_element(By.TAG_NAME, "h1").text
    block = browser.find_element(By.CSS_SELECTOR, "svg.map rect.blk.data")
    ActionChains(browser).move_to_element(block).perform()
    text = browser.find_element(By.ID, "tip").text
    assert hostile in text and "x$\\sqrt{$ & <!-- -->" in text
    assert browser.execute_script("return document.querySelectorAll('img, b').length") == 0
    assert browser.title != "1" and _errors(browser) == []


def test_player_draws_a_physical_handle_apart(browser, tmp_path):
    """A physical handle's memory is drawn in its own colour, labelled with its page size."""
    prop = {"memAttr": 4, "location": {"id": 0, "type": 1}}     # ACL_HBM_MEM_HUGE, device 0
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        with Recorder(rt) as rec:
            ptr = rt.malloc(100)                              # 0
            handle = rt.vmm.malloc_physical(3 * MiB, prop)    # 1
            rt.vmm.free_physical(handle)                      # 2
            rt.free(ptr)                                      # 3
    trace_path = tmp_path / "vmm.jsonl"
    rec.trace.save(str(trace_path))
    page = tmp_path / "player.html"
    save_player(str(page), open_trace(str(trace_path)), ["A2"])
    browser.get(page.as_uri())
    panel = browser.find_element(By.CSS_SELECTOR, "section.panel")
    assert "physical handle, 2 MiB pages" in panel.find_element(By.CLASS_NAME, "legend").text
    _go(browser, 1)
    assert int(panel.get_attribute("data-bytes")) == 4 * MiB + 192
    fills = {r.get_attribute("fill") for r in
             panel.find_elements(By.CSS_SELECTOR, "svg.map rect.blk.data")}
    assert "#009E73" in fills and len(fills) == 2
    assert "physical handle, 3 MiB, 2 MiB pages" in panel.find_element(
        By.CSS_SELECTOR, "svg.map").text
    _go(browser, 2)
    assert int(panel.get_attribute("data-bytes")) == 192


def test_player_of_a_snapshot_shows_the_allocators_segments(browser, tmp_path):
    """plot SNAPSHOT --player: under the panels, the caching allocator's segments and their
    blocks, each state's blocks as the snapshot lists them; the player itself unchanged."""
    import pickle
    import re

    from test_allocmap import _expected, _fragmented

    from ascend_memsim.cli import main

    snap = _fragmented(stream_use=True)
    path = tmp_path / "frag.pickle"
    path.write_bytes(pickle.dumps(snap))
    page = tmp_path / "frag.html"
    assert main(["plot", str(path), "--player", "--capacity", "100MiB", "-o", str(page)]) == 0
    browser.get(page.as_uri())
    section = browser.find_element(By.ID, "allocator")
    assert "The caching allocator" in section.text
    drawn = {state: set() for state in _expected(snap)}
    for title in section.find_elements(By.CSS_SELECTOR, "rect > title"):
        text = title.get_attribute("textContent")
        for state in drawn:
            if text.startswith(f"{state} block of "):
                drawn[state].add(int(re.search(r" at (0x[0-9a-f]+)", text).group(1), 16))
    assert drawn == _expected(snap)
    assert all(drawn[s] for s in drawn)
    # the segments' heavy edges are drawn, the player's panels still made by its script
    assert len(section.find_elements(By.CSS_SELECTOR, "line.outline")) == \
        2 * len(snap["segments"])
    assert len(browser.find_elements(By.CSS_SELECTOR, "section.panel")) == 2
    assert _errors(browser) == []


def test_player_draws_pool_blocks_in_their_granules_and_names_imports(browser, tmp_path):
    """A stream-ordered pool's granules in their own colours (block, cached), and another
    process's memory an importer maps listed with its exporter while it is mapped."""
    from ascend_memsim import acl

    props = {"allocType": 0, "handleType": 0, "location": {"id": 0, "type": 1},
             "maxSize": 16 * MiB}
    with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as a:
        b = a.spawn_process(sanitizer="off")
        rec_a, rec_b = Recorder(a), Recorder(b)
        rec_a.start()
        rec_b.start()
        acl.rt.set_device(0)                                            # 0
        ptr, _ = acl.rt.malloc(4096, 0)                                 # 1
        key, _ = acl.rt.ipc_mem_get_export_key(ptr, 4096, 65, 1)        # 2
        pool, _ = acl.rt.mem_pool_create(props)                         # 3
        stream, _ = acl.rt.create_stream()
        block, _ = acl.rt.mem_pool_malloc_async(3 * MiB, pool, stream)  # 4, 5 granules; 6
        with b.as_current():
            acl.rt.set_device(0)                                        # B 0
            acl.rt.ipc_mem_import_by_key(key, 0)                        # B 1
            acl.rt.ipc_mem_close(key)                                   # B 2
        acl.rt.mem_pool_free_async(block, stream)                       # 7
        rec_a.stop()
        rec_b.stop()
        acl.rt.ipc_mem_close(key)
        b.close()
    page = tmp_path / "pool.html"
    save_player(str(page), rec_a.trace, ["A2"])
    browser.get(page.as_uri())
    panel = browser.find_element(By.CSS_SELECTOR, "section.panel")
    legend = panel.find_element(By.CLASS_NAME, "legend").text
    assert "aclrtMemPoolMallocAsync" in legend and "memory pool, cached" in legend
    _go(browser, 6)
    fills = [r.get_attribute("fill") for r in
             panel.find_elements(By.CSS_SELECTOR, "svg.map rect.blk.data")]
    assert fills.count("#56B4E9") == 2          # the block's two granules
    _go(browser, 7)
    fills = [r.get_attribute("fill") for r in
             panel.find_elements(By.CSS_SELECTOR, "svg.map rect.blk.data")]
    assert fills.count("#BBBBBB") == 2 and "#56B4E9" not in fills   # given back: cached
    page = tmp_path / "importer.html"
    save_player(str(page), rec_b.trace, ["A2"])
    browser.get(page.as_uri())
    panel = browser.find_element(By.CSS_SELECTOR, "section.panel")
    _go(browser, 1)
    assert panel.get_attribute("data-imports") == "1"
    assert f"IPC key {key}: 4 KiB of process {a.pid}" in panel.text
    _go(browser, 2)
    assert panel.get_attribute("data-imports") == "0"


#: fills a 32 MiB A2 with 1 MiB NORMAL_ONLY blocks until one fails, frees every other one, so
#: HUGE_FIRST over 1 MiB falls back and HUGE_ONLY fails; then a 2 MiB aclrtMalloc
def _small_device_trace(path):
    with Runtime("A2", hbm_bytes=32 * MiB, sanitizer="off") as rt:
        rt.set_device(0)
        with Recorder(rt) as rec:
            blocks = []
            while True:
                try:
                    blocks.append(rt.malloc(1 * MiB, 2))           # NORMAL_ONLY
                except OutOfDeviceMemory:
                    break
            for ptr in blocks[::2]:
                rt.free(ptr)
            fallback = rt.malloc(1 * MiB + 1, 0)                   # HUGE_FIRST: falls back
            with pytest.raises(OutOfDeviceMemory):
                rt.malloc(1 * MiB + 1, 1)                          # HUGE_ONLY: fails
            for ptr in blocks[1::2] + [fallback]:
                rt.free(ptr)
            rt.free(rt.malloc(2 * MiB))                            # the +32: two huge pages
    rec.trace.save(str(path))
    events = rec.trace.events
    return (next(i for i, e in enumerate(events) if e.get("fallback") is True),
            next(i for i, e in enumerate(events) if e.get("size") == 2 * MiB))


def _box(driver, element):
    return driver.execute_script(
        "const r = arguments[0].getBoundingClientRect();"
        "return [r.left, r.top, r.right, r.bottom];", element)


def _overlap(a, b):
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def test_player_teaches_failures_fallbacks_and_the_plus_32(browser, tmp_path):
    """Issue 25 item 17: a trace recorded on a 32 MiB device plays with its failures, on one
    capacity for both products; the peak's label never overprints the capacity's line or
    label; fallbacks are marked in the legend; a block's close-up shows the +32."""
    from ascend_memsim.observe.viz import FALLBACK_LABEL

    trace_path = tmp_path / "small.jsonl"
    fell_back, padded = _small_device_trace(trace_path)
    page = tmp_path / "small.html"
    save_player(str(page), open_trace(str(trace_path)), PRODUCTS)
    browser.get(page.as_uri())
    panels = browser.find_elements(By.CSS_SELECTOR, "section.panel")
    assert [Select(p.find_element(By.CSS_SELECTOR, "select.product"))
            .first_selected_option.text for p in panels] == ["A2 (32 MiB)", "950PR (32 MiB)"]
    a2, pr = panels
    assert len(a2.find_elements(By.CSS_SELECTOR, "path.fail-mark")) == 2
    failure = browser.find_element(By.ID, "to-failure")
    assert failure.get_attribute("disabled") is None
    first = int(a2.find_element(By.CSS_SELECTOR, "line.first-failure")
                .get_attribute("data-index"))
    failure.click()
    assert browser.find_element(By.ID, "slider").get_attribute("value") == str(first)

    # the peak's label clear of the capacity's line and label: at the recorded capacity (the
    # peak just under it) and at 40 MiB (the peak at 3/4 of it)
    wider = tmp_path / "wider.html"
    save_player(str(wider), open_trace(str(trace_path)), PRODUCTS, capacity=40 * MiB)
    for path in (wider, page):
        browser.get(path.as_uri())
        for panel in browser.find_elements(By.CSS_SELECTOR, "section.panel"):
            label = panel.find_element(By.CSS_SELECTOR, "g.peak-mark text")
            cap_text = panel.find_element(By.CSS_SELECTOR, "svg.tl text.capt")
            cap_line = panel.find_element(By.CSS_SELECTOR, "svg.tl line.cap")
            box, where = _box(browser, label), (path.name, panel.get_attribute("data-product"))
            assert not _overlap(box, _box(browser, cap_text)), where
            line = _box(browser, cap_line)
            assert not box[1] <= line[1] <= box[3], f"the peak's label on the line: {where}"
            outer = _box(browser, panel.find_element(By.CSS_SELECTOR, "svg.tl"))
            assert outer[0] <= box[0] and box[2] <= outer[2] and outer[1] <= box[1], where
    a2, pr = browser.find_elements(By.CSS_SELECTOR, "section.panel")

    # the fallback: outlined, with its legend entry
    _go(browser, fell_back)
    assert FALLBACK_LABEL in a2.find_element(By.CLASS_NAME, "legend").text
    assert len(a2.find_elements(By.CSS_SELECTOR, "svg.map rect.blk.data.fallback")) == 1
    assert "fell back" in a2.find_element(By.CLASS_NAME, "closeup").text

    # the +32: the close-up of the 2 MiB aclrtMalloc shows 32 bytes of padding on A2, as a
    # bar tens of pixels wide, and none on 950PR
    _go(browser, padded)
    padding = a2.find_elements(By.CSS_SELECTOR, "svg.zoom rect.magnified.padding")
    assert len(padding) == 1 and float(padding[0].get_attribute("width")) > 40
    text = a2.find_element(By.CLASS_NAME, "closeup").text
    assert "ALIGN_UP(2097152, 32) + 32 = 2097184" in text and "(2 pages)" in text
    assert "+32 B" in a2.find_element(By.CSS_SELECTOR, "svg.zoom").text
    assert pr.find_elements(By.CSS_SELECTOR, "svg.zoom rect.magnified.padding") == []
    assert "no +32 for aclrtMalloc on 950PR" in pr.find_element(By.CLASS_NAME, "closeup").text

    # a click pins a block's close-up while the slider moves; a second click lets it go
    block = a2.find_element(By.CSS_SELECTOR, "svg.map rect.blk.data")
    pinned = block.get_attribute("data-id")
    block.click()
    _go(browser, padded + 1)
    box = a2.find_element(By.CLASS_NAME, "closeup")
    assert box.get_attribute("data-id") == pinned and "pinned" in box.text
    assert _errors(browser) == []
