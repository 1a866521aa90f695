// agentfsm UI: the little script there is. Pages work without it; it keeps them live: a
// stream of server-sent events (EventSource) where the page names one, else (no
// EventSource, or the server refused the stream) polling the server, which answers from the
// store's index. It never builds markup from data: text goes in with textContent, rows and
// sections come pre-escaped from the server.
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
  // The page's stream, with a handler per event; `fallback` (polling) when there is none:
  // no EventSource here, or the server refused it (past its cap, streams off), which
  // closes it. A stream the server ended on its own is reopened by the browser.
  function live(handlers, fallback) {
    if (!body.dataset.stream || typeof window.EventSource !== "function") {
      body.dataset.live = "poll";
      fallback();
      return;
    }
    const source = new EventSource(body.dataset.stream);
    body.dataset.live = "stream";
    Object.entries(handlers).forEach(([name, handle]) => {
      source.addEventListener(name, (e) => handle(e.data));
    });
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED && body.dataset.live === "stream") {
        body.dataset.live = "poll";
        fallback();
      }
    });
    window.addEventListener("pagehide", () => source.close());
  }
  function fragment(html) {
    const t = document.createElement("template");
    t.innerHTML = html;
    return t.content;
  }

  // Runs list: the rows (and the counts) replaced in place.
  if (body.dataset.pollRows) {
    const rows = document.getElementById("run-rows");
    const counts = document.getElementById("run-counts");
    const pager = document.getElementById("run-pager");
    live({
      rows: (html) => { if (rows) rows.innerHTML = html; },
      counts: (html) => { if (counts) counts.innerHTML = html; },
      pager: (html) => { if (pager) pager.innerHTML = html; },
    }, () => poll(async () => {
      const r = await fetch(body.dataset.pollRows, { credentials: "same-origin" });
      if (r.ok && rows) rows.innerHTML = await r.text();
    }));
  }
  // A run: new events' rows added to the timeline in place (the turn they belong to drawn
  // again whole, its open rows kept open); past the page's end, say the run moved on.
  if (body.dataset.pollVersion) {
    const changed = () => { document.getElementById("run-changed").hidden = false; };
    const table = document.querySelector("table.timeline-table");
    const loaded = parseInt(body.dataset.version, 10);
    live({
      rows: (html) => {
        if (!table) return;
        fragment(html).querySelectorAll("tbody.turn-group").forEach((group) => {
          const turn = group.dataset.turn;
          const old = Array.from(table.querySelectorAll("tbody.turn-group")).find((g) => g.dataset.turn === turn);
          if (old) {
            const open = Array.from(old.querySelectorAll("tr[data-seq]"))
              .filter((tr) => tr.querySelector("details[open]")).map((tr) => tr.dataset.seq);
            open.forEach((seq) => {
              const d = group.querySelector(`tr[data-seq="${seq}"] details`);
              if (d) d.open = true;
            });
            old.replaceWith(group);
          } else {
            const refused = table.querySelector("tr.refused-row");
            table.insertBefore(group, refused ? refused.closest("tbody") : null);
          }
        });
        document.dispatchEvent(new CustomEvent("agentfsm:timeline"));
      },
      run: (data) => {
        const now = JSON.parse(data);
        const status = document.getElementById("run-status");
        if (status && status.textContent !== now.status) {
          status.textContent = now.status;
          status.className = `status s-${now.status}`;
          // What the table allowed in the state the page loaded in may not be allowed now.
          document.querySelectorAll("section.steer button").forEach((b) => { b.disabled = true; });
        }
        const events = document.getElementById("run-events");
        if (events) events.textContent = String(now.version);
        const range = document.getElementById("timeline-range");
        if (range) range.textContent = range.textContent.replace(/–\d+ of \d+$/, `–${now.shown} of ${now.version}`);
        if (now.version > loaded) {
          document.getElementById("run-live").hidden = false;
          document.getElementById("run-live-count").textContent = String(now.version - loaded);
        }
        if (now.more) changed();
      },
    }, () => poll(async () => {
      const now = await getJSON(body.dataset.pollVersion);
      if (String(now.version) !== body.dataset.version) changed();
    }));
  }
  // Approvals: a call no longer waiting is marked so (its forms disabled); a call that came
  // is added under its run; a difference with what the page was made from is said.
  if (body.dataset.pollInbox) {
    const seen = body.dataset.inbox.split("|").filter(Boolean).sort().join("|");
    const changed = () => { document.getElementById("inbox-changed").hidden = false; };
    const list = document.getElementById("inbox-runs");
    const article = (key) => {
      const [run, action] = [key.slice(0, key.lastIndexOf(" ")), key.slice(key.lastIndexOf(" ") + 1)];
      return Array.from(document.querySelectorAll("article.approval"))
        .find((a) => a.dataset.run === run && a.dataset.action === action);
    };
    live({
      keys: (data) => { if (JSON.parse(data).join("|") !== seen) changed(); },
      gone: (data) => {
        JSON.parse(data).forEach((key) => {
          const card = article(key);
          if (!card || card.classList.contains("gone")) return;
          card.classList.add("gone");
          card.querySelectorAll("button, input").forEach((el) => { el.disabled = true; });
          const note = document.createElement("p");
          note.className = "notice gone-note";
          note.textContent = "No longer waiting: decided, or the run moved on, since this page loaded.";
          card.prepend(note);
        });
      },
      calls: (html) => {
        if (!list) return;
        list.querySelectorAll(":scope > p.empty").forEach((p) => p.remove());
        fragment(html).querySelectorAll("section.inbox-run").forEach((section) => {
          const mine = Array.from(list.querySelectorAll("section.inbox-run")).find((s) => s.dataset.run === section.dataset.run);
          if (mine) section.querySelectorAll("article.approval").forEach((a) => mine.append(a));
          else list.append(section);
        });
        document.dispatchEvent(new CustomEvent("agentfsm:inbox"));
      },
    }, () => poll(async () => {
      const now = await getJSON(body.dataset.pollInbox);
      if (now.calls.join("|") !== seen) changed();
    }));
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
  if (!document.querySelector("time.countdown[datetime]") && !document.body.dataset.pollInbox) return;
  function words(ms) {
    const s = Math.round(ms / 1000), d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24,
      m = Math.floor(s / 60) % 60;
    return d ? `${d} d ${h} h` : h ? `${h} h ${m} min` : m ? `${m} min ${s % 60} s` : `${s} s`;
  }
  function tick() {
    // Read each time: the inbox's stream adds calls with clocks of their own.
    document.querySelectorAll("time.countdown[datetime]").forEach((t) => {
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
  // `toggle` does not bubble: caught on the way down, so rows added later are heard too.
  document.addEventListener("toggle", mark, true);
  document.addEventListener("agentfsm:timeline", mark);
  document.addEventListener("agentfsm:inbox", mark);
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
  function apply() {
    // Read each time: the run's stream adds rows.
    const rows = Array.from(document.querySelectorAll(".timeline-table tr[data-seq]"));
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
  document.addEventListener("agentfsm:timeline", apply);
})();
