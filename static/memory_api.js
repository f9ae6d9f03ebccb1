// Runtime memory API pages: the run page's zero-copy toggle, pipelines of stored models.
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const CONFIG = { displaylogo: false, responsive: true };

  async function post(url, body) {
    return M.readJson(await fetch(url, {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
    }));
  }

  // Run page: run the same model (or pipeline) again with zero-copy on or off.
  M.zeroCopyToggle = function (result) {
    const form = document.getElementById("rerun-form");
    if (!form || !result || !result.rerun) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const body = Object.assign({}, result.rerun.body, {
        zero_copy: form.elements.zero_copy.checked, seed: Number(form.elements.seed.value || 0),
      });
      try {
        const job = await post(result.rerun.url, body);
        window.location.href = "/runs/" + job.id;
      } catch (problem) { M.showError(problem); }
    });
  };

  // The connections the chosen models allow, as the form's suggestions: each output of a with each
  // input of b ("a:y -> b:x"); the first becomes the field's value while the user has typed none.
  function suggestConnections(form, models) {
    const byId = new Map(models.map((m) => [m.id, m.summary || {}]));
    const a = byId.get(form.elements["model-a"].value) || {}, b = byId.get(form.elements["model-b"].value) || {};
    const pairs = [];
    for (const out of a.outputs || []) for (const inp of b.inputs || []) pairs.push("a:" + out.name + " -> b:" + inp.name);
    const list = document.getElementById("connection-names");
    list.replaceChildren(...pairs.map((p) => new Option(p, p)));
    const hint = document.getElementById("connection-hint");
    hint.textContent = "a's outputs: " + ((a.outputs || []).map((o) => o.name).join(", ") || "—") +
      " · b's inputs: " + ((b.inputs || []).map((i) => i.name).join(", ") || "—");
    const field = form.elements.connections;
    if (!field.value.trim() || field.dataset.suggested === field.value) {
      field.value = pairs[0] || "";
      field.dataset.suggested = field.value;
    }
  }

  M.pipelineForm = function (models) {
    const form = document.getElementById("pipeline-form");
    if (!form) return;
    if (models) {
      for (const name of ["model-a", "model-b"]) form.elements[name].addEventListener("change", () => suggestConnections(form, models));
      suggestConnections(form, models);
    }
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const connections = {};
      for (const line of form.elements.connections.value.split("\n").map((l) => l.trim()).filter(Boolean)) {
        const [source, dest] = line.split("->").map((x) => x.trim());
        connections[source] = dest;
      }
      let dims = {};
      try { dims = form.elements.dims.value.trim() ? JSON.parse(form.elements.dims.value) : {}; }
      catch (e) { M.showError({ title: "Invalid dims", detail: "dims: not JSON (" + e.message + "); e.g. {\"a\": {\"N\": 8}}" }); return; }
      const body = {
        models: { a: form.elements["model-a"].value, b: form.elements["model-b"].value },
        connections: connections, strategy: form.elements.strategy.value, io: form.elements.io.value, dims: dims,
      };
      try {
        const pipeline = await post("/api/v1/pipelines", body);
        window.location.href = pipeline.links.page;
      } catch (problem) { M.showError(problem); }
    });
  };

  // A pipeline's page: joint against separate arenas, and the joint plan's chart (`view`, live.js), on
  // which a run started here is followed live to its verdict, the user staying on the page.
  M.pipelinePage = function (pipeline, view) {
    const names = Object.keys(pipeline.separate_arena_bytes);
    const traces = names.map((name) => ({
      type: "bar", name: name + " alone", x: ["separate arenas"], y: [pipeline.separate_arena_bytes[name]],
      hovertemplate: name + ": %{y:,} bytes<extra></extra>",
    }));
    if (pipeline.joint_arena_bytes !== null) {
      traces.push({ type: "bar", name: "joint arena", x: ["one joint arena"], y: [pipeline.joint_arena_bytes],
        marker: { color: "#59a14f" }, hovertemplate: "joint: %{y:,} bytes<extra></extra>" });
    }
    Plotly.newPlot(document.getElementById("chart-pipeline"), traces, {
      barmode: "stack", margin: { t: 10, r: 10, b: 40, l: 80 }, yaxis: { title: { text: "bytes" } },
    }, CONFIG);
    const state = view ? M.runPlan(view, []) : null;
    M.pipeline = state;
    const form = document.getElementById("pipeline-run-form");
    if (!form) return state;
    const run = state ? M.runFollower(view, state, state.live) : null;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const body = { zero_copy: form.elements.zero_copy.checked, seed: Number(form.elements.seed.value || 0),
        canary: form.elements.canary.checked };
      if (run) { run.start(() => post(form.dataset.runs, body)); return; }
      try {  // no chart to follow it on: the run's own page does
        const job = await post(form.dataset.runs, body);
        window.location.href = "/runs/" + job.id;
      } catch (problem) { M.showError(problem); }
    });
    return state;
  };
})();
