"""The Runs page of a warehouse of many runs, in headless Chromium: how
long after navigation the first rows are drawn (the server warm: the
page was drawn once, its tallies are kept, its answers are not), how
many rows the page holds after the reader scrolled to the end again and
again (every run, without groups: `flat=1`), Chromium's JS heap then,
and how long the page as it opens (directories below the first level
folded) takes to draw its first groups.

Usage: runs_page.py BASE_URL TOKEN
Prints one line:
"<first rows ms> <most rows> <JS heap MiB> <runs read> <first groups ms>".
"""

import shutil
import sys
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

base, token = sys.argv[1], sys.argv[2]
options = webdriver.ChromeOptions()
for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--window-size=1400,1000", "--enable-precise-memory-info", "--js-flags=--expose-gc"):
    options.add_argument(flag)
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if chromium:
    options.binary_location = chromium
browser = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
count_rows = "return document.querySelectorAll('#runs tr.run').length"
try:
    browser.get(f"{base}/datasets?path=#token={token}")
    WebDriverWait(browser, 60).until(lambda b: b.find_elements(By.CSS_SELECTOR, "#entries tr.entry"))
    # Warm: the page's answers made once (its tallies are kept), then
    # past the server's 2 s TTL, so each answer is planned again.
    count_groups = "return document.querySelectorAll('#runs tr.group').length"
    browser.get(f"{base}/runs?path=")
    WebDriverWait(browser, 600).until(lambda b: b.execute_script(count_groups) > 0)
    WebDriverWait(browser, 600).until(lambda b: b.find_elements(By.CSS_SELECTOR, "svg#histogram"))
    browser.get(f"{base}/runs?path=&flat=1")
    WebDriverWait(browser, 600).until(lambda b: b.execute_script(count_rows) > 0)
    browser.get(f"{base}/datasets?path=")
    time.sleep(2.5)
    started = time.monotonic()
    browser.get(f"{base}/runs?path=")
    WebDriverWait(browser, 120, poll_frequency=0.01).until(lambda b: b.execute_script(count_groups) > 0)
    groups_ms = (time.monotonic() - started) * 1000
    browser.get(f"{base}/datasets?path=")
    time.sleep(2.5)
    started = time.monotonic()
    browser.get(f"{base}/runs?path=&flat=1")
    WebDriverWait(browser, 120, poll_frequency=0.01).until(lambda b: b.execute_script(count_rows) > 0)
    first_ms = (time.monotonic() - started) * 1000
    most = 0

    def to_the_bound(seconds):
        """Scrolls to the table's end until the page stops at its bound."""
        global most
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            browser.execute_script("document.querySelector('#runs-more').scrollIntoView()")
            time.sleep(0.05)
            most = max(most, browser.execute_script(count_rows))
            state = browser.find_element(By.CSS_SELECTOR, "#runs-more").get_attribute("data-state")
            if state in ("bound", "end"):
                return state == "bound"
        return False

    # To the bound, then on past it once: the rows drawn stay within it.
    def runs_read():
        return int(browser.find_element(By.CSS_SELECTOR, "#runs-more").get_attribute("data-read") or 0)

    if to_the_bound(300):
        before = runs_read()
        browser.find_element(By.CSS_SELECTOR, "#runs-next").click()
        WebDriverWait(browser, 60).until(lambda b: runs_read() > before)
        to_the_bound(300)
    read = runs_read()
    browser.execute_script("window.gc && window.gc()")
    heap = browser.execute_script("return performance.memory.usedJSHeapSize") / (1 << 20)
    print(f"{first_ms:.0f} {most} {heap:.1f} {read} {groups_ms:.0f}")
finally:
    browser.quit()
