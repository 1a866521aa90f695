// agentfsm UI: the little script there is. Pages work without it; it adds live updates
// (polling the server, which answers from the store's index) and clickable diagram states.
// It never builds markup from data: text goes in with textContent, rows come pre-escaped
// from the server.
"use strict";
(function () {
  const body = document.body;
  const every = parseFloat(body.dataset.poll || "0") * 1000;

  function poll(fn) {
    // A failed poll (server restarting, page leaving) is skipped; the next one tries again.
    if (every > 0) { setInterval(() => { if (!document.hidden) fn().catch(() => {}); }, every); }
  }
  async function getJSON(url) {
    const r = await fetch(url, { credentials: "same-origin", headers: { accept: "application/json" } });
    if (!r.ok) throw new Error(String(r.status));
    return r.json();
  }

  // Runs list: refresh the rows in place (server-rendered and escaped).
  if (body.dataset.pollRows) {
    const rows = document.getElementById("run-rows");
    poll(async () => {
      const r = await fetch(body.dataset.pollRows, { credentials: "same-origin" });
      if (r.ok && rows) rows.innerHTML = await r.text();
    });
  }
  // A run: say when it moved on (never reload under a reader's feet).
  if (body.dataset.pollVersion) {
    poll(async () => {
      const now = await getJSON(body.dataset.pollVersion);
      if (String(now.version) !== body.dataset.version) {
        document.getElementById("run-changed").hidden = false;
      }
    });
  }
  // Approvals: say when the calls waiting changed.
  if (body.dataset.pollInbox) {
    poll(async () => {
      const now = await getJSON(body.dataset.pollInbox);
      const seen = body.dataset.inbox.split("|").filter(Boolean).sort().join("|");
      if (now.calls.join("|") !== seen) document.getElementById("inbox-changed").hidden = false;
    });
  }
  // Diagrams: a click (or Enter) on a state opens its description below (a table's page),
  // or says what it is and whether the run was there (a run's page).
  const info = document.getElementById("state-info");
  document.querySelectorAll("svg.diagram g.node[data-state]").forEach((node) => {
    node.addEventListener("click", () => {
      const name = node.dataset.state;
      const panel = Array.from(document.querySelectorAll("details.state")).find((d) => d.dataset.state === name);
      document.querySelectorAll("svg.diagram g.node.picked").forEach((n) => n.classList.remove("picked"));
      node.classList.add("picked");
      if (panel) { panel.open = true; panel.scrollIntoView({ behavior: "smooth", block: "center" }); }
      if (info) {
        const tip = node.querySelector("a");
        const about = tip ? tip.getAttributeNS("http://www.w3.org/1999/xlink", "title") : "";
        const marks = node.classList.contains("final") ? " (where the run is now)" :
          node.classList.contains("current") ? " (after the selected event)" : "";
        info.textContent = `state ${name}${marks}${about && about !== name ? ": " + about : ""}`;
      }
    });
  });
  // Step-through: arrow keys follow the previous/next links.
  document.addEventListener("keydown", (e) => {
    if (e.target instanceof HTMLInputElement || e.target instanceof HTMLTextAreaElement) return;
    if (e.target instanceof Element && e.target.closest(".diagram-view")) return;
    const rel = e.key === "ArrowLeft" ? "prev" : e.key === "ArrowRight" ? "next" : null;
    if (!rel) return;
    const link = document.querySelector(`.stepper a[data-step="${rel}"]`);
    if (link) link.click();
  });
})();
// Approvals: each expiry counts down (the server refuses an expired approval anyway).
(function () {
  const clocks = document.querySelectorAll("time.countdown[datetime]");
  if (!clocks.length) return;
  function words(ms) {
    const s = Math.round(ms / 1000), d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24,
      m = Math.floor(s / 60) % 60;
    return d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
  }
  function tick() {
    clocks.forEach((t) => {
      const left = Date.parse(t.getAttribute("datetime")) - Date.now();
      if (Number.isNaN(left)) return;
      t.textContent = left > 0 ? `in ${words(left)}` : "now: expired, approving is refused";
      t.classList.toggle("soon", left < 5 * 60 * 1000);
      t.title = t.getAttribute("datetime");
    });
  }
  tick();
  setInterval(tick, 1000);
})();
// A block of JSON that scrolls is a tab stop, so a keyboard can scroll it too (WCAG 2.1.1).
(function () {
  function mark() {
    document.querySelectorAll("pre").forEach((pre) => {
      if (pre.scrollHeight > pre.clientHeight + 1 || pre.scrollWidth > pre.clientWidth + 1) {
        if (!pre.hasAttribute("tabindex")) pre.setAttribute("tabindex", "0");
      }
    });
  }
  mark();
  document.querySelectorAll("details").forEach((d) => d.addEventListener("toggle", mark));
})();
// The timeline: filter this page's rows by type, call and text (the server pages them).
(function () {
  const form = document.querySelector("form.timeline-filter");
  if (!form) return;
  form.hidden = false;
  form.addEventListener("submit", (e) => e.preventDefault());
  const search = document.getElementById("timeline-search");
  const type = document.getElementById("timeline-type");
  const action = document.getElementById("timeline-action");
  const count = document.getElementById("timeline-count");
  const rows = Array.from(document.querySelectorAll(".timeline-table tr[data-seq]"));
  function apply() {
    const text = search.value.trim().toLowerCase();
    let shown = 0;
    rows.forEach((row) => {
      const ok = (!type.value || row.dataset.type === type.value) &&
        (!action.value || row.dataset.action === action.value) &&
        (!text || row.textContent.toLowerCase().includes(text));
      row.classList.toggle("hidden-row", !ok);
      if (ok) shown += 1;
    });
    document.querySelectorAll(".timeline-table tbody.turn-group").forEach((g) => {
      g.hidden = !g.querySelector("tr[data-seq]:not(.hidden-row)");
    });
    count.textContent = shown === rows.length ? "" : `${shown} of ${rows.length} events on this page match`;
  }
  [search, type, action].forEach((el) => el.addEventListener("input", apply));
})();
