"""The review-grade UI of issue 29 in a real browser (Debian's Chromium through Playwright):
a diagram a reviewer can read, and the pages' accessibility.

Screenshots go under build/ui-screenshots/ (a test artifact).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui.conftest import TOKEN, LiveServer, make_reasoned, screenshot

pytestmark = pytest.mark.browser

#: The smallest label a reviewer must read at 1280 px wide without zooming (issue 29).
READABLE_PX = 11


@pytest.fixture
def wide(browser: Any) -> Iterator[Any]:
    """A page 1280 px wide (a laptop), failing the test on any script error."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert errors == []


def _label_sizes(page: Any) -> dict[str, float]:
    """The rendered size of the diagram's text: the smallest font size on screen (the
    text's font size times the SVG's scale to the screen) and the smallest text box."""
    return page.evaluate(
        """() => {
          const svg = document.querySelector('.diagram-view svg.diagram');
          const texts = Array.from(svg.querySelectorAll('text')).filter((t) => t.textContent.trim());
          const scale = svg.getScreenCTM().a;
          const fonts = texts.map((t) => parseFloat(t.getAttribute('font-size')) * scale);
          const boxes = texts.map((t) => t.getBoundingClientRect().height);
          return {font: Math.min(...fonts), box: Math.min(...boxes), texts: texts.length};
        }"""
    )


def _scale(page: Any) -> float:
    return float(page.locator(".diagram-view").get_attribute("data-scale"))


def _scroll(page: Any) -> tuple[float, float]:
    return tuple(page.locator(".diagram-view").evaluate("(v) => [v.scrollLeft, v.scrollTop]"))


class TestReadableDiagram:
    @pytest.mark.parametrize("view", ["", "&view=table"], ids=["path-only", "whole-table"])
    def test_labels_are_readable_at_1280_px_in_the_default_view(
        self, wide: Any, live: LiveServer, view: str
    ) -> None:
        """Measured in the browser: every label of the run's diagram (the path only, and the
        whole default table) is at least 11 px high as first shown at 1280 px wide."""
        wide.goto(f"{live.url}/run?id=pay-1{view}")
        sizes = _label_sizes(wide)
        assert sizes["texts"] > 3
        assert sizes["font"] >= READABLE_PX, sizes
        assert sizes["box"] >= READABLE_PX, sizes
        screenshot(wide, f"run-diagram-{'table' if view else 'path'}-1280")

    def test_path_only_leaves_out_the_states_never_visited(self, wide: Any, live: LiveServer) -> None:
        """The default view draws the visited states; the switch draws the whole table."""
        wide.goto(f"{live.url}/run?id=done-1")
        drawn = wide.locator("svg.diagram g.node[data-state]")
        assert sorted(drawn.evaluate_all("(ns) => ns.map((n) => n.dataset.state)")) == [
            "completed", "created", "running",
        ]  # fmt: skip
        with wide.expect_navigation():
            wide.click("a.view-switch")
        assert wide.locator("svg.diagram g.node[data-state]").count() > 3
        assert "view=table" in wide.url

    def test_fit_to_width_and_one_to_one(self, wide: Any, live: LiveServer) -> None:
        """Fit width puts the whole picture in the box; 1:1 is Graphviz's own size."""
        wide.goto(f"{live.url}/run?id=pay-1&view=table")
        view = wide.locator(".diagram-view")
        wide.click('button[data-zoom="fit"]')
        widths = view.evaluate(
            "(v) => [v.querySelector('svg').getBoundingClientRect().width, v.clientWidth]"
        )
        assert widths[0] <= widths[1]
        assert view.evaluate("(v) => v.scrollWidth <= v.clientWidth")
        screenshot(wide, "run-diagram-fit")
        wide.click('button[data-zoom="actual"]')
        assert _scale(wide) == pytest.approx(4 / 3, abs=1e-3)
        natural = view.evaluate("(v) => v.querySelector('svg').viewBox.baseVal.width")
        shown = view.evaluate("(v) => v.querySelector('svg').getBoundingClientRect().width")
        assert shown == pytest.approx(natural * 4 / 3, rel=0.01)

    def test_mouse_pans_by_dragging_and_zooms_with_ctrl_wheel(self, wide: Any, live: LiveServer) -> None:
        wide.goto(f"{live.url}/run?id=pay-1&view=table")
        view = wide.locator(".diagram-view")
        view.scroll_into_view_if_needed()
        box = view.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        before = _scroll(wide)
        wide.mouse.move(x, y)
        wide.mouse.down()
        wide.mouse.move(x - 150, y - 40, steps=6)
        wide.mouse.up()
        after = _scroll(wide)
        assert after[0] - before[0] == pytest.approx(150, abs=3)
        scale = _scale(wide)
        wide.keyboard.down("Control")
        wide.mouse.wheel(0, -300)
        wide.keyboard.up("Control")
        wide.wait_for_function(f"() => parseFloat(document.querySelector('.diagram-view').dataset.scale) > {scale}")

    def test_touch_pans_with_one_finger_and_pinches_with_two(self, wide: Any, live: LiveServer) -> None:
        """Pointer events as a touch screen sends them: one finger drags, two pinch."""
        wide.goto(f"{live.url}/run?id=pay-1&view=table")
        scale = _scale(wide)
        before = _scroll(wide)
        wide.locator(".diagram-view").evaluate(
            """(v) => {
              const r = v.getBoundingClientRect(), x = r.left + 300, y = r.top + 150;
              const send = (type, id, cx, cy) => v.dispatchEvent(new PointerEvent(type,
                {pointerId: id, pointerType: 'touch', clientX: cx, clientY: cy, bubbles: true, isPrimary: id === 1}));
              send('pointerdown', 1, x, y);
              for (let i = 1; i <= 5; i++) send('pointermove', 1, x - 20 * i, y);
              send('pointerup', 1, x - 100, y);
              send('pointerdown', 1, x, y);
              send('pointerdown', 2, x + 100, y);
              for (let i = 1; i <= 5; i++) send('pointermove', 2, x + 100 + 20 * i, y);
              send('pointerup', 2, x + 200, y);
              send('pointerup', 1, x, y);
            }"""
        )
        assert _scale(wide) == pytest.approx(scale * 2, rel=0.02)
        assert _scroll(wide)[0] > before[0]

    def test_keyboard_zooms_pans_and_reaches_each_state(self, wide: Any, live: LiveServer) -> None:
        """On the focused diagram: + zooms, arrows pan (and do not step the run), Tab reaches
        a state, Enter on it says what it is."""
        wide.goto(f"{live.url}/run?id=pay-1&view=table&at=3")
        url = wide.url
        view = wide.locator(".diagram-view")
        view.focus()
        scale = _scale(wide)
        wide.keyboard.press("+")
        assert _scale(wide) == pytest.approx(scale * 1.25, rel=1e-3)
        before = _scroll(wide)
        wide.keyboard.press("ArrowRight")
        assert _scroll(wide)[0] > before[0]
        assert wide.url == url  # the arrow panned; it did not step to event 4
        wide.keyboard.press("Tab")
        focused = wide.evaluate("() => document.activeElement.dataset.state || null")
        assert focused is not None
        wide.keyboard.press("Enter")
        assert wide.locator("#state-info").inner_text().startswith(f"state {focused}")
        screenshot(wide, "run-diagram-keyboard")

    def test_step_state_final_state_and_the_move_are_drawn_apart(
        self, wide: Any, live: LiveServer
    ) -> None:
        """Stepping back: the step's state and the state now are outlined differently, and
        the move the event made is drawn as the step's."""

        def outline(selector: str) -> list[str]:
            return wide.locator(selector).first.evaluate(
                "(n) => { const s = getComputedStyle(n.querySelector('path, polygon'));"
                " return [s.stroke, s.strokeDasharray]; }"
            )

        wide.goto(f"{live.url}/run?id=done-1&at=1")
        current = outline("svg.diagram g.node.current")
        final = outline("svg.diagram g.node.final")
        assert wide.locator("svg.diagram g.node.current").get_attribute("data-state") == "running"
        assert wide.locator("svg.diagram g.node.final").get_attribute("data-state") == "completed"
        assert current != final
        assert wide.locator("svg.diagram g.edge.step").get_attribute("data-to") == "running"
        screenshot(wide, "run-diagram-step")
        wide.goto(f"{live.url}/run?id=done-1&at=4")
        step = wide.locator("svg.diagram g.edge.step")
        assert (step.get_attribute("data-from"), step.get_attribute("data-to")) == ("running", "completed")
        other = wide.locator("svg.diagram g.edge:not(.step)[data-from]").first
        colour = "(e) => getComputedStyle(e.querySelector('path')).stroke"
        assert step.evaluate(colour) != other.evaluate(colour)


def _axe_source() -> str:
    """axe-core, as the `axe-playwright-python` package ships it (a dev dependency; used by
    the tests only, nothing of it is served)."""
    try:
        from importlib.resources import files

        return (files("axe_playwright_python") / "axe.min.js").read_text(encoding="utf-8")
    except (ImportError, FileNotFoundError) as exc:  # pragma: no cover - a missing dev extra
        pytest.fail(f"axe-core is not installed: pip install -e '.[dev]' ({exc})")


def _axe(page: Any) -> list[str]:
    """WCAG 2.x A and AA violations axe-core finds on the page, one line each."""
    # Evaluated through the DevTools protocol: the page's CSP (no inline script) stays on.
    page.evaluate(_axe_source() + "\n;0")
    found = page.evaluate(
        """async () => {
          const r = await axe.run(document, {runOnly: {type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa']}});
          return r.violations.map((v) => `${v.id}: ${v.help} — ${v.nodes.slice(0, 3).map((n) => n.target.join(' ')).join(', ')}`);
        }"""
    )
    return list(found)


class TestAccessibility:
    def test_every_page_meets_wcag_aa_by_axe(self, wide: Any, live: LiveServer) -> None:
        """axe-core's WCAG 2.1 A/AA rules find nothing on any page, signed in or not."""
        urls = ["/", "/run?id=pay-1", "/run?id=done-1&at=2", "/run?id=pay-1&view=table",
                "/approvals", "/tables", "/login", "/run?id=nope"]  # fmt: skip
        wide.goto(f"{live.url}/tables")
        urls.append(wide.locator("table a").first.get_attribute("href"))
        found = {url: _axe(wide) for url in urls if wide.goto(f"{live.url}{url}") or True}
        wide.goto(f"{live.url}/login?token={TOKEN}")
        for url in ("/approvals", "/run?id=pay-1"):
            wide.goto(f"{live.url}{url}")
            found[f"{url} (signed in)"] = _axe(wide)
        assert {url: v for url, v in found.items() if v} == {}

    def test_the_signed_in_badge_is_readable(self, wide: Any, live: LiveServer) -> None:
        """Its text and background differ (they were the same green), contrast >= 4.5."""
        wide.goto(f"{live.url}/login?token={TOKEN}")
        badge = wide.locator("header.top .badge")
        assert badge.inner_text() == "signed in"
        colours = badge.evaluate(
            "(b) => { const s = getComputedStyle(b); return [s.color, s.backgroundColor]; }"
        )
        assert _contrast(*colours) >= 4.5, colours
        screenshot(wide, "badge-signed-in")

    def test_muted_text_has_aa_contrast(self, wide: Any, live: LiveServer) -> None:
        wide.goto(f"{live.url}/run?id=pay-1")
        pairs = wide.locator(".muted").evaluate_all(
            """(ns) => ns.filter((n) => n.offsetParent).map((n) => {
                 let e = n, bg = 'rgba(0, 0, 0, 0)';
                 while (e && (bg === 'rgba(0, 0, 0, 0)' || bg === 'transparent')) {
                   bg = getComputedStyle(e).backgroundColor; e = e.parentElement; }
                 return [getComputedStyle(n).color, bg]; })"""
        )
        assert pairs
        assert min(_contrast(*p) for p in pairs) >= 4.5

    def test_the_first_tab_is_the_skip_link_and_it_moves_focus_to_the_content(
        self, wide: Any, live: LiveServer
    ) -> None:
        wide.goto(f"{live.url}/run?id=pay-1")
        wide.keyboard.press("Tab")
        skip = wide.evaluate("() => [document.activeElement.className, document.activeElement.innerText]")
        assert skip == ["skip", "Skip to the content"]
        assert wide.locator("a.skip").bounding_box()["y"] >= 0  # shown once focused
        wide.keyboard.press("Enter")
        assert wide.evaluate("() => document.activeElement.id") == "main"

    def test_no_request_fails_and_no_glyph_is_missing(self, wide: Any, live: LiveServer) -> None:
        """Every request a page makes succeeds (the favicon too); the stepper is words, not
        symbols Debian's fonts lack."""
        failed: list[str] = []
        wide.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        wide.goto(f"{live.url}/run?id=done-1&at=2")
        wide.evaluate("() => fetch('/favicon.ico').then((r) => r.ok)")
        wide.wait_for_load_state("load")  # not "networkidle": the page polls its run
        assert failed == []
        stepper = wide.locator(".stepper").inner_text()
        assert not set(stepper) & set("⏮⏭◀▶"), stepper
        assert [a.inner_text() for a in wide.locator(".stepper a").all()] == ["first", "previous", "next", "last"]


class TestApprovalScreen:
    def test_reasoning_earlier_results_countdown_and_who_continues(
        self, wide: Any, tmp_path: Path
    ) -> None:
        """The card shows what the model said with the call and what it had read; the expiry
        counts down; after approving the page says what continues the run."""
        path = tmp_path / "why.db"
        make_reasoned(path)
        server = LiveServer(path)
        try:
            wide.goto(f"{server.url}/login?token={TOKEN}")
            wide.goto(f"{server.url}/approvals")
            card = wide.locator('article.approval[data-action="t2.1"]')
            assert "The parcel never arrived" in card.locator(".reasoning").inner_text()
            assert '"tracking": "lost"' in card.locator(".earlier").inner_text()
            clock = card.locator("time.countdown")
            first = clock.inner_text()
            assert re.fullmatch(r"in (59 min \d+ s|1 h 0 min)", first), first
            wide.wait_for_function(
                "(t) => document.querySelector('time.countdown').textContent !== t", arg=first
            )
            assert _axe(wide) == []
            screenshot(wide, "approval-context")
            card.locator("form.approve input[name=approver]").fill("ann")
            card.locator("form.approve button").click()
            assert "No driver holds this run now" in wide.locator("#who-continues").inner_text()
            screenshot(wide, "approval-done")
        finally:
            server.stop()


def _contrast(fg: str, bg: str) -> float:
    """WCAG's contrast ratio of two CSS `rgb(...)` colours."""

    def luminance(colour: str) -> float:
        channels = [int(c) / 255 for c in re.findall(r"\d+", colour)[:3]]
        lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    a, b = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (a + 0.05) / (b + 0.05)


class TestTimelineInTheBrowser:
    def test_filter_search_and_collapsible_json(self, wide: Any, tmp_path: Path) -> None:
        """The timeline's bars are drawn; filtering by type, by call and by text hides the
        other rows (and empty turns); each event's JSON opens on demand."""
        path = tmp_path / "why.db"
        make_reasoned(path)
        server = LiveServer(path)
        try:
            wide.goto(f"{server.url}/run?id=why-1")
            rows = wide.locator(".timeline-table tr[data-seq]")
            total = rows.count()
            assert wide.locator(".bars rect.bar").count() == 4
            width = wide.locator(".bars rect.bar-tool").evaluate("(r) => r.getBoundingClientRect().width")
            assert width > 0
            wide.select_option("#timeline-type", "model.started")
            assert wide.locator(".timeline-table tr[data-seq]:visible").count() == 2
            assert wide.locator("tbody.turn-group:visible").count() == 2  # the run's start is hidden
            wide.select_option("#timeline-type", "")
            wide.select_option("#timeline-action", "t1.1")
            visible = wide.locator(".timeline-table tr[data-seq]:visible")
            assert {visible.nth(i).get_attribute("data-action") for i in range(visible.count())} == {"t1.1"}
            wide.select_option("#timeline-action", "")
            wide.fill("#timeline-search", "tracking")
            assert 0 < wide.locator(".timeline-table tr[data-seq]:visible").count() < total
            assert "match" in wide.locator("#timeline-count").inner_text()
            wide.fill("#timeline-search", "")
            first = wide.locator(".timeline-table details.fields").first
            assert not first.locator("pre").is_visible()
            first.locator("summary").click()
            assert first.locator("pre").is_visible()
            screenshot(wide, "timeline")
            assert _axe(wide) == []
        finally:
            server.stop()

    def test_the_report_says_what_each_step_changed(self, wide: Any, runs_db: Path, tmp_path: Path) -> None:
        from agentfsm import SQLiteEventStore
        from agentfsm.events import dump_event
        from agentfsm.ui import render_report

        with SQLiteEventStore(runs_db) as store:
            lines = [dump_event(e) for e in store.events("pay-1")]
        report = tmp_path / "review.html"
        report.write_text(render_report(log=lines), encoding="utf-8")
        wide.goto(report.as_uri())
        run = wide.locator("article.run").first
        run.locator('button.step[data-step="3"]').click()  # approval.requested
        said = run.locator(".step-changes").inner_text()
        assert said.startswith("What changed in the record with this event:")
        assert 'status: "running" → "waiting_approval"' in said
        assert "call t1.1 status" in said


class TestRunsListInTheBrowser:
    def test_phones_get_cards_without_horizontal_overflow(self, browser: Any, live: LiveServer) -> None:
        """At 390 px wide (a phone) the runs list is a column of cards: nothing is wider
        than the screen, and each cell says what it is."""
        context = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True, is_mobile=True)
        phone = context.new_page()
        try:
            phone.goto(live.url)
            assert phone.evaluate("() => document.documentElement.scrollWidth") <= 390
            # Read in one go: the list's rows are refreshed in place every half second here.
            card = phone.evaluate(
                """() => { const r = document.querySelector('tr[data-run="pay-1"]');
                   const td = r.querySelector('td[data-label="status"]');
                   return [getComputedStyle(r).display, r.getBoundingClientRect().width,
                           getComputedStyle(td, '::before').content]; }"""
            )
            assert card[0] == "block"
            assert 0 < card[1] <= 390
            assert card[2] == '"status"'
            screenshot(phone, "runs-phone")
            assert _axe(phone) == []
        finally:
            context.close()

    def test_counts_filters_and_liveness_on_a_wide_screen(self, wide: Any, live: LiveServer) -> None:
        wide.goto(live.url)
        assert "completed 2" in wide.locator(".counts").inner_text()
        wide.fill('input[name="text"]', "bye")
        with wide.expect_navigation():
            wide.click('form.filters button[type="submit"]')
        assert [r.get_attribute("data-run") for r in wide.locator("#run-rows tr").all()] == ["done-2"]
        wide.goto(live.url)
        assert wide.locator('tr[data-run="pay-1"] .driver').inner_text() == "no driver holds it"
        screenshot(wide, "runs-wide")
