"use strict";
// Pan and zoom for the diagrams (the UI's pages and the review file). A table's picture can be
// thousands of points wide; squeezed to the page its labels are a few pixels high, so a
// diagram opens at a scale where its smallest label is readable, and the reader pans (drag,
// one finger, arrow keys), zooms (ctrl + wheel, two fingers, + and -), fits it to the width,
// or shows it 1:1. States are tab stops (the SVG gives them tabindex); Enter or Space on one
// does what a click does. No markup is built from data: the state's name goes in as text.
(function () {
  var PT = 4 / 3; // Graphviz sizes in points: 1:1 is its size at 96 px to the inch
  // px: the smallest label a reader must read without zooming (11), with a margin for the
  // browser laying sizes out in 1/64 px steps
  var READABLE = 11.1;
  var MIN = 0.05, MAX = 8, STEP = 1.25, PAN = 60, DRAG = 4;

  function setup(view) {
    var svg = view.querySelector("svg.diagram");
    if (!svg || !svg.viewBox || !svg.viewBox.baseVal) return;
    var width = svg.viewBox.baseVal.width, height = svg.viewBox.baseVal.height;
    if (!(width > 0 && height > 0)) return;
    var sizes = Array.prototype.map.call(svg.querySelectorAll("text"), function (t) {
      return parseFloat(t.getAttribute("font-size") || "14");
    }).filter(function (n) { return n > 0; });
    var smallest = sizes.length ? Math.min.apply(null, sizes) : 14;
    var scale = 1;

    function fit() {
      var style = getComputedStyle(view);
      var room = view.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
      return Math.max(room, 50) / width;
    }
    function readable() { return READABLE / smallest; }
    function preferred() {
      // Fit the width while that keeps every label readable (never past 1:1: a three-state
      // path need not fill a wide screen); else the readable scale, and the reader pans.
      var s = Math.min(fit(), PT);
      return s < readable() ? readable() : s;
    }
    function apply() {
      // Rounded up: a label just readable stays so (11 px, not 10.999).
      svg.style.width = Math.ceil(width * scale * 100) / 100 + "px";
      svg.style.height = Math.ceil(height * scale * 100) / 100 + "px";
      view.dataset.scale = scale.toFixed(4);
    }
    function zoomTo(next, cx, cy) {
      next = Math.min(Math.max(next, MIN), MAX);
      if (cx === undefined) { cx = view.clientWidth / 2; cy = view.clientHeight / 2; }
      var x = view.scrollLeft + cx, y = view.scrollTop + cy, k = next / scale;
      scale = next;
      apply();
      view.scrollLeft = x * k - cx;
      view.scrollTop = y * k - cy;
    }
    var named = { fit: fit, actual: function () { return PT; }, readable: readable };
    function act(what) {
      if (what === "in") zoomTo(scale * STEP);
      else if (what === "out") zoomTo(scale / STEP);
      else if (named[what]) zoomTo(named[what]());
    }

    view.classList.add("zoomable");
    scale = preferred();
    apply();
    var tools = view.previousElementSibling;
    if (tools && tools.classList.contains("diagram-tools")) {
      tools.querySelectorAll("button[data-zoom]").forEach(function (b) {
        b.hidden = false;
        b.addEventListener("click", function () { act(b.dataset.zoom); });
      });
    }

    view.addEventListener("wheel", function (e) {
      if (!(e.ctrlKey || e.metaKey)) return; // a plain wheel scrolls, as everywhere
      e.preventDefault();
      var box = view.getBoundingClientRect();
      zoomTo(scale * Math.exp(-e.deltaY * 0.002), e.clientX - box.left, e.clientY - box.top);
    }, { passive: false });

    // Pointers: one drags the picture, two pinch it. A drag past a few pixels is no click.
    var down = new Map(), moved = false, pinch = null, origin = null;
    function spread() {
      var p = Array.from(down.values());
      return Math.hypot(p[0].x - p[1].x, p[0].y - p[1].y) || 1;
    }
    view.addEventListener("pointerdown", function (e) {
      if (e.pointerType === "mouse" && e.button !== 0) return;
      down.set(e.pointerId, { x: e.clientX, y: e.clientY });
      if (down.size === 1) { moved = false; origin = { x: e.clientX, y: e.clientY }; }
      if (down.size === 2) pinch = { spread: spread(), scale: scale };
    });
    view.addEventListener("pointermove", function (e) {
      var last = down.get(e.pointerId);
      if (!last) return;
      var dx = e.clientX - last.x, dy = e.clientY - last.y;
      down.set(e.pointerId, { x: e.clientX, y: e.clientY });
      if (pinch && down.size === 2) {
        var p = Array.from(down.values()), box = view.getBoundingClientRect();
        moved = true;
        zoomTo(pinch.scale * spread() / pinch.spread,
          (p[0].x + p[1].x) / 2 - box.left, (p[0].y + p[1].y) / 2 - box.top);
        return;
      }
      if (!moved && Math.hypot(e.clientX - origin.x, e.clientY - origin.y) < DRAG) return;
      if (!moved) {
        moved = true;
        // Captured only once it is a drag: a capture at once would take the click from the state.
        try { view.setPointerCapture(e.pointerId); } catch (err) { /* pointer gone */ }
        view.classList.add("dragging");
      }
      view.scrollLeft -= dx;
      view.scrollTop -= dy;
    });
    function up(e) {
      down.delete(e.pointerId);
      if (down.size < 2) pinch = null;
      if (down.size === 0) view.classList.remove("dragging");
    }
    view.addEventListener("pointerup", up);
    view.addEventListener("pointercancel", up);
    view.addEventListener("click", function (e) {
      if (moved) { e.stopPropagation(); e.preventDefault(); moved = false; }
    }, true);

    view.addEventListener("keydown", function (e) {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      var node = e.target.closest && e.target.closest("g.node[data-state]");
      var pans = { ArrowLeft: [-PAN, 0], ArrowRight: [PAN, 0], ArrowUp: [0, -PAN], ArrowDown: [0, PAN] };
      var keys = { "+": "in", "=": "in", "-": "out", "0": "actual", f: "fit", F: "fit", r: "readable", R: "readable" };
      if (node && (e.key === "Enter" || e.key === " ")) {
        node.dispatchEvent(new MouseEvent("click", { bubbles: true }));
      } else if (pans[e.key]) {
        view.scrollLeft += pans[e.key][0];
        view.scrollTop += pans[e.key][1];
      } else if (keys[e.key]) {
        act(keys[e.key]);
      } else {
        return;
      }
      e.preventDefault();
      e.stopPropagation(); // the page's arrow keys (stepping) stay out of the diagram
    });
  }

  document.querySelectorAll(".diagram-view").forEach(setup);
})();
