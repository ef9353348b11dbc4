# ctest-variants: rmq43 rmq43.quorum
"""The /status page in a real browser: Debian's Chromium, headless, driven by selenium
through chromedriver (deploy/install-deps.sh installs chromium, chromium-driver and
python3-selenium; without them this test fails, it does not skip).

A poison message loops slowly through the proxy (status_support.LoopingConsumer nacks it
every 0.3 s, policy `requeue: immediate`, no limits in reach). The page at
http://127.0.0.1:METRICS/status shows a #top row for the test's queue, with the message as
"#" + the 12 hex digits of its tracker id (identities hidden by default: neither the
message_id nor the body is on the page); the row's returns count rises at the next refresh
(every 3 s), and the "updated" time in #meta changes with it; #error stays hidden. Every
request the page made (Chrome's network log, and the Resource Timing entries) went to the
page's own origin: the page loads nothing from outside. A screenshot (1400x900) is saved to
$NACKGUARD_BUILD_DIR/test-artifacts/status-page.png.
"""

import json
import os
import struct
import uuid

import harness
import waiting
import operations_support as ops
import redelivery_support as rs
import status_support as st
from redelivery_support import NO_RATE_LIMITS, props

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
INSTALL_HINT = ("run deploy/install-deps.sh (it installs chromium, chromium-driver and "
                "python3-selenium)")
ARTIFACTS_DIR = os.path.join(harness.BUILD_DIR, "test-artifacts")
SCREENSHOT = os.path.join(ARTIFACTS_DIR, "status-page.png")


def start_browser():
    """A headless Chromium under chromedriver; raises AssertionError naming what is missing."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        raise AssertionError(f"selenium is missing ({exc}): {INSTALL_HINT}") from None
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            raise AssertionError(f"{path} is missing: {INSTALL_HINT}")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,900",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check"):
        options.add_argument(arg)
    # Chrome's DevTools network events, read back with get_log("performance").
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.set_window_size(1400, 900)
    # A viewport (and so a screenshot) of exactly 1400x900: the window's own size leaves
    # less to the page.
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": 1400, "height": 900, "deviceScaleFactor": 1,
                            "mobile": False})
    return driver


def requested_urls(driver):
    """Every URL the page asked for, from Chrome's network events since the last call."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


class StatusPageTest(ops.OpsTest):

    def wait_for(self, what, condition, timeout, step=0.2):
        """Polls condition() until it returns something true; fails naming `what`."""
        value = waiting.wait_for(condition, timeout, step)
        if not value:
            self.fail(f"{what}: not within {timeout} s")
        return value

    def top_row(self, driver, queue):
        """(data-id, message cell, returns) of the #top row for `queue`, or None."""
        from selenium.webdriver.common.by import By
        from selenium.common.exceptions import StaleElementReferenceException
        try:
            for tr in driver.find_elements(By.CSS_SELECTOR, "#top tbody tr"):
                if tr.find_element(By.CSS_SELECTOR, "td.queue").text == queue:
                    return (tr.get_attribute("data-id"),
                            tr.find_element(By.CSS_SELECTOR, "td.id").text,
                            int(tr.find_element(By.CSS_SELECTOR, "td.returns").text))
        except StaleElementReferenceException:  # the page redrew its tables meanwhile
            return None
        return None

    def meta_text(self, driver):
        from selenium.webdriver.common.by import By
        return driver.find_element(By.ID, "meta").text

    def test_page_refreshes_in_a_browser(self):
        queue = self.queue_name("page")
        proxy = self.start_ops({"q.yaml": rs.policy_yaml(queue, max_redeliveries=100000,
                                                         requeue="immediate",
                                                         rate=NO_RATE_LIMITS)})
        self.broker.declare(queue)
        poison_id = "poison-" + uuid.uuid4().hex
        marker = "BodyMark-" + uuid.uuid4().hex
        self.broker.publish(queue, [(f"{marker}-good-{i}".encode(), props(message_id=f"g{i}"))
                                    for i in range(3)] +
                            [(f"{marker}-poison".encode(), props(message_id=poison_id))])
        consumer = st.LoopingConsumer(proxy.port, queue, poison_id, interval=0.3)
        self.addCleanup(consumer.close)
        consumer.start()
        consumer.wait_nacks(2, timeout=30)
        want_id = st.short_id(queue, f"message_id:{poison_id}")

        driver = start_browser()
        self.addCleanup(driver.quit)
        origin = f"http://127.0.0.1:{proxy.metrics_port}"
        driver.get(f"{origin}/status")
        self.assertEqual(driver.title, "nackguard status")

        first = self.wait_for(f"a #top row for {queue}", lambda: self.top_row(driver, queue),
                              timeout=20)
        data_id, message_cell, returns = first
        self.assertEqual(data_id, want_id, "the row's data-id")
        self.assertRegex(message_cell, r"^#[0-9a-f]{12}$", "identities hidden: # + 12 hex")
        self.assertEqual(message_cell, f"#{want_id}")
        self.assertGreaterEqual(returns, 2)
        meta = self.meta_text(driver)
        self.assertRegex(meta, r"updated \d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ")

        # The next refresh (every 3 s) redraws the row in place with more returns.
        later = self.wait_for("a refresh with more returns",
                              lambda: (lambda r: r if r and r[2] > returns else None)(
                                  self.top_row(driver, queue)), timeout=8)
        self.assertEqual(later[:2], first[:2], "the same message, the same id")
        self.assertGreater(later[2], returns)
        self.assertLessEqual(later[2], consumer.nacks, "more returns than nacks sent")
        self.assertNotEqual(self.meta_text(driver), meta, "#meta's updated time")
        self.assertFalse(driver.execute_script(
            "return getComputedStyle(document.getElementById('error')).display !== 'none'"),
            "#error is shown: " + driver.execute_script(
                "return document.getElementById('error').textContent"))

        page = driver.page_source
        self.assertNotIn(poison_id, page, "the message_id is on the page")
        self.assertNotIn(marker, page, "a message body is on the page")

        self.assertEqual(driver.execute_script("return location.origin"), origin)
        resources = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        self.assertTrue(any(url.startswith(f"{origin}/status.json") for url in resources),
                        f"no fetch of status.json among the resources: {resources}")
        outside = [url for url in resources if not url.startswith(origin + "/")]
        self.assertEqual(outside, [], "resources from outside the page's origin")
        requests = requested_urls(driver)
        self.assertIn(f"{origin}/status", requests)
        outside = [url for url in requests if not url.startswith(origin + "/")]
        self.assertEqual(outside, [], "requests outside the page's origin")

        os.makedirs(ARTIFACTS_DIR, exist_ok=True)
        self.assertTrue(driver.save_screenshot(SCREENSHOT), f"could not write {SCREENSHOT}")
        with open(SCREENSHOT, "rb") as f:
            head = f.read(24)
        self.assertEqual(head[:8], b"\x89PNG\r\n\x1a\n", f"{SCREENSHOT} is not a PNG")
        self.assertEqual(struct.unpack(">II", head[16:24]), (1400, 900), "screenshot size")
        print(f"\nscreenshot of /status: {SCREENSHOT}")


if __name__ == "__main__":
    import unittest
    unittest.main()
