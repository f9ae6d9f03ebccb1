// memplan pages built on charts.js: the plan page, the diff page, the run page's time chart.
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const fmt = M.fmt;
  const CONFIG = { displaylogo: false, responsive: true };

  // ---- the plan page ------------------------------------------------------------------
  const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));

  M.planPage = function (view, options) {
    view.interactiveUrl = options.interactiveUrl;
    const usable = view.plans.filter((p) => view.offsets[p.id]);
    const pickA = document.getElementById("pick-a"), pickB = document.getElementById("pick-b");
    for (const pick of [pickA, pickB]) for (const p of usable) pick.add(new Option(p.strategy + " (" + fmt(p.arena_bytes) + ")", p.id));
    pickA.value = view.selected;
    pickB.value = view.compare || view.selected;
    const state = { a: null, b: null, xRange: view.x_range, query: view.query || "" };
    M.plan = state;
    if (view.aggregate) state.tensors = view.aggregate.tensors;

    // The left offset chart first, so it is on screen as early as possible; the rest follow.
    function drawOffsets() {
      state.a = M.offsetChart(document.getElementById("chart-offsets-a"), view, pickA.value);
      return state.a.ready
        .then((a) => { a.drawnAt = performance.now(); return nextTask(); })
        .then(() => { state.b = M.offsetChart(document.getElementById("chart-offsets-b"), view, pickB.value); return state.b.ready; })
        .then(() => M.syncZoom([state.a, state.b], (range) => { state.xRange = range; updateUrl(); }))
        .then(() => (M.notes ? M.notes(view, state) : null));  // notes.js marks the plan's notes on new charts
    }
    function search() {
      const hits = M.findTensors(view, state.query);
      const count = document.getElementById("search-count");
      count.textContent = state.query ? hits.length + (hits.length === 500 ? "+" : "") + " found" : "";
      state.hits = hits;
      const live = document.getElementById("chart-live"), b = view.buffers;
      const span = hits.slice(0, 1).map((i) => ({
        type: "rect", xref: "x", yref: "paper", x0: b.first[i] - 0.5, x1: b.last[i] + 0.5, y0: 0, y1: 1,
        fillcolor: "rgba(225,87,89,0.15)", line: { width: 1, color: "#e15759" } }));
      const jobs = [M.highlight(state.a, view, hits), M.highlight(state.b, view, hits)];
      if (live._fullLayout && (span.length || (live.layout.shapes || []).length)) jobs.push(Plotly.relayout(live, { shapes: span }));
      return Promise.all(jobs);
    }
    function updateUrl() {
      const link = document.getElementById("permalink");
      const params = new URLSearchParams();
      if (pickB.value && pickB.value !== pickA.value) params.set("compare", pickB.value);
      if (state.xRange) { params.set("x0", (+state.xRange[0]).toFixed(2)); params.set("x1", (+state.xRange[1]).toFixed(2)); }
      if (state.query) params.set("q", state.query);
      const url = "/plans/" + pickA.value + (params.toString() ? "?" + params : "");
      if (link) link.href = url;
      if (options.interactiveUrl) history.replaceState(null, "", url);
    }
    function redraw() {
      view.x_range = state.xRange;
      state.ready = drawOffsets().then(search);
      updateUrl();
    }
    const input = document.getElementById("search");
    input.addEventListener("input", () => { state.query = input.value; search(); updateUrl(); });
    pickA.addEventListener("change", redraw);
    pickB.addEventListener("change", redraw);
    document.getElementById("legend-kinds").textContent = "colours by kind: " + view.kinds.join(", ");
    state.ready = drawOffsets()
      .then(nextTask)
      .then(() => {
        M.comparisonChart(document.getElementById("chart-compare"), view);
        M.liveChart(document.getElementById("chart-live"), view);
        return search();
      })
      .then(() => (M.review ? M.review(view, state) : null))
      .then(() => state);
    updateUrl();
    if (M.liveRun) M.liveRun(view, state);
    else if (M.runForm) M.runForm();
    const diffForm = document.getElementById("diff-form");
    if (diffForm) diffForm.addEventListener("submit", () => {
      const text = diffForm.elements.other.value.trim(), match = text.match(/plans\/([^/?#]+)/);
      const other = match ? match[1] : text;
      if (other) window.location.href = "/plans/" + encodeURIComponent(diffForm.dataset.plan) + "/diff/" + encodeURIComponent(other);
    });
    return state;
  };

  // ---- the diff page: two plans (of one problem or two) side by side, on the same axes ---------------
  M.diffPage = function (views, ids) {
    const state = {};
    M.diff = state;
    const top = Math.max(...["a", "b"].map((s) => (views[s].plans[0].arena_bytes || 1))) * 1.05;
    const steps = Math.max(views.a.steps, views.b.steps, 1);
    function updateUrl(range) {
      const params = new URLSearchParams();
      if (range) { params.set("x0", (+range[0]).toFixed(2)); params.set("x1", (+range[1]).toFixed(2)); }
      const url = ids.page + (params.toString() ? "?" + params : "");
      document.getElementById("permalink").href = url;
      history.replaceState(null, "", url);
    }
    state.a = M.offsetChart(document.getElementById("chart-offsets-a"), views.a, ids.a);
    state.ready = state.a.ready
      .then(() => { state.b = M.offsetChart(document.getElementById("chart-offsets-b"), views.b, ids.b); return state.b.ready; })
      .then(() => {
        const x = views.a.x_range || [0, steps];
        // One scale for both: the larger arena and the longer schedule.
        const same = { "xaxis.range": x, "yaxis.range": [0, top] };
        return Promise.all([Plotly.relayout(state.a.el, same), Plotly.relayout(state.b.el, same)]);
      })
      .then(() => { M.syncZoom([state.a, state.b], updateUrl); return highlightMoved(); })
      .then(() => state);
    // The tensors the two plans place at different offsets, outlined on both charts.
    function highlightMoved() {
      const moved = ids.moved || [];
      const indexes = (view, key) => {
        const at = new Map(view.buffers.id.map((id, i) => [id, i]));
        return moved.map((row) => at.get(row[key])).filter((i) => i !== undefined);
      };
      state.moved = { a: indexes(views.a, "id_a"), b: indexes(views.b, "id_b") };
      return Promise.all([M.highlight(state.a, views.a, state.moved.a), M.highlight(state.b, views.b, state.moved.b)]);
    }
    return state;
  };

  // ---- the run page's time chart ----------------------------------------------------------
  M.timeChart = function (el, steps) {
    Plotly.newPlot(el, [{
      type: "bar",
      x: steps.map((s) => s.step), y: steps.map((s) => s.seconds * 1000),
      customdata: steps.map((s) => s.name + " (" + s.op_type + ")"),
      hovertemplate: "step %{x}: %{customdata}<br>%{y:.3f} ms<extra></extra>", marker: { color: "#4e79a7" },
    }], { margin: { t: 20, r: 10, b: 40, l: 60 }, xaxis: { title: { text: "step" } }, yaxis: { title: { text: "ms" } } }, CONFIG);
  };
})();
