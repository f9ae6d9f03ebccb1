// memplan notes on a plan page: the reviewers' notes listed, a form to add one (a click on a tensor
// of an offset chart picks that tensor and step), and every note on a tensor drawn on the offset
// chart of its plan, at that tensor and step. Plan-wide notes are listed only.
// A note is someone's text: it reaches the page through textContent only, and Plotly (whose labels
// read a little HTML) only escaped. The page asks for the notes again every few seconds, so
// another reviewer's notes appear without a reload; the offline report shows those it was made with.
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const POLL_MS = 5000;
  const AUTHOR_KEY = "memplan.noteAuthor";  // the name field, remembered in this browser
  const LABEL_CHARS = 32;  // of a note's text on the chart; the hover has it all
  const WRAP_CHARS = 60;
  const MARK = "note";  // the `name` of our annotations: others' (a run's canary hit) are kept

  // Plotly reads <b>, <br>, <a href> ... in labels, and decodes &amp; &lt; &gt; but not &quot;:
  // escaping these three keeps every tag out and shows the text as written.
  const plotlyText = (s) => String(s).replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);
  const when = (created) => new Date(created * 1000).toISOString().slice(0, 16).replace("T", " ") + " UTC";

  // Lines of at most about `width` characters, broken at spaces where there are some.
  function wrap(text, width) {
    const lines = [];
    for (const paragraph of String(text).split("\n")) {
      let line = "";
      for (const word of paragraph.split(" ")) {
        if (line && line.length + 1 + word.length > width) { lines.push(line); line = ""; }
        line = line ? line + " " + word : word;
        while (line.length > width) { lines.push(line.slice(0, width)); line = line.slice(width); }
      }
      lines.push(line);
    }
    return lines;
  }

  function noteItem(note, writes) {
    const li = document.createElement("li");
    li.dataset.note = note.id;
    if (note.tensor !== null && note.tensor !== undefined) {
      const at = document.createElement("code");
      at.className = "note-at";
      at.textContent = note.tensor + "@" + note.step;
      li.append(at, " ");
    }
    const text = document.createElement("span");
    text.className = "note-text";
    text.style.whiteSpace = "pre-wrap";
    text.textContent = note.text;
    const by = document.createElement("span");
    by.className = "muted note-by";
    const time = document.createElement("time");
    time.dateTime = new Date(note.created * 1000).toISOString();
    time.textContent = when(note.created);
    by.append("— " + (note.author || "anonymous") + ", ", time);
    li.append(text, " ", by);
    if (writes) {
      const del = document.createElement("button");
      del.type = "button";
      del.className = "link note-delete";
      del.dataset.note = note.id;
      del.textContent = "delete";
      li.append(" ", del);
    }
    return li;
  }

  // The chart's annotations for the notes on tensors: an arrow to the tensor at its step. The
  // tensor is found among the page's tensors (a big plan's page holds only its largest), else by
  // the note's `at` ([offset, size] in this plan, from the server or from the click that picked it).
  function marks(view, chart, notes) {
    if (!chart || chart.planId !== view.selected) return [];
    const b = view.buffers || { id: [], size: [] }, offsets = chart.offsets || [];
    const index = new Map(b.id.map((id, i) => [id, i]));
    const out = [];
    for (const note of notes) {
      if (note.tensor === null || note.tensor === undefined) continue;
      const i = index.get(note.tensor);
      const known = i !== undefined && offsets[i] !== null && offsets[i] !== undefined;
      const at = known ? [offsets[i], b.size[i]] : note.at;
      if (!at) continue;
      const label = note.text.length > LABEL_CHARS ? note.text.slice(0, LABEL_CHARS) + "…" : note.text;
      const hover = [(note.author || "anonymous") + " on " + note.tensor + " at step " + note.step + ":"].concat(wrap(note.text, WRAP_CHARS));
      out.push({
        name: MARK, xref: "x", yref: "y", x: note.step + 0.5, y: at[0] + at[1] / 2,
        text: "✎ " + plotlyText(label.replace(/\s+/g, " ")), hovertext: hover.map(plotlyText).join("<br>"),
        showarrow: true, arrowhead: 2, arrowcolor: "#b45309", ax: 24, ay: -28,
        bgcolor: "#fffbeb", bordercolor: "#b45309", font: { size: 11, color: "#78350f" },
        hoverlabel: { bgcolor: "#fffbeb", bordercolor: "#b45309", font: { color: "#111" } },
      });
    }
    return out;
  }

  function draw(view, state, notes) {
    const jobs = [state.a, state.b].filter((c) => c && c.el && c.el._fullLayout).map((chart) => {
      const mine = marks(view, chart, notes);
      const others = (chart.el.layout.annotations || []).filter((a) => a.name !== MARK);
      const had = (chart.el.layout.annotations || []).length - others.length;
      chart.noteMarks = mine.length;
      keepMarks(view, state, chart);
      return had || mine.length ? Plotly.relayout(chart.el, { annotations: others.concat(mine) }) : null;
    });
    return Promise.all(jobs).catch(() => null);  // a chart redrawn meanwhile: the hook draws again
  }

  // Whoever sets the chart's annotations (a run's canary hit) replaces ours: draw them again beside theirs.
  function keepMarks(view, state, chart) {
    if (chart.watchingNotes) return;
    chart.watchingNotes = true;  // one listener per chart: a new chart (a new plot) gets its own
    chart.el.on("plotly_relayout", (ev) => {
      if (!Object.keys(ev).some((k) => k.startsWith("annotations"))) return;
      const shown = (chart.el.layout.annotations || []).filter((a) => a.name === MARK).length;
      if (shown >= chart.noteMarks) chart.noteRetries = 0;
      else if (state.notes && (chart.noteRetries = (chart.noteRetries || 0) + 1) <= 3) draw(view, state, state.notes.list);
    });
  }

  // Called by charts.js each time the offset charts are drawn; wires the section the first time.
  M.notes = function (view, state) {
    try {
      if (!state.notes) state.notes = wire(view, state);
      return draw(view, state, state.notes.list);
    } catch (e) {  // the charts stay usable whatever happens here
      console.error("notes:", e);
      return null;
    }
  };

  function wire(view, state) {
    const section = document.getElementById("notes");
    const notes = { list: (view.notes || []).slice(), polls: 0 };
    if (!section) return notes;
    const writes = section.dataset.writes === "1";
    const planId = section.dataset.plan;
    const url = "/api/v1/plans/" + encodeURIComponent(planId) + "/notes";
    const listEl = document.getElementById("notes-list");

    const key = (list) => list.map((n) => n.id).join(" ");  // notes are never edited: their ids say it all
    function update(list) {
      notes.list = list.slice().sort((x, y) => x.created - y.created || (x.id < y.id ? -1 : x.id > y.id ? 1 : 0));
      listEl.replaceChildren(...notes.list.map((n) => noteItem(n, writes)));
      document.getElementById("notes-count").textContent = String(notes.list.length);
      document.getElementById("notes-empty").hidden = notes.list.length > 0;
      return draw(view, state, notes.list);
    }
    notes.update = update;

    if (view.interactiveUrl) {
      // Another reviewer's notes, every few seconds while the page is in view.
      notes.poll = () => {
        if (document.visibilityState === "hidden") return Promise.resolve();
        return fetch(url, { headers: { accept: "application/json" } })
          .then((r) => (r.ok ? r.json() : null))
          .then((list) => {
            notes.polls += 1;
            if (!list || key(list) === key(notes.list)) return null;
            const known = new Map(notes.list.map((n) => [n.id, n]));  // keep what the page knew of each: its `at`
            return update(list.map((n) => (known.has(n.id) ? { ...known.get(n.id), ...n, at: known.get(n.id).at } : n)));
          })
          .catch(() => null);  // offline for a moment: keep what is shown
      };
      notes.timer = setInterval(notes.poll, POLL_MS);
    }

    const form = document.getElementById("note-form");
    if (form) wireForm(view, state, notes, form, url, update);
    listEl.addEventListener("click", (ev) => {
      const button = ev.target.closest(".note-delete");
      if (!button) return;
      button.disabled = true;
      fetch(url + "/" + encodeURIComponent(button.dataset.note), { method: "DELETE" })
        .then((r) => (r.ok || r.status === 404 ? null : M.readJson(r)))
        .then(() => update(notes.list.filter((n) => n.id !== button.dataset.note)))
        .catch((problem) => { button.disabled = false; M.showError(problem); });
    });
    return notes;
  }

  function wireForm(view, state, notes, form, url, update) {
    try { form.elements.author.value = localStorage.getItem(AUTHOR_KEY) || ""; } catch (e) { /* storage off */ }
    pickOnClick(view, state, form);
    document.getElementById("note-plan-wide").addEventListener("click", () => {
      form.elements.tensor.value = "";
      form.elements.step.value = "";
    });
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const f = form.elements, button = document.getElementById("note-add"), body = { text: f.text.value };
      if (f.tensor.value.trim()) body.tensor = f.tensor.value.trim();
      if (f.step.value.trim()) body.step = Number(f.step.value);
      if (f.author.value.trim()) body.author = f.author.value.trim();
      try { localStorage.setItem(AUTHOR_KEY, f.author.value.trim()); } catch (e) { /* storage off */ }
      button.disabled = true;
      M.clearError();
      fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
        .then(M.readJson)
        .then((note) => {
          const picked = form._picked;
          if (picked && picked.tensor === note.tensor) note.at = picked.at;
          f.text.value = "";
          return update(notes.list.filter((n) => n.id !== note.id).concat([note]));
        })
        .catch((problem) => M.showError(problem))
        .finally(() => { button.disabled = false; });
    });
  }

  // A click (not a drag to zoom) on a tensor of either offset chart fills in the tensor and the step.
  function pickOnClick(view, state, form) {
    for (const id of ["chart-offsets-a", "chart-offsets-b"]) {
      const el = document.getElementById(id);
      if (!el) continue;
      let down = null;
      el.addEventListener("mousedown", (ev) => { down = [ev.clientX, ev.clientY]; });
      el.addEventListener("click", (ev) => {
        const chart = [state.a, state.b].find((c) => c && c.el === el), full = el._fullLayout;
        if (!chart || !full || !full.xaxis || !down || Math.hypot(ev.clientX - down[0], ev.clientY - down[1]) > 4) return;
        const box = el.getBoundingClientRect();
        const x = full.xaxis.p2c(ev.clientX - box.left - full.xaxis._offset);
        const y = full.yaxis.p2c(ev.clientY - box.top - full.yaxis._offset);
        let b = view.buffers, i = -1, at = null;
        if (chart.big && M.bigRectAt) {  // a big plan: the rectangles of the window in view
          const hit = M.bigRectAt(chart, x, y);
          if (hit) { b = hit.rects; i = hit.i; at = [b.offset[i], b.size[i]]; }
        } else if (b && chart.offsets) {
          i = M.tensorAt(view, chart.offsets, x, y, chart.hidden);
          if (i >= 0) at = [chart.offsets[i], b.size[i]];
        }
        if (i < 0) return;
        // Where the tensor is in the chart's plan: drawn there once the note is added (when that plan is this one).
        form._picked = chart.planId === view.selected ? { tensor: b.id[i], at } : null;
        form.elements.tensor.value = b.id[i];
        form.elements.step.value = String(Math.min(b.last[i], Math.max(b.first[i], Math.floor(x))));
        form.elements.text.focus({ preventScroll: true });
      });
    }
  }
})();
