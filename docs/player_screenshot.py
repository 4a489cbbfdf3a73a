"""Make docs/player.png, the README's picture of the trace player.

Records a small training step with stacks on a simulated A2, writes the player page for A2
and 950PR on a 26 MiB device, opens it in headless Chromium (Selenium and the system's
chromedriver), moves to the first failure, pins in each panel the close-up of the 2 MiB
aclrtMalloc of event 7 and saves the screenshot.

    python docs/player_screenshot.py            # writes docs/player.png
"""

import os
import shutil
import sys
import tempfile

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By

from ascend_memsim import MiB, Runtime
from ascend_memsim.observe.player import save_player
from ascend_memsim.observe.trace import Recorder

KiB = 1024


def load_weights(rt):
    return [rt.malloc(size) for size in (6 * MiB, 3 * MiB + 512 * KiB, 96 * KiB, 100)]


def forward(rt):
    acts = [rt.malloc(2 * MiB) for _ in range(3)]
    acts.append(rt.malloc_align32(2 * MiB))
    return acts


def backward(rt, acts):
    grads = []
    for act in reversed(acts):
        grads.append(rt.malloc(1 * MiB + 4 * KiB))
        rt.free(act)
    return grads


def train_step(rt):
    weights = load_weights(rt)
    workspace = rt.malloc_with_cfg(512 * KiB, 2, {1: 3})
    grads = backward(rt, forward(rt))
    for grad in grads:
        rt.free(grad)
    acts = forward(rt)
    rt.free(workspace)
    return weights, acts


def main(out: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with Runtime("A2", hbm_bytes=64 * MiB, sanitizer="off") as rt:
            rt.set_device(0)
            with Recorder(rt, stacks=True) as rec:
                train_step(rt)
        # the picture shows paths relative to the repository, not this machine's
        here = os.path.dirname(os.path.abspath(__file__)) + os.sep
        for event in rec.trace.events:
            if event.get("stack"):
                event["stack"] = [f.replace(here, "docs/") for f in event["stack"]]
        rec.trace.name = "train_step.jsonl"
        page = os.path.join(tmp, "train_step.html")
        print(save_player(page, rec.trace, ["A2", "950PR"], capacity=26 * MiB))
        options = webdriver.ChromeOptions()
        for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                    "--window-size=1260,1060", "--hide-scrollbars"):
            options.add_argument(arg)
        driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")),
                                  options=options)
        try:
            driver.get("file://" + page)
            driver.find_element(By.ID, "to-failure").click()
            # in each panel, pin the close-up of the 2 MiB aclrtMalloc of event 7 (the block
            # whose tooltip says so), then move the pointer away so no tooltip hides them
            for panel in driver.find_elements(By.CSS_SELECTOR, "section.panel"):
                for block in panel.find_elements(By.CSS_SELECTOR, "svg.map rect.blk.data"):
                    ActionChains(driver).move_to_element(block).perform()
                    if "allocated by event 7\n" in driver.find_element(By.ID, "tip").text:
                        block.click()
                        break
            ActionChains(driver).move_to_element(driver.find_element(By.TAG_NAME, "h1")).perform()
            driver.save_screenshot(out)
        finally:
            driver.quit()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__),
                                                            "player.png"))
