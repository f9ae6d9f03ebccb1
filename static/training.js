// Training memory: the demo's loss chart, and a step's arena bytes by category (both plans).
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const CONFIG = { displaylogo: false, responsive: true };
  const COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#bab0ac"];

  // Two stacked bars: each category's own arena, and what each category holds of the unified arena
  // at its peak step (plus the bytes unused at that step).
  M.categoryChart = function (el, breakdown) {
    const x = ["one arena per category", "unified arena (at its peak step)"];
    const traces = breakdown.categories.map((c, i) => ({
      // One name and colour per category on every training chart (charts.js: ONE's names, kinds' colours).
      type: "bar", name: c.category, x: x, y: [c.per_category_bytes, c.unified_peak_bytes],
      marker: { color: M.kindColor ? M.kindColor(M.kindOfCategory(c.category), i) : COLORS[i % COLORS.length] },
      hovertemplate: c.category + ": %{y:,} bytes<extra></extra>",
    }));
    traces.push({
      type: "bar", name: "unused at the peak", x: x, y: [0, breakdown.unused_at_peak_bytes],
      marker: { color: "#e5e7eb" }, hovertemplate: "unused: %{y:,} bytes<extra></extra>",
    });
    return Plotly.newPlot(el, traces, {
      barmode: "stack", margin: { t: 30, r: 10, b: 40, l: 80 }, yaxis: { title: { text: "bytes" } },
      title: { text: breakdown.per_category_total.toLocaleString() + " bytes per category vs " +
        breakdown.unified_bytes.toLocaleString() + " unified", font: { size: 13 } },
    }, CONFIG);
  };

  // The recomputation search's Pareto curve (each point placed and checked) and the point chosen.
  M.rematChart = function (el, remat) {
    const curve = remat.curve || [];
    return Plotly.newPlot(el, [
      { type: "scatter", mode: "lines+markers", line: { shape: "hv", color: "#4e79a7" }, name: "smallest placed arena",
        x: curve.map((p) => 100 * p.extra_flops), y: curve.map((p) => p.arena_bytes),
        hovertemplate: "+%{x:.1f}% FLOPs: %{y:,} bytes<extra></extra>" },
      { type: "scatter", mode: "markers", name: "chosen", marker: { size: 12, color: "#e15759", symbol: "star" },
        x: [100 * remat.extra_flops], y: [remat.arena_bytes], hovertemplate: "chosen: %{y:,} bytes<extra></extra>" },
    ], {
      margin: { t: 10, r: 10, b: 40, l: 80 }, xaxis: { title: { text: "extra FLOPs (%)" } }, yaxis: { title: { text: "arena bytes" } },
    }, CONFIG);
  };

  // The steps recomputation added (named "<node>/remat"), shaded on the plan's live-bytes chart, runs of
  // neighbouring steps as one band.
  M.markRecomputed = function (view, state) {
    if (!view || !state || !view.step_names) return;
    const bands = [];
    view.step_names.forEach((name, s) => {
      if (!String(name).endsWith("/remat")) return;
      const last = bands[bands.length - 1];
      if (last && last.x1 === s - 0.5) last.x1 = s + 0.5;
      else bands.push({ type: "rect", xref: "x", yref: "paper", x0: s - 0.5, x1: s + 0.5, y0: 0, y1: 1,
        fillcolor: "#b07aa1", opacity: 0.2, line: { width: 0 }, layer: "below", name: "recomputed" });
    });
    if (!bands.length) return;
    state.ready.then(() => Plotly.relayout(state.live, { shapes: (state.live.layout.shapes || []).concat(bands) }));
  };

  M.lossChart = function (el, losses) {
    return Plotly.newPlot(el, [{
      type: "scatter", mode: "lines", name: "loss", x: losses.map((_, i) => i + 1), y: losses.slice(),
      line: { color: "#e15759" },
    }], {
      margin: { t: 10, r: 10, b: 40, l: 60 }, xaxis: { title: { text: "step" } }, yaxis: { title: { text: "loss" }, rangemode: "tozero" },
    }, CONFIG);
  };

  M.trainingPage = function (data) {
    const form = document.getElementById("training-form");
    if (form) form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const body = {
        model: form.elements.model.value, steps: Number(form.elements.steps.value),
        batch: Number(form.elements.batch.value), optimizer: form.elements.optimizer.value,
        strategy: form.elements.strategy.value, canary: form.elements.canary.checked, ...M.readStepMemory(form),
        remat: form.elements.remat.value.trim() || "off", remat_overhead: Number(form.elements.remat_overhead.value),
      };
      try {
        const job = await M.readJson(await fetch("/api/v1/training/demo", {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
        }));
        window.location.href = "/training/demo/" + job.id;
      } catch (problem) { M.showError(problem); }
    });
    const job = data.job;
    if (!job) return;
    const chart = document.getElementById("chart-loss");
    if (job.result) {
      M.lossChart(chart, job.result.losses);
      M.categoryChart(document.getElementById("chart-categories"), job.result);
      if (job.result.remat) M.rematChart(document.getElementById("chart-remat"), job.result.remat);
      return;
    }
    const hit = job.state === "failed" && job.error && job.error.canary;
    if (!hit && (job.state === "failed" || job.state === "cancelled" || job.state === "interrupted")) return;
    const ready = M.lossChart(chart, []);
    const bar = document.getElementById("training-progress"), message = document.getElementById("training-message");
    const state = document.getElementById("training-state");
    const training = (M.training = { live: null, view: data.view });
    // The unified plan, once stored: a cursor follows the executing node of the step under way on its
    // offset and live-bytes charts, the node's writes lit, node times drawn, the canary's hit in red.
    function followOn(view) {
      if (training.live || !view) return;
      document.getElementById("run-plan-card").hidden = false;
      const plan = M.runPlan(view, []);
      M.markRecomputed(view, plan);
      const run = M.runFollower(view, plan, plan.live);
      run.permalink = (id) => "/training/demo/" + id;
      Object.assign(training, { view: view, plan: plan, run: run });
      training.live = plan.ready.then(() => run.follow(job.id));
    }
    followOn(data.view);
    if (hit) return;  // the follower replays the demo's events to the canary's hit, drawn in red
    M.follow(job.id, (p) => {
      bar.value = p.progress;
      message.textContent = p.message;
      state.textContent = "running";
      if (p.loss !== undefined) ready.then(() => Plotly.extendTraces(chart, { x: [[p.train_step + 1]], y: [[p.loss]] }, [0]));
      if (p.plan_id && !training.live && !training.asked) {
        training.asked = true;
        fetch("/training/demo/" + job.id + "?format=json").then((r) => r.json())
          .then((page) => { if (page.view) followOn(page.view); else training.asked = false; })  // asked again at the next event
          .catch(() => { training.asked = false; });
      }
    }).then((done) => {
      if (!training.live) { window.location.reload(); return; }
      return training.live.then(() => finished(done.result));
    }).catch((error) => {
      state.textContent = "failed";
      if (!training.live) M.showError(error || {});  // else the live panel says it, with the canary's hit
      else training.live.then(() => { training.failed = error || {}; });
    });
  };

  // A demo followed live has finished: its figures and the categories' chart, without leaving the page.
  function finished(result) {
    document.getElementById("training-state").textContent = "done";
    const facts = document.getElementById("training-facts");
    const row = (term, text, id) => {
      const dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = term;
      dd.textContent = text;
      if (id) dd.id = id;
      facts.append(dt, dd);
    };
    row("data", result.source);
    row("loss", result.first_loss.toFixed(4) + " → " + result.last_loss.toFixed(4), "loss-drop");
    row("training accuracy", result.accuracy.toFixed(3), "accuracy");
    const demo = result.demo || {}, onOff = (value) => (value ? "on" : "off");
    if (demo.alignment !== undefined) row("memory options", "alignment " + demo.alignment + " bytes, workspace " +
      onOff(demo.workspace) + ", prepared weights " + onOff(demo.prepared_weights), "training-memory");
    row("unified arena", M.fmt(result.unified_bytes) + " bytes (" + result.ratio.toFixed(3) + "× the per-category total " +
      M.fmt(result.per_category_total) + ")");
    M.categoryChart(document.getElementById("chart-categories"), result);
    M.training.result = result;
  }

  // Model page: plan the model's training step and show both plans by category.
  M.trainingPlanForm = function () {
    const form = document.getElementById("training-plan-form");
    if (!form) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const dims = {};
      for (const el of document.querySelectorAll("#plan-form [name^='dim:']")) if (el.value.trim() !== "") dims[el.name.slice(4)] = Number(el.value);
      const body = {
        loss: form.elements.loss.value, optimizer: form.elements.optimizer.value,
        strategy: form.elements.strategy.value, dims: dims, shapes: M.readShapes(document.getElementById("plan-form")),
        ...M.readStepMemory(form),
        remat: form.elements.remat.value.trim() || "off", remat_overhead: Number(form.elements.remat_overhead.value),
      };
      const status = document.getElementById("training-plan-status");
      status.textContent = "planning the training step…";
      try {
        const result = await M.readJson(await fetch("/api/v1/models/" + form.dataset.model + "/training-plans", {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
        }));
        status.textContent = "";
        const link = document.getElementById("training-plan-link");
        link.href = result.links.plan;
        link.hidden = false;
        document.getElementById("training-plan-summary").textContent = result.unified_bytes.toLocaleString() +
          " bytes unified, " + result.per_category_total.toLocaleString() + " in one arena per category (" +
          result.ratio.toFixed(3) + "×)";
        const remat = document.getElementById("training-plan-remat");
        remat.hidden = !result.remat;
        if (result.remat) {
          const r = result.remat;
          remat.textContent = "recomputing " + r.recomputed.length + " tensor" + (r.recomputed.length === 1 ? "" : "s") +
            " for " + (100 * r.extra_flops).toFixed(1) + "% more FLOPs: arena " + r.arena_bytes.toLocaleString() +
            " bytes instead of " + r.arena_bytes_without.toLocaleString() + " (activations " +
            r.activation_bytes.toLocaleString() + " instead of " + r.activation_bytes_without.toLocaleString() + ")" +
            (r.budget_met ? "" : "; the budget was not met, this is the closest point");
        }
        const curve = document.getElementById("chart-training-remat");  // the search's Pareto curve, as the demo page draws it
        curve.hidden = !result.remat;
        if (result.remat) M.rematChart(curve, result.remat);
        const chart = document.getElementById("chart-training-categories");
        chart.hidden = false;
        status.className = "muted";
        M.categoryChart(chart, result);
      } catch (problem) {  // said in the card itself, never a blank card with the error far above
        status.textContent = (problem && (problem.detail || problem.title)) || "the training step could not be planned";
        status.className = "warn";
      }
    });
  };
})();
