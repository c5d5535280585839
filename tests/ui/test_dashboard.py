"""The dashboard (SPEC §15) in a real headless browser.

Debian's chromium, driven by selenium through chromium-driver (both
installed by scripts/install-deps.sh), opens every page of `/ui` against a
running stack that this module starts and stops by PID: nats-server with
JetStream, two `sluice worker`s and a `sluice gateway --api-token
--api-read-token`. Known
traffic first, through the gateway's `/v1/allow`, under the policy `tenper`
(10 per 5 minutes, so nothing is forgotten while the test runs):

- ``alice``: 7 asks, all allowed;
- ``bob``: 3 asks;
- ``<script>alert(1)</script>``: 11 asks, 10 allowed and 1 denied (a 12th
  would be denied by the gateway's deny cache, never reaching a worker);
- the group ``acme`` (SPEC §17): ``acme/alice`` 4 asks under ``user`` (3
  its own limit, the 4th denied), ``acme/bob`` 1, ``acme/eng/carol`` 2
  under ``default``: its pool ``acme`` under ``org`` used 4, denied 1.

Then it checks what a person sees: the token gate (nothing but the login
page without the token; the cookie it sets is HttpOnly and SameSite=Strict),
the Content-Security-Policy of every page, the usage chart's points
(read from the SVG's data attributes) against `/v1/usage`, the order of the
top list by used and by denied, the hostile key shown as text (no script
element, no alert), the policies, a key's live state, the status page, the alerts page
(the hostile key reaching the thresholds of ``quota``, shown as text), the
group page reached from the top page (the org's usage, its members in
order, a member's usage), and, last, a read token's login: every page, but
no reset.
Every wait is a WebDriverWait on a DOM condition, never a sleep.

With SLUICE_UI_SCREENSHOT=PATH it saves the usage page as a PNG there (how
docs/dashboard.png is made: scripts/test-ui.sh --screenshot).

Run by scripts/test-ui.sh (at the end of scripts/test.sh), with SLUICE_BIN
and SLUICE_NATS_SERVER set.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

TOKEN = "ui-test-token"
READ_TOKEN = "ui-test-read-token"
HOSTILE = "<script>alert(1)</script>"
TRAFFIC = {"alice": 7, "bob": 3, HOSTILE: 11}
# A group's members: (key path, policy, asks, allowed).
GROUP_TRAFFIC = [("acme/alice", "user", 4, 3), ("acme/bob", "user", 1, 1),
                 ("acme/eng/carol", "default", 2, 2)]
LIMIT = 10
CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
CONFIG = """
partitions = 16
lease_ttl = "2s"
snapshot_interval = "500ms"

[policies.default]
algorithm = "sliding_window"
limits = [ { max = 15, per = "1s" } ]

[policies.tenper]
algorithm = "sliding_log"
limits = [ { max = 10, per = "5m" } ]

[policies.quota]
algorithm = "fixed_window"
limits = [ { max = 4, per = "1h" } ]
alerts = [ 50, 100 ]

[policies.org]
algorithm = "sliding_log"
limits = [ { max = 100, per = "5m" } ]

[policies.user]
algorithm = "sliding_log"
parent = "org"
limits = [ { max = 3, per = "5m" } ]
"""
START_WITHIN = 30.0
WAIT = 15.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def until(what: str, check, within: float = START_WITHIN):
    """Polls `check` (every 0.1 s) until it returns something true: for the
    stack's start, before any browser is involved."""
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        try:
            got = check()
            if got:
                return got
        except Exception as e:  # noqa: BLE001 - reported if it never works
            last = e
        time.sleep(0.1)
    raise AssertionError(f"{what} not within {within} s (last error: {last!r})")


class Stack:
    """nats-server, two workers and a gateway, each a child process stopped by
    its PID (SIGTERM, then SIGKILL after 10 s)."""

    def __init__(self, sluice: str, nats_server: str):
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-ui-"))
        self.sluice = sluice
        self.procs: list[subprocess.Popen] = []
        try:
            self.start(nats_server)
        except BaseException:
            self.stop()  # what started so far: nothing outlives a failed start
            raise

    def start(self, nats_server: str):
        sluice = self.sluice
        config = self.dir / "sluice.toml"
        config.write_text(CONFIG)
        nats_port, http_port = free_port(), free_port()
        self.nats_url = f"nats://127.0.0.1:{nats_port}"
        self.base = f"http://127.0.0.1:{http_port}"
        conf = self.dir / "nats.conf"
        conf.write_text(subprocess.run([sluice, "nats-config", "--config", str(config)], check=True,
                                       capture_output=True, text=True).stdout)
        self.spawn("nats-server", [nats_server, "-c", str(conf), "-a", "127.0.0.1", "-p", str(nats_port),
                                   "-js", "-sd", str(self.dir / "js")])
        until("nats-server", lambda: socket.create_connection(("127.0.0.1", nats_port), 0.5).close() or True)
        env = self.env = {**os.environ, "SLUICE_NATS_URL": self.nats_url, "SLUICE_CONFIG": str(config)}
        for i in range(2):
            self.spawn(f"worker-{i}", [sluice, "worker", "--worker-id", f"ui{i}"], env)
        self.spawn("gateway", [sluice, "gateway", "--listen", f"127.0.0.1:{http_port}"],
                   {**env, "SLUICE_API_TOKEN": TOKEN, "SLUICE_API_READ_TOKEN": READ_TOKEN})
        until("the workers to own every partition", self.settled)
        until("the gateway", lambda: urllib.request.urlopen(self.base + "/healthz", timeout=2).status == 200)

    def spawn(self, name: str, args: list[str], env=None):
        log = open(self.dir / f"{name}.log", "w")
        self.procs.append(subprocess.Popen(args, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                           env=env or os.environ))

    def settled(self) -> bool:
        out = subprocess.run([self.sluice, "status", "--json"], env=self.env,
                             capture_output=True, text=True, timeout=10)
        if out.returncode != 0:
            return False
        status = json.loads(out.stdout)
        answering = [sum(p["answering"] for p in w["partitions"]) for w in status["workers"]]
        return not status["unowned"] and len(answering) == 2 and sum(answering) == 16

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def call(self, path: str, token: str | None = TOKEN, method: str = "GET"):
        """(status, headers, body) of one request, redirects not followed."""
        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None
        req = urllib.request.Request(self.base + path, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.build_opener(NoRedirect).open(req, timeout=10) as r:
                return r.status, r.headers, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.headers, e.read().decode()


def quoted(key: str) -> str:
    return urllib.parse.quote(key, safe="")


@pytest.fixture(scope="module")
def stack():
    sluice, nats_server = os.environ.get("SLUICE_BIN"), os.environ.get("SLUICE_NATS_SERVER")
    assert sluice and nats_server, "run through scripts/test-ui.sh (SLUICE_BIN, SLUICE_NATS_SERVER)"
    s = Stack(sluice, nats_server)
    try:
        for key, asks in TRAFFIC.items():
            for i in range(asks):
                status, headers, body = s.call(f"/v1/allow/{quoted(key)}?policy=tenper", method="POST")
                assert status == (200 if i < LIMIT else 429), body
                assert headers["Sluice-Source"] == "worker", headers
        for path, policy, asks, allowed in GROUP_TRAFFIC:
            for i in range(asks):
                status, headers, body = s.call(f"/v1/allow/{path}?policy={policy}", method="POST")
                assert status == (200 if i < allowed else 429), body
                assert headers["Sluice-Source"] == "worker", headers
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,960"]:
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition, what: str):
    return WebDriverWait(driver, WAIT, poll_frequency=0.2).until(condition, message=what)


def test_without_the_token_only_the_login_page_is_served(stack, browser):
    for path in ["/ui", "/ui/top", "/ui/group?org=acme", "/ui/usage?key=alice", "/ui/key?key=alice",
                 "/ui/policies", "/ui/status", "/ui/alerts"]:
        status, headers, body = stack.call(path, token=None)
        assert status == 303 and headers["Location"].startswith("/ui/login"), (path, status)
        assert "alice" not in body
        status, _, _ = stack.call(path, token="wrong")
        assert status == 303, path
    status, _, _ = stack.call("/ui/key/reset", token=None, method="POST")
    assert status == 401
    browser.get(stack.base + "/ui/top?by=denied")
    wait(browser, lambda d: "/ui/login" in d.current_url, "the login page")
    assert not browser.find_elements(By.CSS_SELECTOR, "table.top")
    browser.find_element(By.NAME, "token").send_keys("not the token")
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "p.error"), "a refusal")
    assert browser.get_cookie("sluice_ui") is None
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "table.top"), "the page asked for")
    assert "/ui/top?by=denied" in browser.current_url
    cookie = browser.get_cookie("sluice_ui")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict", cookie
    assert TOKEN not in cookie["value"]


def test_every_page_carries_the_content_security_policy(stack):
    for path in ["/ui/login", "/ui/top", "/ui/group?org=acme", "/ui/usage?key=alice&policy=tenper", "/ui/key?key=alice",
                 "/ui/policies", "/ui/status", "/ui/alerts", "/ui/assets/style.css", "/ui/nowhere"]:
        status, headers, body = stack.call(path)
        assert status in (200, 404), (path, status, body)
        assert headers["Content-Security-Policy"] == CSP, path
        assert headers["X-Content-Type-Options"] == "nosniff", path
        assert "<script" not in body.lower(), path


def test_the_usage_chart_holds_the_counted_points(stack, browser):
    url = f"{stack.base}/ui/usage?key=alice&policy=tenper&last=15m"

    def counted(d):
        d.get(url)
        svg = d.find_elements(By.CSS_SELECTOR, "svg.chart")
        return svg and svg[0].get_attribute("data-used") == "7" and svg[0]

    svg = wait(browser, counted, "the chart to hold alice's 7 units")
    drawn = [(int(g.get_attribute("data-t-ms")), int(g.get_attribute("data-used")), int(g.get_attribute("data-denied")))
             for g in svg.find_elements(By.CSS_SELECTOR, "g.point")]
    assert sum(u for _, u, _ in drawn) == 7 and sum(d for _, _, d in drawn) == 0
    # The same range through the JSON API: the same points, value for value.
    steps = [int(g.get_attribute("data-step-ms")) for g in svg.find_elements(By.CSS_SELECTOR, "g.point")]
    assert set(steps) == {60_000}, "15 minutes are drawn at 1m"
    first, last = drawn[0][0], drawn[-1][0] + 60_000
    _, _, body = stack.call(f"/v1/usage/alice?policy=tenper&from={first}&to={last}&step=1m")
    api = [(p["t_ms"], p["used"], p["denied"]) for p in json.loads(body)["points"]]
    assert api == drawn
    assert len(drawn) == int(svg.get_attribute("data-points")) >= 15
    # A bar is a link that zooms in around it: 5 minutes (a quarter of 15,
    # at least 5) around the bar's middle.
    bar = svg.find_elements(By.CSS_SELECTOR, "a")[len(drawn) // 2]
    query = urllib.parse.parse_qs(urllib.parse.urlparse(bar.get_dom_attribute("href")).query)
    frm, to = int(query["from"][0]), int(query["to"][0])
    assert to - frm == 300_000 and frm <= drawn[len(drawn) // 2][0] + 30_000 <= to
    bar.click()
    zoomed = wait(browser, lambda d: "from=" in d.current_url and d.find_elements(By.CSS_SELECTOR, "svg.chart"),
                  "the zoomed chart")[0]
    assert int(zoomed.get_attribute("data-points")) in (5, 6)
    if os.environ.get("SLUICE_UI_SCREENSHOT"):
        # The hostile key: used and denied in one bar, and its name as text.
        browser.get(f"{stack.base}/ui/usage?key={quoted(HOSTILE)}&policy=tenper&last=15m")
        wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart[data-denied='1']"), "the chart")
        browser.save_screenshot(os.environ["SLUICE_UI_SCREENSHOT"])


def test_the_top_list_is_in_order_and_the_hostile_key_is_text(stack, browser):
    def rows(by):
        browser.get(f"{stack.base}/ui/top?by={by}&policy=tenper&last=15m")
        found = browser.find_elements(By.CSS_SELECTOR, "table.top tbody tr")
        return [(r.get_attribute("data-key"), int(r.get_attribute("data-used")), int(r.get_attribute("data-denied")))
                for r in found]

    want = [(HOSTILE, 10, 1), ("alice", 7, 0), ("bob", 3, 0)]
    wait(browser, lambda d: rows("used") == want, "the top list by used")
    assert rows("denied")[0] == (HOSTILE, 10, 1)
    link = browser.find_element(By.CSS_SELECTOR, "table.top tbody tr td.key a")
    assert link.text == HOSTILE, "the key shows as text"
    assert not browser.find_elements(By.TAG_NAME, "script")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    # Its usage and key pages too.
    link.click()
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart"), "the hostile key's usage")
    assert HOSTILE in browser.find_element(By.CSS_SELECTOR, "p.summary strong").text
    assert not browser.find_elements(By.TAG_NAME, "script")


def test_the_group_page_shows_the_orgs_usage_and_its_members_in_order(stack, browser):
    def group_link(d):
        d.get(f"{stack.base}/ui/top?last=15m")
        return d.find_elements(By.CSS_SELECTOR, "td.group a[data-group=acme]")

    wait(browser, group_link, "the top page's link to the group")[0].click()
    wait(browser, lambda d: "/ui/group?" in d.current_url, "the group page")
    query = urllib.parse.parse_qs(urllib.parse.urlparse(browser.current_url).query)
    assert query == {"org": ["acme"], "last": ["15m"]}, query

    def members(d):
        return [(r.get_attribute("data-key"), int(r.get_attribute("data-used")), int(r.get_attribute("data-denied")))
                for r in d.find_elements(By.CSS_SELECTOR, "section.members table.top tbody tr")]

    want = [("acme/alice", 3, 1), ("acme/eng/carol", 2, 0), ("acme/bob", 1, 0)]

    def shown(d):
        d.refresh()
        return members(d) == want and d

    wait(browser, shown, "the group's members by used")
    # Its own usage: the pool, the org's key under the outermost policy.
    selected = browser.find_element(By.CSS_SELECTOR, "select[name=policy] option[selected]")
    assert selected.get_attribute("value") == "org"
    own = browser.find_element(By.CSS_SELECTOR, "section.own p.summary")
    assert (own.get_attribute("data-used"), own.get_attribute("data-denied")) == ("4", "1")
    svg = browser.find_element(By.CSS_SELECTOR, "section.own svg.chart")
    assert (svg.get_attribute("data-used"), svg.get_attribute("data-denied")) == ("4", "1")
    assert own.find_element(By.CSS_SELECTOR, "strong").text == "acme"
    # By denied: the one member that was denied.
    browser.get(f"{stack.base}/ui/group?org=acme&by=denied&last=15m")
    wait(browser, lambda d: members(d) == want[:1], "the group's members by denied")
    # A member's link: its own usage, by org and key.
    browser.get(f"{stack.base}/ui/group?org=acme&last=15m")
    wait(browser, lambda d: members(d) == want, "the members again")
    browser.find_element(By.CSS_SELECTOR, "section.members td.key a").click()
    svg = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "svg.chart"), "alice's usage")[0]
    assert (svg.get_attribute("data-used"), svg.get_attribute("data-denied")) == ("3", "1")
    assert browser.find_element(By.CSS_SELECTOR, "p.summary strong").text == "acme/alice"
    assert "Group" in [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")]


def test_policies_key_state_and_status(stack, browser):
    browser.get(stack.base + "/ui/policies")
    row = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-policy=tenper]"), "the policies")[0]
    assert "sliding_log" in row.text and "10 per 5m" in row.text
    browser.get(f"{stack.base}/ui/key?key=bob&policy=tenper")
    limit = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "section.policy-state tr[data-used]"),
                 "bob's state")[0]
    assert (limit.get_attribute("data-used"), limit.get_attribute("data-remaining")) == ("3", "7")
    # The stack runs without NATS credentials, so resets are allowed: offered.
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "form.reset button"), "the reset button")
    browser.get(stack.base + "/ui/status")
    wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "table.partitions tbody tr"), "the partitions")
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.partitions tbody tr")) == 16
    assert sorted(r.get_attribute("data-worker") for r in browser.find_elements(By.CSS_SELECTOR, "table.workers tbody tr")) == ["ui0", "ui1"]
    assert browser.find_element(By.CSS_SELECTOR, "span.unowned").get_attribute("data-unowned") == "0"


def test_the_alerts_page_lists_each_threshold_once_with_the_hostile_key_as_text(stack, browser):
    hour = int(time.time()) // 3600
    for _ in range(4):
        status, _, body = stack.call(f"/v1/allow/{quoted(HOSTILE)}?policy=quota", method="POST")
        assert status == 200, body

    def rows(d):
        d.get(stack.base + "/ui/alerts?policy=quota")
        found = d.find_elements(By.CSS_SELECTOR, "table.alerts tbody tr")
        return len(found) >= 2 and found

    found = wait(browser, rows, "the two alerts of the hostile key")
    if int(time.time()) // 3600 != hour:
        return  # the hour's window ended during the asks: the alerts start over
    got = sorted((r.get_attribute("data-key"), r.get_attribute("data-threshold"), r.get_attribute("data-used"))
                 for r in found)
    assert got == [(HOSTILE, "100", "4"), (HOSTILE, "50", "2")], got
    assert browser.find_element(By.CSS_SELECTOR, "table.alerts td.key a").text == HOSTILE
    assert not browser.find_elements(By.TAG_NAME, "script")
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text
    assert "Alerts" in [a.text for a in browser.find_elements(By.CSS_SELECTOR, "nav a")]


def log_in(browser, base: str, token: str, path: str):
    browser.delete_all_cookies()
    browser.get(base + path)
    wait(browser, lambda d: "/ui/login" in d.current_url, "the login page")
    browser.find_element(By.NAME, "token").send_keys(token)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()


def test_a_read_token_logs_in_to_look_but_is_offered_no_reset(stack, browser):
    try:
        log_in(browser, stack.base, READ_TOKEN, "/ui/key?key=bob&policy=tenper")
        limit = wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "section.policy-state tr[data-used]"),
                     "bob's state")[0]
        assert limit.get_attribute("data-used") == "3"
        assert READ_TOKEN not in browser.get_cookie("sluice_ui")["value"]
        assert browser.find_elements(By.CSS_SELECTOR, "p.read-only")
        assert not browser.find_elements(By.CSS_SELECTOR, "form.reset")
        for path, shown in [("/ui/top?policy=tenper&last=15m", "table.top"), ("/ui/policies", "tr[data-policy=tenper]"),
                            ("/ui/status", "table.partitions")]:
            browser.get(stack.base + path)
            wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, shown), path)
    finally:
        log_in(browser, stack.base, TOKEN, "/ui/top")
