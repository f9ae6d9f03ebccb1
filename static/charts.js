// memplan charts: strategy comparison, live bytes, offsets over steps. A big plan's offset chart is
// in big_charts.js; the pages built on these charts (plan, diff, run times) in chart_pages.js.
// The page hands over one VIEW object (built by the server for that page); every chart is a few traces,
// so 20,000 tensors stay interactive: rectangles are painted on a canvas shown under the
// axes, and hover is resolved here from the data, not by one Plotly object per tensor.
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const KIND_COLORS = {
    input: "#4e79a7", output: "#e15759", activation: "#59a14f", workspace: "#f28e2b",
    constant: "#9c755f", gradient: "#b07aa1", backprop: "#ff9da7", optimizer: "#76b7b2",
    trainable: "#edc948", disposable: "#bab0ac", extra: "#7f7f7f",
  };
  // ONE's names of a training step's categories, by planner kind: the
  // training charts all name and colour a category the same way through these two maps.
  const ONE_NAMES = {
    activation: "non-const", trainable: "trainable", backprop: "back-prop", gradient: "gradient",
    optimizer: "optimizer variables", disposable: "disposable", extra: "extra",
  };
  const TRAINING_KINDS = ["trainable", "backprop", "gradient", "optimizer"];
  // The kind a category name stands for (ONE's name or the kind itself).
  M.kindOfCategory = (name) => Object.keys(ONE_NAMES).find((k) => ONE_NAMES[k] === name) || name;
  // A kind as a chart names it: ONE's name in a training step's plan, the kind itself otherwise.
  M.kindLabel = (view, kind) => (view && view.kinds && view.kinds.some((k) => TRAINING_KINDS.includes(k)) && ONE_NAMES[kind]) || kind;
  const CONFIG = { displaylogo: false, responsive: true };
  const fmt = (n) => (n === null || n === undefined ? "—" : Number(n).toLocaleString("en-US"));
  const esc = (s) => String(s === null || s === undefined ? "" : s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  M.fmt = fmt;
  M.esc = esc;
  M.kindColor = (kind, i) => kindColor(kind, i);

  function kindColor(kind, i) {
    return KIND_COLORS[kind] || ["#17becf", "#bcbd22", "#8c564b", "#e377c2"][i % 4];
  }

  function stepName(view, s) {
    return view.step_names && view.step_names[s] !== undefined ? view.step_names[s] : "step " + s;
  }

  // ---- a. strategy comparison ----------------------------------------------------------
  // Bars in × LOAD, not bytes: with the naive sum 18× the rest, bytes squash every good plan into
  // one height. The naive sum is a line when it fits and a note at the top when it does not.
  M.comparisonChart = function (el, view) {
    const plans = view.plans.filter((p) => p.arena_bytes !== null);
    const load = Math.max(view.load, 1);
    const ratios = plans.map((p) => p.arena_bytes / load);
    const naive = view.naive / load;
    // Scaled by the placing strategies, not the yardsticks naive and bump: 1.017× must not look like 1.000×.
    const placing = ratios.filter((r, i) => !["naive", "bump"].includes(plans[i].strategy));
    const worst = Math.max(1, ...(placing.length ? placing : ratios));
    const top = Math.max(1.02, worst + (worst - 1) * 0.25 + 0.01);
    const offScale = naive > top;
    const trace = {
      type: "bar",
      x: plans.map((p) => p.strategy),
      y: ratios.map((r) => Math.min(r, top)),
      text: plans.map((p, i) => ratios[i].toFixed(3) + "×" + (ratios[i] > top ? " ↑" : "")),
      textposition: "outside", cliponaxis: false,
      marker: { color: plans.map((p) => (p.id === view.selected ? "#e15759" : p.valid ? "#4e79a7" : "#bab0ac")) },
      customdata: plans.map((p, i) => [p.id, p.seconds, p.valid ? "valid" : "INVALID", fmt(p.arena_bytes), ratios[i]]),
      hovertemplate: "%{x}<br>%{customdata[3]} bytes (%{customdata[4]:.4f}× LOAD)<br>%{customdata[1]:.4f} s, %{customdata[2]}<extra></extra>",
    };
    const shapes = [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: 1, y1: 1, line: { dash: "dash", width: 2, color: "#333" } }];
    // The yardsticks' labels stand right of the plot, clear of the bars' own labels.
    const notes = [{ xref: "paper", x: 1.01, y: 1, text: "LOAD<br>" + fmt(view.load), showarrow: false, xanchor: "left", yanchor: "middle", align: "left", font: { size: 11 } }];
    if (offScale) {
      notes.push({ xref: "paper", yref: "paper", x: 0, y: 1, text: "naive sum " + fmt(view.naive) + " bytes = " + naive.toFixed(1) + "× LOAD, off scale ↑",
        showarrow: false, xanchor: "left", yanchor: "bottom", font: { size: 11 } });
    } else {
      shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: naive, y1: naive, line: { dash: "dot", width: 2, color: "#333" } });
      notes.push({ xref: "paper", x: 1.01, y: naive, text: "naive sum<br>" + fmt(view.naive), showarrow: false, xanchor: "left", yanchor: "middle", align: "left", font: { size: 11 } });
    }
    Plotly.newPlot(el, [trace], {
      margin: { t: 26, r: 90, b: 60, l: 80 },
      yaxis: { title: { text: "arena × LOAD" }, range: [Math.min(0.98, ...ratios) - 0.02, offScale ? top : Math.max(top, naive * 1.05)] },
      shapes: shapes, annotations: notes, showlegend: false,
    }, CONFIG);
    el.on("plotly_click", (ev) => {
      const id = ev.points[0].customdata[0];
      if (view.interactiveUrl) window.location.href = "/plans/" + id + "?compare=" + encodeURIComponent(view.selected);
    });
  };

  // ---- b. live bytes over steps -------------------------------------------------------
  // Live bytes, the selected plan's arena above them, and the gap between the two at each step:
  // fragmentation (bytes the arena holds that nothing live uses), largest where the plan is worst.
  M.liveChart = function (el, view) {
    // A big plan's curve comes downsampled: `live_steps` are the steps of its points.
    const steps = view.live_steps || view.live.map((_, i) => i);
    const names = steps.map((s) => stepName(view, s));
    const plan = view.plans.find((p) => p.id === view.selected);
    const arena = plan && plan.arena_bytes !== null ? plan.arena_bytes : null;
    const curve = {
      // SVG, not WebGL: headless and GPU-less browsers render WebGL in software, far slower.
      type: "scatter", mode: "lines", line: { shape: "hv", color: "#4e79a7" },
      x: steps, y: view.live, customdata: names, name: "live bytes",
      hovertemplate: "step %{x}: %{customdata}<br>%{y:,} bytes live<extra></extra>", fill: "tozeroy",
    };
    const traces = [curve];
    if (arena !== null) {
      traces.push({
        type: "scatter", mode: "lines", line: { shape: "hv", color: "#e15759", width: 1 }, name: "fragmentation",
        x: steps, y: steps.map(() => arena), fill: "tonexty", fillcolor: "rgba(225,87,89,0.12)",
        customdata: view.live.map((v) => arena - v),
        hovertemplate: "arena " + fmt(arena) + " bytes; %{customdata:,} bytes unused at this step<extra></extra>",
      });
    }
    const p = view.peak_step;
    traces.push({
      type: "scatter", mode: "markers+text", x: [p], y: [view.peak_live !== undefined ? view.peak_live : view.live[p] || 0], text: ["peak"], textposition: "top center",
      marker: { size: 11, color: "#e15759", symbol: "diamond" }, name: "peak", cliponaxis: false,
      hovertemplate: "peak (LOAD) at step %{x}: " + esc(stepName(view, p)) + "<br>%{y:,} bytes<extra></extra>",
    });
    const lines = [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: view.load, y1: view.load, line: { dash: "dash", width: 1, color: "#333" } }];
    Plotly.newPlot(el, traces, {
      // The legend above the plot: below it, it sat on the x axis' title.
      margin: { t: 40, r: 10, b: 45, l: 80 }, showlegend: true, legend: { orientation: "h", x: 0, y: 1.02, yanchor: "bottom" },
      xaxis: { title: { text: "step" } }, yaxis: { title: { text: "bytes" }, rangemode: "tozero" },
      shapes: lines,
    }, CONFIG);
  };

  // ---- c. offsets over steps ----------------------------------------------------------
  // Each tensor is the rectangle [first, last + 1) × [offset, offset + size). Plotly takes most
  // of a second to lay out 20,000 SVG polygons; a canvas paints them in milliseconds. So the
  // rectangles are a picture inside Plotly's axes (a layout image), repainted for the visible
  // range after every zoom so it stays sharp, and hover and search are resolved from the data.
  const OUTLINE_MAX = 2000;  // outlines help with a few hundred tensors, smear thousands grey

  function paint(view, chart, hidden) {
    const full = chart.el._fullLayout, xa = full.xaxis, ya = full.yaxis;
    const ratio = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(xa._length)), h = Math.max(1, Math.round(ya._length));
    const canvas = document.createElement("canvas");
    canvas.width = Math.round(w * ratio);
    canvas.height = Math.round(h * ratio);
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    const [x0, x1] = xa.range.map(Number), [y0, y1] = ya.range.map(Number);
    const sx = w / (x1 - x0), sy = h / (y1 - y0);
    const b = view.buffers, offsets = chart.offsets, outline = b.id.length <= OUTLINE_MAX, aliases = b.alias_of;
    g.globalAlpha = 0.85;
    g.lineWidth = 0.5;
    g.strokeStyle = "rgba(0,0,0,0.35)";
    let kind = -1;
    // Problem order, so that where rectangles overlap (an invalid plan) the last one is on
    // top, as M.tensorAt assumes.
    for (let i = 0; i < b.id.length; i++) {
      const off = offsets[i], k = b.kind[i];
      if (off === null || off === undefined || b.size[i] === 0 || hidden[k]) continue;
      const left = (b.first[i] - x0) * sx, right = (b.last[i] + 1 - x0) * sx;
      const top = (y1 - off - b.size[i]) * sy, bottom = (y1 - off) * sy;
      if (right < 0 || left > w || bottom < 0 || top > h) continue;
      if (k !== kind) { g.fillStyle = kindColor(view.kinds[k], k); kind = k; }
      g.fillRect(left, top, right - left, bottom - top);
      if (outline) g.strokeRect(left, top, right - left, bottom - top);
      if (aliases && aliases[i]) {  // an in-place alias: dashed, over the tensor whose bytes it shares
        g.save(); g.setLineDash([5, 3]); g.lineWidth = 2; g.strokeStyle = "#111";
        g.strokeRect(left, top, right - left, bottom - top); g.restore();
      }
    }
    return {
      source: canvas.toDataURL("image/png"), xref: "x", yref: "y", x: x0, y: y1, sizex: x1 - x0, sizey: y1 - y0,
      xanchor: "left", yanchor: "top", sizing: "stretch", layer: "above",  // over the grid, like the traces it replaces
    };
  }

  // Paint the rectangles for the axes as they are now; kinds switched off in the legend stay out.
  function repaint(chart, view) {
    const data = chart.el._fullData || [];
    chart.hidden = view.kinds.map((_, k) => data[k] !== undefined && data[k].visible !== true);
    if (chart.big) { M.paintBig(chart, view); return Promise.resolve(); }
    return Plotly.relayout(chart.el, { images: [paint(view, chart, chart.hidden)] });
  }

  function tooltipHtml(view, offsets, i, strategy) {
    const b = view.buffers;
    // A facts column is null when no tensor has that fact (a problem posted without a model).
    const fact = (key) => (b[key] ? b[key][i] : null);
    const shape = fact("shape") ? fact("shape").join("×") : "";
    const consumers = fact("consumers") && fact("consumers").length ? fact("consumers").join(", ") : "—";
    return "<b>" + esc(b.id[i]) + "</b><br>" +
      esc(M.kindLabel(view, view.kinds[b.kind[i]])) + (shape ? " · " + esc(shape) : "") + (fact("dtype") ? " " + esc(fact("dtype")) : "") + "<br>" +
      fmt(b.size[i]) + " bytes at offset " + fmt(offsets[i]) + " (" + esc(strategy) + ")<br>" +
      "steps " + b.first[i] + "–" + b.last[i] + ": " + esc(stepName(view, b.first[i])) + " → " + esc(stepName(view, b.last[i])) + "<br>" +
      "producer: " + esc(fact("producer") || "—") + "<br>consumers: " + esc(consumers) +
      (fact("alias_of") ? "<br><b>in place over " + esc(fact("alias_of")) + "</b>: it shares those bytes, no collision" : "");
  }

  function rectHtml(view, r, i, strategy) {
    return "<b>" + esc(r.id[i]) + "</b><br>" + esc(view.kinds[r.kind[i]]) + "<br>" +
      fmt(r.size[i]) + " bytes at offset " + fmt(r.offset[i]) + " (" + esc(strategy) + ")<br>" +
      "steps " + r.first[i] + "–" + r.last[i] + ": " + esc(stepName(view, r.first[i])) + " → " + esc(stepName(view, r.last[i]));
  }

  M.offsetChart = function (el, view, planId) {
    const plan = view.plans.find((p) => p.id === planId);
    const offsets = view.offsets[planId];
    // One empty trace per kind: the legend (and clicking it hides a kind); the picture is painted.
    const traces = view.kinds.map((kind, k) => ({
      type: "scatter", mode: "none", fill: "toself", name: M.kindLabel(view, kind), x: [null], y: [null], hoverinfo: "skip",
      fillcolor: kindColor(kind, k), opacity: 0.85,
    }));
    if (view.buffers.alias_of) {  // after the kinds: the legend's kinds keep their trace indexes
      traces.push({ type: "scatter", mode: "lines", name: "dashed: in place over its input (shared bytes)", x: [null], y: [null],
        hoverinfo: "skip", line: { dash: "dash", width: 2, color: "#111" } });
    }
    const arena = plan ? plan.arena_bytes : 0;
    const steps = Math.max(view.steps, 1), top = Math.max(arena, 1) * 1.05;  // headroom shows the arena line
    // Two invisible corners, last: what the autoscale button and a double click fit to.
    traces.push({ type: "scatter", mode: "none", x: [0, steps], y: [0, top], hoverinfo: "skip", showlegend: false });
    const layout = {
      title: { text: (plan ? plan.strategy + ": " + fmt(arena) + " bytes" : planId), font: { size: 13 } },
      margin: { t: 34, r: 10, b: 90, l: 80 }, hovermode: false, dragmode: "zoom",
      xaxis: { title: { text: "step" }, range: [0, steps] },
      yaxis: { title: { text: "offset (bytes)" }, range: [0, top] },
      shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: arena, y1: arena, line: { dash: "dash", color: "#e15759", width: 1 } }],
      // At the foot of the figure, below the step axis' title (a fraction of the plot height put it on the title).
      legend: { orientation: "h", yref: "container", y: 0, yanchor: "bottom" },
    };
    if (view.x_range) layout.xaxis.range = view.x_range.slice();
    const started = performance.now();
    const chart = { el, planId, offsets, strategy: plan ? plan.strategy : planId, baseShapes: layout.shapes, outlined: 0 };
    el._mpChart = chart;
    if (view.aggregate) M.bigChart(chart, view, layout);
    chart.ready = Plotly.newPlot(el, traces, layout, CONFIG)
      .then(() => repaint(chart, view))
      .then(() => {
        chart.renderMs = performance.now() - started;
        if (chart.big) { M.bigNote(); M.fetchWindow(chart, view); }
        return chart;
      });
    // Zoom, pan, resize or a legend click: paint again at the new scale.
    el.on("plotly_relayout", (ev) => {
      if (!Object.keys(ev).some((key) => /^(xaxis|yaxis|autosize|width|height)/.test(key))) return;
      repaint(chart, view);
      if (chart.big) M.fetchWindow(chart, view);
    });
    // A big plan's picture is a canvas of its own: it follows a drag as it happens.
    if (view.aggregate) el.on("plotly_relayouting", () => repaint(chart, view));
    el.on("plotly_restyle", () => repaint(chart, view));
    attachHover(chart, view);
    return chart;
  };

  // The tensor under the pointer, found from the data: last drawn wins, like the picture.
  // `hidden` (optional) marks kinds switched off in the legend, which are not in the picture.
  M.tensorAt = function (view, offsets, x, y, hidden) {
    const b = view.buffers;
    for (let i = b.id.length - 1; i >= 0; i--) {
      const off = offsets[i];
      if (off === null || x < b.first[i] || x >= b.last[i] + 1 || y < off || y >= off + b.size[i]) continue;
      if (hidden && hidden[b.kind[i]]) continue;
      return i;
    }
    return -1;
  };

  function attachHover(chart, view) {
    const el = chart.el;
    // One tooltip per chart element, in the body so that redrawing the chart keeps it.
    if (!el._mpTip) {
      el._mpTip = document.createElement("div");
      el._mpTip.className = "mp-tooltip";
      el._mpTip.hidden = true;
      document.body.appendChild(el._mpTip);
    }
    const tip = el._mpTip;
    chart.tooltip = tip;
    if (el._mpMove) el.removeEventListener("mousemove", el._mpMove);
    el._mpMove = (ev) => {
      const full = el._fullLayout;
      if (!full || !full.xaxis) return;
      const box = el.getBoundingClientRect();
      const px = ev.clientX - box.left - full.xaxis._offset;
      const py = ev.clientY - box.top - full.yaxis._offset;
      if (px < 0 || py < 0 || px > full.xaxis._length || py > full.yaxis._length) { tip.hidden = true; return; }
      const x = full.xaxis.p2c(px), y = full.yaxis.p2c(py);
      if (chart.big) {
        const hit = M.bigRectAt(chart, x, y);
        if (!hit) { tip.hidden = true; return; }
        tip.innerHTML = rectHtml(view, hit.rects, hit.i, chart.strategy);
        tip.dataset.tensor = hit.rects.id[hit.i];
      } else {
        const i = M.tensorAt(view, chart.offsets, x, y, chart.hidden);
        if (i < 0) { tip.hidden = true; return; }
        tip.innerHTML = tooltipHtml(view, chart.offsets, i, chart.strategy);
        tip.dataset.tensor = view.buffers.id[i];
      }
      tip.hidden = false;
      tip.style.left = Math.max(0, Math.min(ev.clientX + 14, window.innerWidth - 300)) + "px";
      tip.style.top = (ev.clientY + 14) + "px";
    };
    el.addEventListener("mousemove", el._mpMove);
    if (!el._mpLeave) {
      el._mpLeave = () => { tip.hidden = true; };
      el.addEventListener("mouseleave", el._mpLeave);
    }
  }

  // Viewport pixel of a tensor's centre, after scrolling its chart into view (for tests).
  M.pixelOf = function (chart, view, i) {
    chart.el.scrollIntoView({ block: "center" });
    const full = chart.el._fullLayout, box = chart.el.getBoundingClientRect(), b = view.buffers;
    const x = (b.first[i] + b.last[i] + 1) / 2, y = chart.offsets[i] + b.size[i] / 2;
    return { x: box.left + full.xaxis._offset + full.xaxis.c2p(x), y: box.top + full.yaxis._offset + full.yaxis.c2p(y) };
  };

  M.findTensors = function (view, query) {
    const q = (query || "").trim().toLowerCase();
    if (!q) return [];
    const hits = [];
    const ids = view.buffers.id;
    for (let i = 0; i < ids.length && hits.length < 500; i++) if (ids[i].toLowerCase().includes(q)) hits.push(i);
    // an exact name first
    hits.sort((a, b) => (ids[b].toLowerCase() === q) - (ids[a].toLowerCase() === q));
    return hits;
  };

  // Found tensors are outlined with layout shapes: relayout redraws shapes only, not the picture.
  const MAX_OUTLINED = 200;
  M.highlight = function (chart, view, hits) {
    const b = view.buffers;
    const found = hits.slice(0, MAX_OUTLINED).filter((i) => chart.offsets[i] !== null && chart.offsets[i] !== undefined).map((i) => ({
      type: "rect", xref: "x", yref: "y", x0: b.first[i], x1: b.last[i] + 1, y0: chart.offsets[i], y1: chart.offsets[i] + b.size[i],
      line: { width: 2.5, color: "#000" }, fillcolor: "rgba(255,255,0,0.35)",
    }));
    if (!found.length && !chart.outlined) return Promise.resolve();
    chart.outlined = found.length;
    chart.foundShapes = found;
    return Plotly.relayout(chart.el, { shapes: chart.baseShapes.concat(found) });
  };

  // Zoom one chart, zoom them all (same steps, same bytes).
  M.syncZoom = function (charts, onChange) {
    let busy = false;
    charts.forEach((c) => c.el.on("plotly_relayout", (ev) => {
      if (busy) return;
      const update = {};
      for (const key of Object.keys(ev)) if (key.startsWith("xaxis.") || key.startsWith("yaxis.")) update[key] = ev[key];
      if (!Object.keys(update).length) return;
      busy = true;
      Promise.all(charts.filter((o) => o !== c).map((o) => Plotly.relayout(o.el, update))).finally(() => { busy = false; });
      if (onChange) onChange(c.el._fullLayout.xaxis.range);
    }));
  };
})();
