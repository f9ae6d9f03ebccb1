// memplan sweeps: start one from the form; follow one live (rows as the workers finish them),
// with a table and one arena × LOAD heatmap per dims.
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const CONFIG = { displaylogo: false, responsive: true };
  const dimsLabel = (dims) => Object.keys(dims).sort().map((k) => k + "=" + dims[k]).join(" ") || "as declared";

  // 'batch=1,8,seq=64,128' -> every combination, as `memplan sweep --dims` reads it.
  M.dimsGrid = function (text) {
    const values = {};
    let name = null;
    for (const part of text.split(",").map((p) => p.trim()).filter(Boolean)) {
      let value = part;
      if (part.includes("=")) { [name, value] = part.split("=").map((x) => x.trim()); values[name] = []; }
      if (name === null) throw { detail: "dims: " + part + " has no name; write name=value[,value...]" };
      values[name].push(Number(value));
    }
    let grid = [{}];
    for (const key of Object.keys(values).sort()) grid = grid.flatMap((g) => values[key].map((v) => ({ ...g, [key]: v })));
    return grid;
  };

  M.sweepForm = function () {
    const form = document.getElementById("sweep-form");
    if (!form) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      try {
        const body = {
          models: [...form.querySelectorAll("[name=model]:checked")].map((el) => el.value),
          strategies: [...form.querySelectorAll("[name=strategy]:checked")].map((el) => el.value),
          dims: M.dimsGrid(form.elements.dims.value),
        };
        const sweep = await M.readJson(await fetch("/api/v1/sweeps", {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) }));
        window.location.href = sweep.links.page;
      } catch (problem) { M.showError(problem); }
    });
  };

  function ratio(row) { return row.valid && row.lower_bound ? row.arena_bytes / row.lower_bound : null; }

  function table(rows) {
    const body = document.querySelector("#sweep-table tbody");
    body.innerHTML = rows.map((r) => "<tr><td title=\"" + M.esc(r.model) + "\">" + M.esc(r.model_name || r.model) + "</td><td>" + M.esc(dimsLabel(r.dims)) + "</td><td>" + M.esc(r.strategy) +
      "</td><td class=\"num\">" + M.fmt(r.arena_bytes) + "</td><td class=\"num\">" + M.fmt(r.lower_bound) + "</td><td class=\"num\">" +
      (ratio(r) === null ? "—" : ratio(r).toFixed(4)) + "</td><td class=\"num\">" + (r.seconds || 0).toFixed(3) + "</td><td>" +
      (r.valid ? "yes" : M.esc(r.error || "no")) + "</td></tr>").join("");
    document.getElementById("sweep-count").textContent = "(" + rows.length + ")";
  }

  function heatmaps(rows) {
    const host = document.getElementById("sweep-heatmaps");
    const panels = new Map();
    for (const r of rows) {
      const label = dimsLabel(r.dims);
      if (!panels.has(label)) panels.set(label, []);
      panels.get(label).push(r);
    }
    host.innerHTML = "";
    for (const [label, panel] of [...panels.entries()].sort()) {
      const models = [...new Set(panel.map((r) => r.model))].sort(), strategies = [...new Set(panel.map((r) => r.strategy))].sort();
      const label_of = (m) => { const r = panel.find((x) => x.model === m); return (r && r.model_name) || m; };
      const z = models.map((m) => strategies.map((s) => { const r = panel.find((x) => x.model === m && x.strategy === s); return r ? ratio(r) : null; }));
      const el = document.createElement("div");
      el.className = "chart short";
      host.appendChild(el);
      // Coloured by the placing strategies, not the yardsticks naive and bump (their cells saturate and
      // keep their figures), so that 1.017× and 1.000× differ; the names get the room they need.
      const placing = [];
      models.forEach((m, i) => strategies.forEach((s, j) => { if (z[i][j] !== null && !["naive", "bump"].includes(s)) placing.push(z[i][j]); }));
      const zmax = Math.max(1.02, ...placing);
      const longest = Math.max(...models.map((m) => String(label_of(m)).length));
      Plotly.newPlot(el, [{ type: "heatmap", x: strategies, y: models.map(label_of), z: z, colorscale: "YlOrRd", reversescale: true, zmin: 1, zmax: zmax,
        text: z.map((row) => row.map((v) => (v === null ? "—" : v.toFixed(3) + "×"))), texttemplate: "%{text}",
        hovertemplate: "%{y} · %{x}: %{z:.4f}× LOAD<extra>" + M.esc(label) + "</extra>", colorbar: { title: { text: "× LOAD" } } }],
        { title: { text: label, font: { size: 13 } }, margin: { t: 30, r: 10, b: 80, l: Math.min(360, 20 + 7 * longest) },
          yaxis: { automargin: true }, xaxis: { automargin: true } }, CONFIG);
    }
  }

  M.sweepPage = function (sweep) {
    const state = { rows: sweep.results.slice(), sweep };
    M.sweep = state;
    const draw = () => { table(state.rows); heatmaps(state.rows); };
    draw();
    if (["done", "failed", "cancelled"].includes(sweep.state)) { state.ready = Promise.resolve(state); return state; }
    let pending = false;
    state.ready = M.follow(sweep.id, (p) => {
      document.getElementById("sweep-progress").value = p.progress || 0;
      document.getElementById("sweep-message").textContent = p.message || "";
      document.getElementById("sweep-state").textContent = "running";
      if (p.row && !state.rows.some((r) => r.model === p.row.model && r.strategy === p.row.strategy && dimsLabel(r.dims) === dimsLabel(p.row.dims))) {
        state.rows.push(p.row);
        if (!pending) { pending = true; requestAnimationFrame(() => { pending = false; draw(); }); }
      }
    }).then((done) => {
      state.rows = done.result.rows;
      document.getElementById("sweep-progress").value = 1;
      document.getElementById("sweep-state").textContent = "done";
      draw();
      return state;
    }).catch((problem) => { document.getElementById("sweep-state").textContent = "failed"; M.showError(problem || {}); return state; });
    return state;
  };
})();
