// memplan: run the model in the plan on its own page. A cursor on the offset chart and on the
// live-bytes chart follows the executing step (server-sent events); the tensors a step writes
// light up; each step's measured time is drawn on the same step axis; a canary hit is drawn in
// red at its tensor and step with the bytes it clobbered; the verdict lands on the page. The same
// follower serves a pipeline's page (its joint plan), a run's page while the run is under way, and the
// training demo's page (the unified plan of its training step, followed node by node).
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const WRITE_FILL = "rgba(89,161,79,0.55)", HIT = "#d62728";

  function writtenBy(view) {
    const byStep = new Map(), b = view.buffers;
    for (let i = 0; i < b.id.length; i++) {
      if (!byStep.has(b.first[i])) byStep.set(b.first[i], []);
      byStep.get(b.first[i]).push(i);
    }
    return byStep;
  }

  // Each step's measured time as bars on a second y axis of the live-bytes chart (one step axis).
  function timeBars(live, times) {
    const xs = [...times.keys()], ys = xs.map((s) => times.get(s) * 1000);
    const index = live.data.findIndex((t) => t.name === "ms per step");
    if (index >= 0) return Plotly.restyle(live, { x: [xs], y: [ys] }, [index]);
    return Plotly.addTraces(live, { type: "bar", x: xs, y: ys, yaxis: "y2", name: "ms per step", marker: { color: "#f28e2b" }, opacity: 0.7,
      hovertemplate: "step %{x}: %{y:.3f} ms<extra></extra>" })
      // Room on the right for the second axis' ticks and title, which the chart's own margin would clip.
      .then(() => Plotly.relayout(live, { "margin.r": 70, yaxis2: { title: { text: "ms per step" }, overlaying: "y", side: "right", rangemode: "tozero", showgrid: false, automargin: true } }));
  }

  // The run page (a finished run's permalink): the plan it ran in, and its measured step times on
  // the live-bytes chart below, both on the plan's step axis and zoomed together.
  M.runPlan = function (view, steps) {
    const offsetsEl = document.getElementById("run-chart-offsets"), live = document.getElementById("run-chart-live");
    if (!view || !offsetsEl || !live) return null;
    const chart = M.offsetChart(offsetsEl, view, view.selected);
    M.liveChart(live, view);
    const times = new Map((steps || []).map((s) => [s.step, s.seconds]));
    const state = { a: chart, chart, live, times };  // `a`: the chart a run follower draws on
    M.runView = state;
    state.ready = chart.ready
      .then(() => timeBars(live, times))
      .then(() => {
        offsetsEl.on("plotly_relayout", (ev) => {
          const range = ev["xaxis.range"] || (ev["xaxis.range[0]"] !== undefined ? [ev["xaxis.range[0]"], ev["xaxis.range[1]"]] : null);
          if (range) Plotly.relayout(live, { "xaxis.range": range });
          else if (ev["xaxis.autorange"]) Plotly.relayout(live, { "xaxis.autorange": true });
        });
        return state;
      });
    return state;
  };

  // A run's verdict as the API states it: `verdict` ("passed", "failed", "ill-conditioned",
  // "skipped") when present, else `passed`; ill-conditioned outputs are yellow with their evidence.
  M.verdictOf = function (v) {
    const state = v.verdict || (v.passed ? "passed" : v.passed === false ? "failed" : "skipped");
    const cls = { passed: "pass", failed: "fail", "ill-conditioned": "ill" }[state] || "none";
    const evidence = (v.outputs || []).filter((o) => o.evidence).map((o) => o.name + ": " + o.evidence);
    const text = v.summary ? v.summary  // a verdict that says itself (the training demo's checks)
      : state === "passed" ? "outputs match " + v.oracle
      : state === "failed" ? "outputs differ from " + v.oracle
      : state === "ill-conditioned" ? "ill-conditioned: " + v.oracle + " and memplan cannot be told apart in float32 on some outputs; not a failure of the plan"
      : "not verified: " + (v.detail || "verification skipped");
    return { state: state, cls: cls, text: [text].concat(v.check ? [v.check] : [], evidence).join(" · ") };
  };

  // Follow a run job on a plan chart: `state.a` is the offset chart (charts.js), `live` the live-bytes
  // chart on the same step axis. The page holds the panel #live-run (progress, status, verdict, link).
  // `run.start(submit)` posts the run (submit() resolves with its job) and follows it; `run.follow(id)`
  // follows a job already started.
  M.runFollower = function (view, state, live) {
    const writes = writtenBy(view);
    const run = { step: null, drawn: null, times: new Map(), frame: 0, events: 0 };
    state.run = run;

    function cursorShapes(chart, step) {
      const b = view.buffers;
      const shapes = [{ type: "rect", xref: "x", yref: "paper", x0: step, x1: step + 1, y0: 0, y1: 1,
        fillcolor: "rgba(78,121,167,0.15)", line: { width: 1.5, color: "#4e79a7" }, name: "cursor" }];
      for (const i of (writes.get(step) || []).slice(0, 100)) {
        const off = chart.offsets[i];
        if (off === null || off === undefined) continue;
        shapes.push({ type: "rect", xref: "x", yref: "y", x0: b.first[i], x1: b.last[i] + 1, y0: off, y1: off + b.size[i],
          fillcolor: WRITE_FILL, line: { width: 2, color: "#2b6a1f" }, name: "write" });
      }
      return shapes;
    }
    function draw() {
      run.frame = 0;
      if (run.over || run.step === null || run.step === run.drawn) return;
      run.drawn = run.step;
      const a = state.a, extra = cursorShapes(a, run.step);
      Plotly.relayout(a.el, { shapes: a.baseShapes.concat(a.foundShapes || [], extra) });
      Plotly.relayout(live, { shapes: (live.layout.shapes || []).filter((s) => s.name !== "cursor").concat([
        { type: "line", xref: "x", yref: "paper", x0: run.step, x1: run.step, y0: 0, y1: 1, line: { width: 2, color: "#4e79a7" }, name: "cursor" }]) });
      drawTimes();
    }
    function drawTimes() { return timeBars(live, run.times); }
    function schedule() { if (!run.frame) run.frame = requestAnimationFrame(draw); }
    function say(text, cls) {
      const status = document.getElementById("live-status");
      status.textContent = text;
      status.className = cls || "";
    }
    function showHit(hit) {
      const a = state.a, b = view.buffers;
      const shapes = [], notes = [];
      for (const t of hit.tensors) {
        const i = b.id.indexOf(t.name);
        const y0 = t.first_byte, y1 = Math.max(t.end, t.first_byte + 1);
        shapes.push({ type: "rect", xref: "x", yref: "y", x0: hit.step, x1: hit.step + 1, y0: y0, y1: y1,
          fillcolor: "rgba(214,39,40,0.6)", line: { width: 2.5, color: HIT }, name: "canary" });
        if (i >= 0 && a.offsets[i] !== null) shapes.push({ type: "rect", xref: "x", yref: "y", x0: b.first[i], x1: b.last[i] + 1,
          y0: a.offsets[i], y1: a.offsets[i] + b.size[i], line: { width: 2, color: HIT, dash: "dot" }, name: "canary" });
        notes.push({ xref: "x", yref: "y", x: hit.step + 1, y: y1, text: M.esc(t.name) + ": " + M.fmt(t.bytes) + " bytes clobbered at step " + hit.step,
          showarrow: true, arrowcolor: HIT, font: { color: HIT, size: 12 }, bgcolor: "#fff" });
      }
      return Plotly.relayout(a.el, { shapes: a.baseShapes.concat(shapes), annotations: notes }).then(() => { run.hit = hit; });
    }
    function verdict(result, jobId) {
      const v = result.verdict || {};
      const el = document.getElementById("live-verdict");
      el.hidden = false;
      const said = M.verdictOf(v);
      el.className = "verdict " + said.cls;
      el.dataset.verdict = said.state;
      const clean = result.canary && !v.summary;  // a training verdict says its canary itself
      el.textContent = said.text + (clean ? " · canary: every live tensor checked after each step, none clobbered" : "");
      const link = document.getElementById("live-link");
      link.href = run.permalink ? run.permalink(jobId) : "/runs/" + jobId;
      link.hidden = false;
      for (const s of result.steps || []) run.times.set(s.step, s.seconds);
      drawTimes();
    }

    run.start = async function (submit) {
      M.clearError();
      document.getElementById("live-run").hidden = false;
      // The cursor moves on the chart: bring it into view (it may be a screen or more below the button).
      state.a.el.scrollIntoView({ behavior: "instant", block: "start" });
      say("starting the run…");
      let job;
      try { job = await submit(); } catch (problem) { M.showError(problem); say("not started", "warn"); return null; }
      return run.follow(job.id);
    };
    run.follow = async function (jobId) {
      document.getElementById("live-run").hidden = false;
      run.times.clear();
      run.hit = null;
      run.over = false;
      run.jobId = jobId;
      try {
        const done = await M.follow(jobId, (p) => {
          run.events++;
          if (p.step !== undefined) {
            run.step = p.step;
            if (p.seconds !== undefined) run.times.set(p.step, p.seconds);
            schedule();
          }
          say(p.message || "running");
          document.getElementById("live-progress").value = p.progress || 0;
          if (run.onProgress) run.onProgress(p);  // the page's own progress, if it shows one
        });
        document.getElementById("live-progress").value = 1;
        const timed = (done.result.stats || {}).timed_runs;
        say("done: " + M.fmt(done.result.arena_bytes) + " bytes of arena, " + (done.result.seconds * 1000).toFixed(2) + " ms" +
          (timed ? " (median of " + timed + " timed runs; the job's other phases are listed on the run's page)" : ""));
        verdict(done.result, jobId);
        run.done = done;
      } catch (error) {
        run.over = true;  // no cursor frame may paint over what went wrong
        if (run.frame) { cancelAnimationFrame(run.frame); run.frame = 0; }
        const problem = error || {};
        say(problem.detail || "the run failed", "warn");
        if (problem.canary) await showHit(problem.canary);
        run.failed = problem;
      }
      return run;
    };
    return run;
  };

  // The plan page: its form runs the model in the plan, followed on the page's left offset chart.
  M.liveRun = function (view, state) {
    const form = document.getElementById("run-form");
    if (!form || !document.getElementById("live-run")) return null;
    const run = M.runFollower(view, state, document.getElementById("chart-live"));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      const canary = form.elements.canary.checked;  // a disabled box (an invalid plan) is checked
      const options = { plan_id: form.dataset.plan, seed: Number(form.elements.seed.value || 0), canary: canary };
      const data = new FormData();
      data.append("options", JSON.stringify(options));
      if (form.elements.inputs.files[0]) data.append("inputs", form.elements.inputs.files[0]);
      run.start(async () => M.readJson(await fetch("/api/v1/models/" + form.dataset.model + "/runs", { method: "POST", body: data })));
    });
    return run;
  };
})();
