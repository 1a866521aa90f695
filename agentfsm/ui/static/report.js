"use strict";
// The review file's script: clickable states, and stepping through recorded runs. Data comes
// from the JSON blocks in the page and goes on the page as text (textContent), never markup.
(function () {
  document.querySelectorAll("svg.diagram g.node[data-state]").forEach(function (node) {
    if (node.closest("article.run")) return;
    node.addEventListener("click", function () {
      var name = node.getAttribute("data-state");
      document.querySelectorAll("svg.diagram g.node.picked").forEach(function (n) { n.classList.remove("picked"); });
      node.classList.add("picked");
      document.querySelectorAll("details.state").forEach(function (d) {
        if (d.getAttribute("data-state") === name) { d.open = true; d.scrollIntoView({ block: "center" }); }
      });
    });
  });
  // What changed in the record between the step before and this one, a line per field
  // (the ledger call by call), as text.
  function changed(before, after) {
    var lines = [];
    function show(v) { var t = JSON.stringify(v); return t === undefined ? "(none)" : t.length > 160 ? t.slice(0, 160) + "…" : t; }
    Object.keys(after).forEach(function (k) {
      if (k === "actions") return;
      var was = before ? before[k] : undefined;
      if (JSON.stringify(was) !== JSON.stringify(after[k])) lines.push(k + ": " + show(was) + " → " + show(after[k]));
    });
    var calls = after.actions || {}, old = (before && before.actions) || {};
    Object.keys(calls).forEach(function (id) {
      if (JSON.stringify(old[id]) === JSON.stringify(calls[id])) return;
      if (!old[id]) { lines.push("call " + id + " added: " + show(calls[id])); return; }
      Object.keys(calls[id]).forEach(function (k) {
        if (JSON.stringify(old[id][k]) !== JSON.stringify(calls[id][k])) lines.push("call " + id + " " + k + ": " + show(old[id][k]) + " → " + show(calls[id][k]));
      });
    });
    return lines.length ? "What changed in the record with this event:\n" + lines.join("\n") : "The record did not change.";
  }
  document.querySelectorAll("article.run").forEach(function (run) {
    var data = JSON.parse(run.querySelector("script.run-data").textContent);
    var title = run.querySelector(".step-title");
    var ev = run.querySelector(".step-event");
    var rec = run.querySelector(".step-record");
    var changes = run.querySelector(".step-changes");
    run.querySelectorAll("button.step").forEach(function (button) {
      button.addEventListener("click", function () {
        var step = data.steps[Number(button.getAttribute("data-step"))];
        run.querySelectorAll("button.step.on").forEach(function (b) { b.classList.remove("on"); });
        button.classList.add("on");
        run.querySelectorAll("svg.diagram g.node.current").forEach(function (n) { n.classList.remove("current"); });
        run.querySelectorAll("svg.diagram g.node[data-state]").forEach(function (n) {
          if (n.getAttribute("data-state") === step.to) n.classList.add("current");
        });
        title.textContent = "event " + step.seq + ": " + step.type + " — " + step.from + " → " + step.to + (step.condition ? " [" + step.condition + "]" : "") + " at " + step.at;
        ev.textContent = JSON.stringify(step.fields, null, 2);
        rec.textContent = step.record ? JSON.stringify(step.record, null, 2) : "(record not kept for steps this far into a long run)";
        var index = Number(button.getAttribute("data-step"));
        var before = index > 0 ? data.steps[index - 1].record : null;
        changes.textContent = step.record ? changed(before, step.record) : "";
      });
    });
  });
})();
