"""The review-grade UI of issue 29 in a real browser (Debian's Chromium through Playwright):
a diagram a reviewer can read, and the pages' accessibility.

Screenshots go under build/ui-screenshots/ (a test artifact).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.ui.conftest import LiveServer, screenshot

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
