// memplan review tools on a plan page: the tensors alive at the peak picked out on the offset
// charts, a histogram of tensor sizes, and a sortable table of every tensor (and its CSV).
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const CONFIG = { displaylogo: false, responsive: true };
  const TABLE_ROWS = 500;  // rows drawn at once; the CSV has every tensor

  M.aliveAt = function (view, step) {
    const b = view.buffers, hits = [];
    for (let i = 0; i < b.id.length; i++) if (b.first[i] <= step && step <= b.last[i]) hits.push(i);
    return hits.sort((x, y) => b.size[y] - b.size[x] || (b.id[x] < b.id[y] ? -1 : 1));
  };

  // Tensor sizes on a log scale, one colour per kind: where the bytes are, at a glance.
  M.sizeHistogram = function (el, view) {
    const b = view.buffers;
    const traces = view.kinds.map((kind, k) => ({
      type: "histogram", name: kind, opacity: 0.85, marker: { color: M.kindColor(kind, k) },
      x: b.size.filter((s, i) => b.kind[i] === k && s > 0).map((s) => Math.log2(s)),
      xbins: { size: 0.5 }, hovertemplate: "2^%{x} bytes: %{y} tensors<extra>" + M.esc(kind) + "</extra>",
    }));
    const ticks = [];
    for (let e = 0; e <= 40; e += 2) ticks.push(e);
    return Plotly.newPlot(el, traces, {
      barmode: "stack", margin: { t: 10, r: 10, b: 50, l: 60 }, legend: { orientation: "h", y: -0.3 },
      xaxis: { title: { text: "tensor size (bytes, log scale)" }, tickvals: ticks, ticktext: ticks.map((e) => M.fmt(2 ** e)) },
      yaxis: { title: { text: "tensors" } },
    }, CONFIG);
  };

  const COLUMNS = [
    ["name", (v, i) => v.buffers.id[i]],
    ["kind", (v, i) => v.kinds[v.buffers.kind[i]]],
    ["shape", (v, i) => (v.buffers.shape && v.buffers.shape[i] ? v.buffers.shape[i].join("×") : "")],
    ["dtype", (v, i) => (v.buffers.dtype ? v.buffers.dtype[i] || "" : "")],
    ["bytes", (v, i) => v.buffers.size[i]],
    ["first", (v, i) => v.buffers.first[i]],
    ["last", (v, i) => v.buffers.last[i]],
    ["offset", (v, i, offsets) => offsets[i]],
    ["producer", (v, i) => (v.buffers.producer ? v.buffers.producer[i] || "" : "")],
    ["consumers", (v, i) => (v.buffers.consumers && v.buffers.consumers[i] ? v.buffers.consumers[i].join(", ") : "")],
  ];

  // Every tensor, largest first; a click on a heading sorts by it (again: the other way).
  M.tensorTable = function (table, view, planId) {
    const offsets = view.offsets[planId] || [];
    const state = { key: "bytes", down: true, only: null };
    const rows = view.buffers.id.map((_, i) => i);
    function render() {
      const col = COLUMNS.find((c) => c[0] === state.key);
      const chosen = state.only ? state.only.slice() : rows.slice();
      chosen.sort((x, y) => {
        const a = col[1](view, x, offsets), b = col[1](view, y, offsets);
        // Code-point order for text: the same order as the CSV sorted anywhere else.
        const order = typeof a === "number" && typeof b === "number" ? a - b : String(a) < String(b) ? -1 : String(a) > String(b) ? 1 : 0;
        return (state.down ? -order : order) || x - y;
      });
      const head = "<thead><tr>" + COLUMNS.map((c) => "<th data-key=\"" + c[0] + "\"" + (["bytes", "first", "last", "offset"].includes(c[0]) ? " class=\"num\"" : "") + ">" + c[0] +
        (c[0] === state.key ? (state.down ? " ▾" : " ▴") : "") + "</th>").join("") + "</tr></thead>";
      const body = chosen.slice(0, TABLE_ROWS).map((i) => "<tr>" + COLUMNS.map((c) => {
        const value = c[1](view, i, offsets);
        return typeof value === "number" ? "<td class=\"num\">" + M.fmt(value) + "</td>" : "<td>" + M.esc(value) + "</td>";
      }).join("") + "</tr>").join("");
      table.innerHTML = head + "<tbody>" + body + "</tbody>";
      const note = document.getElementById("tensor-count");
      if (note) note.textContent = chosen.length > TABLE_ROWS ? "first " + TABLE_ROWS + " of " + M.fmt(chosen.length) + " (the CSV has them all)" : M.fmt(chosen.length) + " tensors";
    }
    table.addEventListener("click", (ev) => {
      const th = ev.target.closest("th");
      if (!th) return;
      state.down = th.dataset.key === state.key ? !state.down : true;
      state.key = th.dataset.key;
      render();
    });
    state.render = render;
    render();
    return state;
  };

  // Wire the tools to a plan page (`state` from Memplan.planPage).
  M.review = function (view, state) {
    const peak = M.aliveAt(view, view.peak_step);
    const table = M.tensorTable(document.getElementById("tensor-table"), view, view.selected);
    const button = document.getElementById("peak-filter");
    state.review = { peak, table, peakOnly: false };
    button.addEventListener("click", () => {
      const on = (state.review.peakOnly = !state.review.peakOnly);
      button.textContent = on ? "show every tensor" : "only the tensors alive at the peak";
      button.setAttribute("aria-pressed", String(on));
      table.only = on ? peak : null;
      table.render();
      if (on) document.getElementById("tensor-table").scrollIntoView({ behavior: "instant", block: "start" });  // far below the button
      const hits = on ? peak : [];
      return Promise.all([M.highlight(state.a, view, hits), M.highlight(state.b, view, hits)]);
    });
    return M.sizeHistogram(document.getElementById("chart-sizes"), view);
  };
})();
