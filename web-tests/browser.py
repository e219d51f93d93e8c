#!/usr/bin/env python3
"""The pages of `pchronicle serve`, tested the way a person meets them: in a
real, headless Chromium driven over WebDriver (chromium-driver).

Each check loads a page of the demo warehouse, waits for the rendered DOM
and compares it with what the CLI answers for the same path: the Datasets
children and counts, the Runs histogram's bars, a run's tool call and its
result, a SQL result, and the "other (N values)" line that ends a list the
API cut (roles, a facet's values). It clicks through Datasets -> Open in
Runs -> Run and saves a screenshot of every page. A hostile warehouse (names and records
that hold markup, script and `javascript:` links) must render as text and
run nothing.

Usage: browser.py PCHRONICLE_BINARY OUTPUT_DIR
Ends with a line `N passed, N failed`; exits 1 when any check failed.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException, TimeoutException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

BIN = os.path.abspath(sys.argv[1])
OUT = os.path.abspath(sys.argv[2])
os.makedirs(OUT, exist_ok=True)

# What a hostile writer names files and writes into records. Each payload,
# if it ran, would set window.__pwned (or raise an alert).
PAYLOADS = [
    "<script>window.__pwned=1</script>",
    "<img src=x onerror=\"window.__pwned=2\">",
    "\"><svg onload=window.__pwned=3>",
    "javascript:window.__pwned=4",
    "\u202eexe.jsonl",
]


def cli(*args):
    out = subprocess.run([BIN, *args], check=True, capture_output=True)
    return out.stdout.decode()


class Server:
    def __init__(self, warehouse):
        self.proc = subprocess.Popen(
            [BIN, "serve", warehouse, "--listen", "127.0.0.1:0", "--no-cache"],
            stdout=subprocess.PIPE,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        line = self.proc.stdout.readline().decode()
        self.url = next(w for w in line.split() if w.startswith("http://"))
        self.base = self.url.split("/#")[0]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)


def driver():
    options = webdriver.ChromeOptions()
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium:
        options.binary_location = chromium
    service = Service(executable_path=shutil.which("chromedriver"))
    return webdriver.Chrome(options=options, service=service)


def wait_for(browser, css, count=1, timeout=20):
    """The elements matching css, once there are at least count."""
    try:
        WebDriverWait(browser, timeout).until(
            lambda b: len(b.find_elements(By.CSS_SELECTOR, css)) >= count)
    except TimeoutException:
        raise AssertionError(f"no {count} x {css!r} on {browser.current_url}: "
                             f"{browser.find_element(By.TAG_NAME, 'body').text[:500]!r}")
    return browser.find_elements(By.CSS_SELECTOR, css)


def shot(browser, name):
    browser.save_screenshot(os.path.join(OUT, f"{name}.png"))


def no_script_ran(browser):
    try:
        alert = browser.switch_to.alert
        raise AssertionError(f"an alert opened: {alert.text!r}")
    except NoAlertPresentException:
        pass
    pwned = browser.execute_script("return window.__pwned === undefined ? null : window.__pwned")
    assert pwned is None, f"a payload ran: window.__pwned = {pwned}"


CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


@check
def datasets_show_the_same_children_and_counts_as_ls(ctx):
    b, server, wh = ctx["browser"], ctx["server"], ctx["demo"]
    b.get(server.url)  # the printed URL: the page keeps its #token
    for rel in ("", "team", "runs"):
        b.get(f"{server.base}/datasets?path={rel}")
        listing = json.loads(cli("ls", os.path.join(wh, rel), "--json"))
        rows = wait_for(b, "#entries tr.entry", len(listing["entries"]))
        shown = {r.get_attribute("data-name"): r for r in rows}
        assert sorted(shown) == sorted(e["name"] for e in listing["entries"]), (rel, sorted(shown))
        for entry in listing["entries"]:
            row = shown[entry["name"]]
            assert row.get_attribute("data-kind") == entry["kind"], entry
            if entry["kind"] == "dataset" and entry["record_count"] is not None:
                records = row.find_element(By.CSS_SELECTOR, "td.records").text.replace(",", "")
                assert records == str(entry["record_count"]), (entry["name"], records)
        stats = json.loads(cli("stats", os.path.join(wh, rel), "--json"))
        shown_records = wait_for(b, "#stats-records")[0].text.replace(",", "")
        assert shown_records == str(stats["record_count"]), (rel, shown_records)
        shot(b, f"datasets-{rel or 'root'}")


@check
def the_json_twin_link_carries_no_token_and_opens_the_answer(ctx):
    b, server = ctx["browser"], ctx["server"]
    token = server.url.split("#token=")[1]
    b.get(f"{server.base}/datasets?path=team")
    wait_for(b, "#entries tr.entry")
    twin = b.find_element(By.CSS_SELECTOR, "a#json-twin")
    href = twin.get_attribute("href")
    assert "token" not in href and token not in href, href
    assert all(token not in (a.get_attribute("href") or "") for a in b.find_elements(By.TAG_NAME, "a"))
    main, before = b.current_window_handle, set(b.window_handles)
    twin.click()
    WebDriverWait(b, 10).until(lambda b: len(set(b.window_handles) - before) == 1)
    b.switch_to.window((set(b.window_handles) - before).pop())
    WebDriverWait(b, 10).until(lambda b: b.current_url.startswith("blob:"))
    assert token not in b.current_url, b.current_url
    text = b.find_element(By.TAG_NAME, "body").text
    assert '"entries"' in text, text[:300]
    b.close()
    b.switch_to.window(main)


@check
def a_directory_navigates_and_open_in_runs_keeps_the_path(ctx):
    b, server = ctx["browser"], ctx["server"]
    b.get(f"{server.base}/datasets?path=")
    link = next(r for r in wait_for(b, "#entries tr.entry")
                if r.get_attribute("data-name") == "sessions").find_element(By.TAG_NAME, "a")
    link.click()
    WebDriverWait(b, 10).until(lambda b: "path=sessions" in b.current_url)
    wait_for(b, "#entries tr.entry")
    b.find_element(By.CSS_SELECTOR, "a#open-in-runs").click()
    WebDriverWait(b, 10).until(lambda b: "/runs" in b.current_url and "sessions" in b.current_url)
    runs = wait_for(b, "#runs .run[data-run]")
    names = sorted(r.get_attribute("data-run") for r in runs)
    assert "agent-a" in names or "sessions/agent-a" in names or any(n.endswith("agent-a") for n in names), names
    shot(b, "runs-sessions")


@check
def the_runs_histogram_has_a_bar_per_day_with_records(ctx):
    b, server, wh = ctx["browser"], ctx["server"], ctx["demo"]
    b.get(f"{server.base}/runs?path=")
    bars = wait_for(b, "svg#histogram rect.bar")
    days = {}
    for line in cli("cat", wh, "--annotate", "--failed").splitlines():
        ts = json.loads(line)["timestamp"]
        if ts:
            days[ts[:10]] = days.get(ts[:10], 0) + 1
    shown = {bar.get_attribute("data-start")[:10]: int(bar.get_attribute("data-records")) for bar in bars}
    assert shown == days, (shown, days)
    shot(b, "runs-root")


@check
def a_run_reads_as_a_conversation_with_tool_calls_and_results(ctx):
    b, server = ctx["browser"], ctx["server"]
    b.get(f"{server.base}/runs?path=&flat=1")
    run = next(r for r in wait_for(b, "#runs .run[data-run]")
               if r.get_attribute("data-run").endswith("s-0001.jsonl"))
    run.find_element(By.TAG_NAME, "a").click()
    WebDriverWait(b, 10).until(lambda b: "/run?" in b.current_url)
    turns = wait_for(b, "#conversation .turn", 12)
    assert len(turns) == 12, len(turns)
    call = wait_for(b, "#conversation .tool-call")[0]
    assert call.find_element(By.CSS_SELECTOR, ".tool-name").text.strip() in ("shell", "read_file", "search"), call.text
    result = wait_for(b, "#conversation .tool-result")[0]
    assert result.text.strip(), "a tool result shows its output"
    roles = {t.get_attribute("data-role") for t in turns}
    assert {"user", "assistant"} <= roles, roles
    toggle = turns[0].find_element(By.CSS_SELECTOR, "button.raw-toggle")
    toggle.click()
    raw = wait_for(b, "#conversation pre.raw")[0]
    assert "s-0001-0000" in raw.text, raw.text
    # Every record is on the page: nothing more to load is offered.
    assert not b.find_element(By.ID, "more").is_displayed()
    shot(b, "run-s-0001")


@check
def claude_code_codex_and_atif_runs_read_as_conversations(ctx):
    b, server = ctx["browser"], ctx["server"]
    # (run, prefix, turns shown): a Claude Code session over two shards, a
    # Codex rollout, and three ATIF trajectories of three steps each.
    for run_name, prefix, turns_shown in (("sessions/agent-a", "sessions", 9),
                                          ("sessions/agent-b", "sessions", 6),
                                          ("exports/highlights.json", "", 9)):
        b.get(f"{server.base}/runs?path={prefix}")
        run = next(r for r in wait_for(b, "#runs .run[data-run]")
                   if run_name.endswith(r.get_attribute("data-run")) or r.get_attribute("data-run").endswith(run_name))
        run.find_element(By.TAG_NAME, "a").click()
        WebDriverWait(b, 10).until(lambda b: "/run?" in b.current_url)
        turns = wait_for(b, "#conversation .turn", turns_shown)
        roles = [t.get_attribute("data-role") for t in turns]
        # Every record was recognised: none is left as plain JSON.
        assert "record" not in roles, (run_name, roles)
        assert {"user", "assistant"} <= set(roles), (run_name, roles)
        call = wait_for(b, "#conversation .tool-call")[0]
        assert call.find_element(By.CSS_SELECTOR, ".tool-name").text.strip() in ("shell", "read_file", "search"), call.text
        result = wait_for(b, "#conversation .tool-result")[0]
        assert result.text.strip(), (run_name, "a tool result shows its output")
        assert b.find_elements(By.CSS_SELECTOR, "#conversation .reasoning"), (run_name, "reasoning shows")
        shot(b, "run-" + run_name.replace("/", "-"))


@check
def a_reviewer_reads_each_runs_task_model_and_tool_figures_and_sorts_and_filters_on_them(ctx):
    b, server = ctx["browser"], ctx["server"]
    b.get(f"{server.base}/runs?path=&flat=1")
    wait_for(b, "#runs .run[data-run]")
    want = {r["run"]: r for r in api(server, "/api/runs?path=&limit=1000")["runs"]}
    for row in b.find_elements(By.CSS_SELECTOR, "#runs tr.run"):
        run = want[row.get_attribute("data-run")]
        cell = lambda cls: row.find_element(By.CSS_SELECTOR, f"td.{cls}").text
        assert (cell("steps"), cell("calls"), cell("errors")) == \
            (str(run["steps"]), str(run["tool_calls"]), str(run["tool_errors"])), run["run"]
        assert cell("model") == (run["model"] or "–"), (cell("model"), run["run"])
        task = row.find_elements(By.CSS_SELECTOR, ".run-task")
        assert (task[0].text if task else None) == run["task"], run["run"]
    atif = b.find_element(By.CSS_SELECTOR, '#runs tr.run[data-run="exports/highlights.json"]')
    assert atif.find_element(By.CSS_SELECTOR, "td.model").text == "gpt-5"
    shot(b, "runs-reviewer")
    # A model facet chooses the runs of that model; its chip undoes it.
    wait_for(b, '.facet[data-key="model"] button[data-value="gpt-5"]')[0].click()
    WebDriverWait(b, 20).until(lambda b: "model=gpt-5" in b.current_url)
    WebDriverWait(b, 20).until(lambda b: rows(b) == ["exports/highlights.json"])
    chip = wait_for(b, '#chips .chip[data-run-filter="model"]')[0]
    chip.find_element(By.TAG_NAME, "button").click()
    WebDriverWait(b, 20).until(lambda b: "model=" not in b.current_url and len(rows(b)) == len(want))
    # A column's heading sorts by it, in the server's order.
    b.find_element(By.CSS_SELECTOR, '#runs th a[data-sort="calls"]').click()
    WebDriverWait(b, 20).until(lambda b: "sort=calls" in b.current_url)
    by_calls = [r["run"] for r in api(server, "/api/runs?path=&sort=calls&limit=1000")["runs"]]
    WebDriverWait(b, 20).until(lambda b: rows(b) == by_calls)


@check
def a_failed_record_is_marked_with_its_raw_text(ctx):
    b, server = ctx["browser"], ctx["server"]
    b.get(server.url)
    b.get(f"{server.base}/runs?path=runs&flat=1")
    run = next(r for r in wait_for(b, "#runs .run[data-run]")
               if r.get_attribute("data-run").endswith("s-0002.ndjson"))
    run.find_element(By.TAG_NAME, "a").click()
    failed = wait_for(b, "#conversation .turn.failed-record")
    assert "s-00" in failed[0].text, failed[0].text
    shot(b, "run-failed-record")


@check
def a_sql_query_shows_its_rows_as_a_table(ctx):
    b, server, wh = ctx["browser"], ctx["server"], ctx["demo"]
    sql = "SELECT _file_, count(*) AS n FROM records GROUP BY _file_ ORDER BY _file_"
    b.get(f"{server.base}/sql?path=")
    box = wait_for(b, "textarea#sql")[0]
    box.clear()
    box.send_keys(sql)
    b.find_element(By.CSS_SELECTOR, "button#run-sql").click()
    expected = [json.loads(l) for l in cli("query", wh, sql, "--json").splitlines()]
    rows = wait_for(b, "table#sql-result tbody tr", len(expected))
    cells = [[td.text for td in r.find_elements(By.TAG_NAME, "td")] for r in rows]
    assert cells == [[str(row["_file_"]), str(row["n"])] for row in expected], cells[:3]
    shot(b, "sql")


@check
def a_hostile_warehouse_renders_as_text_and_runs_nothing(ctx):
    b = ctx["browser"]
    server = ctx["hostile_server"]
    b.get(server.url)
    for page in ("datasets", "runs"):
        b.get(f"{server.base}/{page}?path=")
        if page == "datasets":
            rows = wait_for(b, "#entries tr.entry", len(PAYLOADS))
            names = {r.get_attribute("data-name") for r in rows}
            for payload in PAYLOADS[:3]:
                named = payload.replace("/", "_")  # as the file was named
                assert any(named in n for n in names), (named, names)
            body = b.find_element(By.TAG_NAME, "body").text
            assert "<script>" in body, "the markup shows as text"
        else:
            wait_for(b, "#runs .run[data-run]")
            # The task, model and outcome a writer chose are text too.
            tasks = [t.text for t in b.find_elements(By.CSS_SELECTOR, "#runs .run-task")]
            models = [t.text for t in b.find_elements(By.CSS_SELECTOR, "#runs td.model")]
            assert any("<script>" in t for t in tasks), tasks
            assert any("<script>" in t for t in models), models
            facet = wait_for(b, '.facet[data-key="model"] button.facet-value')
            assert any("<img" in f.text for f in facet), [f.text for f in facet]
        links = [a.get_attribute("href") or "" for a in b.find_elements(By.TAG_NAME, "a")]
        assert not any(h.lower().startswith(("javascript:", "data:")) for h in links), links
        time.sleep(0.5)
        no_script_ran(b)
        shot(b, f"hostile-{page}")
    b.get(f"{server.base}/runs?path=")
    run = wait_for(b, "#runs .run[data-run]")[0]
    run.find_element(By.TAG_NAME, "a").click()
    wait_for(b, "#conversation .turn")
    links = [a.get_attribute("href") or "" for a in b.find_elements(By.TAG_NAME, "a")]
    assert not any(h.lower().startswith(("javascript:", "data:")) for h in links), links
    time.sleep(0.5)
    no_script_ran(b)
    shot(b, "hostile-run")
    # Two of its runs compared, and a search's marks, show it as text too.
    b.get(f"{server.base}/runs?path=")
    picks = wait_for(b, "#runs input.pick", 2)
    picks[0].click()
    picks[1].click()
    b.find_element(By.CSS_SELECTOR, "#compare-picked").click()
    names = [n.text for n in wait_for(b, "#compare-pairs .tool-call .tool-name", 2)]
    assert any("<" in n for n in names), names
    time.sleep(0.5)
    no_script_ran(b)
    shot(b, "hostile-compare")
    b.get(f"{server.base}/runs?path=")
    run = wait_for(b, "#runs .run[data-run]")[0]
    b.get(run.find_element(By.CSS_SELECTOR, "td.run-name a").get_attribute("href") + "&contains=" +
          urllib.parse.quote("<script>"))
    marks = wait_for(b, "mark.hit")
    assert all(m.text == "<script>" for m in marks), [m.text for m in marks]
    time.sleep(0.5)
    no_script_ran(b)


@check
def a_list_the_api_cut_ends_in_an_other_line(ctx):
    b, server = ctx["browser"], ctx["many_server"]
    b.get(server.url)
    b.get(f"{server.base}/runs?path=")
    request = urllib.request.Request(f"{server.base}/api/runs/summary?path=",
                                     headers={"Authorization": "Bearer " + server.url.split("#token=")[1]})
    with urllib.request.urlopen(request, timeout=20) as reply:
        answer = json.load(reply)
    # 250 roles of a record each and "assistant" of three: the 100 kept
    # are "assistant" and the first 99 by name.
    roles = answer["other"]["roles"]
    assert roles == {"values": 151, "records": 151}, roles
    other = wait_for(b, "#roles li.role.other")[0]
    assert f"other ({roles['values']} values)" in other.text, other.text
    assert other.find_element(By.CSS_SELECTOR, ".count").text == str(roles["records"]), other.text
    assert len(b.find_elements(By.CSS_SELECTOR, "#roles li.role:not(.other)")) == 100
    # The facet's line is inside its folded "more" list: read, not seen.
    values = wait_for(b, '.facet[data-key="d"] li.other')[0]
    assert values.get_attribute("data-values") == "30", values.get_attribute("outerHTML")
    assert "other (30 values)" in values.get_attribute("textContent"), values.get_attribute("textContent")
    shot(b, "runs-cut")


def api(server, path):
    return json.loads(fetch_text(server, path))


def rows(browser):
    return browser.execute_script(
        "return Array.from(document.querySelectorAll('#runs tr.run'), r => r.getAttribute('data-run'))")


@check
def twenty_thousand_runs_are_drawn_a_page_at_a_time_as_the_reader_scrolls(ctx):
    b, server = ctx["browser"], ctx["runs_server"]
    b.get(server.url)
    started = time.monotonic()
    b.get(f"{server.base}/runs?path=&flat=1")
    wait_for(b, "#runs tr.run", 1, timeout=120)
    first_rows = time.monotonic() - started
    first = rows(b)
    assert len(first) == 200, len(first)
    WebDriverWait(b, 60).until(
        lambda b: b.find_element(By.CSS_SELECTOR, "#runs-summary").get_attribute("data-runs") == str(RUNS))
    assert first == sorted(first), "by name"
    shot(b, "runs-20000")
    # Scrolling to the end of the table draws the next pages, each once.
    for _ in range(40):
        b.execute_script("document.querySelector('#runs-more').scrollIntoView()")
        time.sleep(0.3)
        if len(rows(b)) >= 1000:
            break
    drawn = rows(b)
    assert len(drawn) >= 1000, len(drawn)
    assert len(drawn) == len(set(drawn)), "no run twice"
    assert drawn == sorted(drawn), "pages join in order"
    want = [r["run"] for r in api(server, "/api/runs?path=&limit=1000")["runs"]]
    assert drawn[:1000] == want, "the server's order"
    # At 5,000 rows the page stops; moving on draws the next runs in place
    # of those.
    more = b.find_element(By.CSS_SELECTOR, "#runs-more")
    started, read, moved = time.monotonic(), 0, time.monotonic()
    while more.get_attribute("data-state") == "scroll" and time.monotonic() - moved < 30:
        b.execute_script("document.querySelector('#runs-more').scrollIntoView()")
        time.sleep(0.1)
        now = int(more.get_attribute("data-read"))
        if now > read:
            read, moved = now, time.monotonic()
    print(f"     5,000 rows drawn by scrolling in {time.monotonic() - started:.1f} s")
    assert more.get_attribute("data-state") == "bound", more.get_attribute("outerHTML")
    held = rows(b)
    assert len(held) == 5000, len(held)
    b.find_element(By.CSS_SELECTOR, "#runs-next").click()
    WebDriverWait(b, 30).until(lambda b: int(more.get_attribute("data-read")) > 5000)
    after = rows(b)
    assert 0 < len(after) <= 200 and after[0] > held[-1], (len(after), after[:1], held[-1:])
    # Another order is the server's too.
    Select(b.find_element(By.CSS_SELECTOR, "#sort")).select_by_value("newest")
    WebDriverWait(b, 30).until(lambda b: "sort=newest" in b.current_url)
    WebDriverWait(b, 60).until(lambda b: len(rows(b)) >= 200)
    newest = [r["run"] for r in api(server, "/api/runs?path=&sort=newest&limit=200")["runs"]]
    assert rows(b)[:200] == newest
    print(f"     20,000 runs: first rows {first_rows:.1f} s after navigation (cold server)")


RUNS = 20_000


@check
def directories_below_the_first_level_start_folded_with_their_counts(ctx):
    b, server = ctx["browser"], ctx["runs_server"]
    b.get(server.url)
    b.get(f"{server.base}/runs?path=")
    groups = wait_for(b, "#runs tr.group", 60, timeout=120)
    assert len(groups) == 60 and not rows(b), (len(groups), rows(b)[:3])
    counts = {g.get_attribute("data-group"): int(g.get_attribute("data-runs")) for g in groups}
    assert sum(counts.values()) == RUNS, sum(counts.values())
    assert list(counts) == sorted(counts), "groups in name order"
    shot(b, "runs-groups")
    # A group unfolds a page of its runs at a time, and folds again.
    name = "agent=a1/day=2026-11-02/"
    group = b.find_element(By.CSS_SELECTOR, f'#runs tr.group[data-group="{name}"]')
    group.find_element(By.CSS_SELECTOR, "button.group-toggle").click()
    WebDriverWait(b, 30).until(lambda b: len(rows(b)) == 200)
    assert all(r.startswith(name) for r in rows(b)), rows(b)[:3]
    b.find_element(By.CSS_SELECTOR, "button.group-next").click()
    WebDriverWait(b, 30).until(lambda b: len(rows(b)) == counts[name])
    want = [r["run"] for r in api(server, f"/api/runs?path=&group={urllib.parse.quote(name)}&limit=1000")["runs"]]
    assert rows(b) == want, "the group's runs in the server's order"
    assert not b.find_elements(By.CSS_SELECTOR, "button.group-next")
    group.find_element(By.CSS_SELECTOR, "button.group-toggle").click()
    WebDriverWait(b, 10).until(lambda b: not rows(b))
    # Every run, without groups, on request.
    b.find_element(By.CSS_SELECTOR, "#runs-grouping a").click()
    WebDriverWait(b, 30).until(lambda b: "flat=1" in b.current_url and len(rows(b)) >= 200)
    assert not b.find_elements(By.CSS_SELECTOR, "#runs tr.group")


@check
def a_run_address_that_names_no_run_says_so(ctx):
    b, server = ctx["browser"], ctx["server"]
    b.get(f"{server.base}/run?path=sessions")
    note = wait_for(b, "#no-run")[0]
    assert "names no run" in note.text, note.text
    assert not b.find_elements(By.CSS_SELECTOR, "#conversation .turn")
    note.find_element(By.TAG_NAME, "a").click()
    WebDriverWait(b, 10).until(lambda b: "/runs?" in b.current_url and "sessions" in b.current_url)
    wait_for(b, "#runs tr.run")


def run_url(server, path, run, file=None):
    q = urllib.parse.urlencode({"path": path, "run": run, "file": file or run})
    return f"{server.base}/run?{q}"


def current_record(browser):
    return browser.execute_script(
        "const c = document.querySelector('#conversation > .current'); return c ? Number(c.dataset.record) : null")


@check
def two_ticked_runs_are_compared_step_by_step(ctx):
    b, server = ctx["browser"], ctx["server"]
    b.get(server.url)
    b.get(f"{server.base}/runs?path=sessions")
    wait_for(b, "#runs tr.run")
    for name in ("agent-a", "agent-b"):
        b.find_element(By.CSS_SELECTOR, f'#runs tr.run[data-run="{name}"] input.pick').click()
    button = b.find_element(By.CSS_SELECTOR, "#compare-picked")
    assert button.is_enabled(), "two ticked runs can be compared"
    button.click()
    WebDriverWait(b, 10).until(lambda b: "/compare?" in b.current_url)
    want = api(server, "/api/compare?path=sessions&a=agent-a&b=agent-b")
    pairs = wait_for(b, "#compare-pairs tr.pair", len(want["pairs"]))
    assert len(pairs) == len(want["pairs"]) > 0, (len(pairs), len(want["pairs"]))
    for row, pair in zip(pairs, want["pairs"]):
        differs = pair["calls_differ"] or pair["results_differ"]
        assert ("differs" in row.get_attribute("class")) == differs, (pair["step"], row.get_attribute("class"))
        for side in ("a", "b"):
            cell = row.find_element(By.CSS_SELECTOR, f"td.side-{side}")
            if pair[side] is None:
                assert "no such step" in cell.text
                continue
            names = [n.text for n in cell.find_elements(By.CSS_SELECTOR, ".tool-call .tool-name")]
            assert names == [c["name"] for c in pair[side]["calls"]], (pair["step"], side, names)
    figures = {r.get_attribute("data-figure"): r for r in b.find_elements(By.CSS_SELECTOR, "#compare-figures tbody tr")}
    assert figures["Model"].find_elements(By.TAG_NAME, "td")[0].text == (want["a"]["summary"]["model"] or "–")
    shot(b, "compare")
    # Only the steps that differ, when asked.
    b.find_element(By.CSS_SELECTOR, "#only-differing").click()
    shown = [r for r in pairs if r.is_displayed()]
    assert len(shown) == sum(1 for p in want["pairs"] if p["calls_differ"] or p["results_differ"]), len(shown)
    b.find_element(By.CSS_SELECTOR, "#only-differing").click()
    # A step links to its record on the Run page, marked there.
    step = want["pairs"][1]["b"] or want["pairs"][0]["b"]
    link = pairs[1 if want["pairs"][1]["b"] else 0].find_element(By.CSS_SELECTOR, "td.side-b a.step-link")
    link.click()
    WebDriverWait(b, 10).until(lambda b: "/run?" in b.current_url and b.current_url.endswith(f"#L{step['record']}"))
    WebDriverWait(b, 10).until(lambda b: current_record(b) == step["record"])


@check
def a_long_run_is_read_by_record_links_keys_marks_and_download(ctx):
    b, server = ctx["browser"], ctx["long_server"]
    b.get(server.url)
    b.get(f"{server.base}/runs?path=")
    assert wait_for(b, "#runs tr.run", 3) and rows(b) == ["a.jsonl", "b.jsonl", "c.jsonl"], rows(b)
    b.find_element(By.CSS_SELECTOR, '#runs tr.run[data-run="b.jsonl"] td.run-name a').click()
    WebDriverWait(b, 10).until(lambda b: "/run?" in b.current_url)
    wait_for(b, "#conversation > [data-record]", 200)
    # A link to a record past the first page reads up to it and marks it.
    b.get(run_url(server, "", "b.jsonl") + "#L320")
    WebDriverWait(b, 20).until(lambda b: current_record(b) == 320)
    top = b.execute_script("return document.querySelector('#L320').getBoundingClientRect().top")
    assert 0 <= top < 300, f"record 320 is scrolled to (top {top})"
    # j and k move between records, and the address follows.
    body = b.find_element(By.TAG_NAME, "body")
    body.send_keys("j")
    WebDriverWait(b, 5).until(lambda b: current_record(b) == 321 and b.current_url.endswith("#L321"))
    body.send_keys("kk")
    WebDriverWait(b, 5).until(lambda b: current_record(b) == 319)
    # A record's link button copies its address.
    b.execute_script("navigator.clipboard.writeText = (t) => { window.__copied = t; return Promise.resolve(); }")
    link = b.find_element(By.CSS_SELECTOR, "#L12 button.record-link")
    b.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
    link.click()
    copied = WebDriverWait(b, 5).until(lambda b: b.execute_script("return window.__copied || null"))
    assert copied.endswith("#L12") and "/run?" in copied, copied
    # / searches: every match of the records read is marked, and the next
    # match is unfolded and scrolled to.
    body.send_keys("/")
    assert b.switch_to.active_element.get_attribute("id") == "run-search"
    b.switch_to.active_element.send_keys("needle\n")
    WebDriverWait(b, 10).until(lambda b: "contains=needle" in b.current_url)
    loaded = len(wait_for(b, "#conversation > [data-record]", 200))
    expected = sum(1 for i in NEEDLES if i <= loaded)
    WebDriverWait(b, 10).until(lambda b: len(b.find_elements(By.CSS_SELECTOR, "mark.hit")) == expected)
    count = b.find_element(By.CSS_SELECTOR, "#match-count")
    assert count.get_attribute("data-matches") == str(expected), count.text
    b.find_element(By.CSS_SELECTOR, "#match-next").click()
    b.find_element(By.CSS_SELECTOR, "#match-next").click()
    at = b.find_element(By.CSS_SELECTOR, "mark.hit.at")
    assert at.is_displayed()
    folded = b.execute_script("return arguments[0].closest('.collapsed') !== null", at)
    assert not folded, "the match's folded output is unfolded"
    assert b.execute_script("return arguments[0].closest('[data-record]').dataset.record", at) == "105"
    shot(b, "run-long-marks")
    # Download saves the run's /api/records bytes.
    b.execute_script("""
        const made = URL.createObjectURL.bind(URL);
        URL.createObjectURL = (blob) => { blob.text().then((t) => { window.__saved = t; }); return made(blob); };""")
    b.find_element(By.CSS_SELECTOR, "#download").click()
    saved = WebDriverWait(b, 20).until(lambda b: b.execute_script("return window.__saved || null"))
    want = fetch_text(server, "/api/records?path=&file=b.jsonl&limit=10000")
    assert saved == want and saved.count("\n") == LONG_RECORDS, (len(saved), len(want))
    # n and p walk the list the reader came from.
    body = b.find_element(By.TAG_NAME, "body")
    body.send_keys("n")
    WebDriverWait(b, 10).until(lambda b: "run=c.jsonl" in b.current_url)
    wait_for(b, "#conversation > [data-record]")
    b.find_element(By.TAG_NAME, "body").send_keys("p")
    WebDriverWait(b, 10).until(lambda b: "run=b.jsonl" in b.current_url)
    wait_for(b, "#conversation > [data-record]")
    b.find_element(By.TAG_NAME, "body").send_keys("p")
    WebDriverWait(b, 10).until(lambda b: "run=a.jsonl" in b.current_url)


def fetch_text(server, path):
    request = urllib.request.Request(f"{server.base}{path}",
                                     headers={"Authorization": "Bearer " + server.url.split("#token=")[1]})
    with urllib.request.urlopen(request, timeout=60) as reply:
        return reply.read().decode()


LONG_RECORDS = 450
# The records (counted from 1) of the long run that say "needle".
NEEDLES = [5, 105, 205, 305, 405]


def long_run_warehouse(root):
    """Three runs; b.jsonl has LONG_RECORDS records, NEEDLES say needle,
    and record 105 says it on line 55 of a 60-line tool output."""
    wh = os.path.join(root, "long")
    os.makedirs(wh)
    for name in ("a.jsonl", "c.jsonl"):
        with open(os.path.join(wh, name), "w") as f:
            f.write(json.dumps({"role": "user", "content": "short " + name}) + "\n")
    with open(os.path.join(wh, "b.jsonl"), "w") as f:
        for i in range(1, LONG_RECORDS + 1):
            if i == 105:
                lines = [f"line {n}" for n in range(1, 61)]
                lines[54] = "line 55 has the needle"
                record = {"role": "tool", "tool_call_id": "c", "content": "\n".join(lines)}
            elif i % 2:
                record = {"role": "assistant", "content": f"turn {i}" + (" needle" if i in NEEDLES else "")}
            else:
                record = {"role": "user", "content": f"go on {i}" + (" needle" if i in NEEDLES else "")}
            f.write(json.dumps(record) + "\n")
    return wh


def many_runs_warehouse(root):
    """RUNS runs of two records (benches/fixtures.py makes them)."""
    wh = os.path.join(root, "runs")
    fixtures = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benches", "fixtures.py")
    subprocess.run([sys.executable, fixtures, "runs", wh, str(RUNS)], check=True)
    return wh


def many_values_warehouse(root):
    """250 roles and 130 values of one facet: more than the API keeps."""
    wh = os.path.join(root, "many")
    os.makedirs(wh)
    with open(os.path.join(wh, "roles.jsonl"), "w") as f:
        for i in range(250):
            f.write(json.dumps({"role": f"r{i:03}", "ts": "2026-11-02T09:00:00Z"}) + "\n")
        for _ in range(3):
            f.write(json.dumps({"role": "assistant", "ts": "2026-11-02T09:00:00Z"}) + "\n")
    for i in range(130):
        os.makedirs(os.path.join(wh, f"d=v{i:03}"))
        with open(os.path.join(wh, f"d=v{i:03}", "a.jsonl"), "w") as f:
            f.write("{\"n\":1}\n")
    return wh


def hostile_warehouse(root):
    wh = os.path.join(root, "hostile")
    os.makedirs(wh)
    for i, payload in enumerate(PAYLOADS):
        name = payload.replace("/", "_") + ("" if payload.endswith(".jsonl") else f".{i}.jsonl")
        record = {"role": "assistant", "ts": "2026-11-02T10:00:00Z", "model": payload, "finish_reason": payload,
                  "content": f"see {payload} and [x](javascript:alert(1)) and data:text/html,<script>1</script>",
                  "tool_calls": [{"id": "c1", "type": "function",
                                  "function": {"name": payload, "arguments": json.dumps({"url": "javascript:alert(2)"})}}]}
        with open(os.path.join(wh, name), "w") as f:
            f.write(json.dumps({"role": "user", "content": payload, "ts": "2026-11-02T09:00:00Z"}) + "\n")
            f.write(json.dumps(record) + "\n")
    with open(os.path.join(wh, "x" * 200 + ".jsonl"), "w") as f:
        f.write("{\"role\":\"user\",\"content\":\"long name\"}\n")
    return wh


def main():
    root = tempfile.mkdtemp(prefix="pchronicle-browser-")
    demo = os.path.join(root, "demo")
    cli("demo", demo)
    ctx = {"demo": demo, "server": Server(demo), "hostile_server": Server(hostile_warehouse(root)),
           "many_server": Server(many_values_warehouse(root)),
           "runs_server": Server(many_runs_warehouse(root)),
           "long_server": Server(long_run_warehouse(root))}
    passed = failed = 0
    browser = driver()
    ctx["browser"] = browser
    try:
        only = os.environ.get("PCHRONICLE_BROWSER_ONLY", "")
        for fn in CHECKS:
            if only not in fn.__name__:
                continue
            try:
                fn(ctx)
                print(f"ok   {fn.__name__}")
                passed += 1
            except Exception:
                print(f"FAIL {fn.__name__}")
                traceback.print_exc()
                shot(browser, f"FAILED-{fn.__name__}")
                failed += 1
    finally:
        browser.quit()
        ctx["server"].stop()
        ctx["hostile_server"].stop()
        ctx["many_server"].stop()
        ctx["runs_server"].stop()
        ctx["long_server"].stop()
        shutil.rmtree(root, ignore_errors=True)
    print(f"screenshots in {OUT}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
