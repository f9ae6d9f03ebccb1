// memplan pages: uploads, forms, job progress. Charts live in charts.js.
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});

  // Show an API error (application/problem+json) where the user is looking. A refused write (401: no
  // valid token cookie, e.g. it expired) also gets a link to sign in and come back to this page.
  M.showError = function (problem) {
    problem = problem || {};
    const box = document.getElementById("error-box");
    const title = problem.title || "Error";
    box.innerHTML = "";
    const strong = document.createElement("strong");
    strong.textContent = (problem.status ? problem.status + " · " : "") + title + ": ";
    const detail = typeof problem === "string" ? problem : problem.detail || problem.message || "something went wrong";
    box.append(strong, document.createTextNode(typeof detail === "string" ? detail : JSON.stringify(detail)));
    if (problem.status === 401) {
      const link = document.createElement("a");
      link.href = "/token?next=" + encodeURIComponent(window.location.pathname + window.location.search);
      link.id = "error-signin";
      link.textContent = "Sign in";
      box.append(document.createElement("br"), link, document.createTextNode(" with the token, then try again."));
    }
    box.hidden = false;
    box.scrollIntoView({ block: "nearest" });
  };
  M.clearError = function () { document.getElementById("error-box").hidden = true; };

  async function readJson(response) {
    const text = await response.text();
    let body;
    try { body = JSON.parse(text); } catch (e) { body = { status: response.status, title: response.statusText, detail: text.slice(0, 300) }; }
    if (!response.ok) throw body;
    return body;
  }
  M.readJson = readJson;

  // Follow a job's server-sent events; resolves with the final job state.
  M.follow = function (jobId, onProgress) {
    return new Promise((resolve, reject) => {
      const source = new EventSource("/api/v1/jobs/" + jobId + "/events");
      source.addEventListener("progress", (ev) => onProgress && onProgress(JSON.parse(ev.data)));
      source.addEventListener("running", (ev) => onProgress && onProgress(JSON.parse(ev.data)));
      source.addEventListener("done", (ev) => { source.close(); resolve(JSON.parse(ev.data)); });
      source.addEventListener("failed", (ev) => { source.close(); reject(JSON.parse(ev.data).error); });
      source.onerror = () => {
        if (source.readyState === EventSource.CLOSED) reject({ detail: "lost the connection to the job" });
      };
    });
  };

  // ---- home: upload, gallery, problems -------------------------------------------------
  function upload(file) {
    const bar = document.getElementById("upload-progress");
    const form = new FormData();
    form.append("file", file);
    bar.hidden = false;
    M.clearError();
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/v1/models");
    xhr.upload.onprogress = (ev) => { if (ev.lengthComputable) bar.value = ev.loaded / ev.total; };
    xhr.onload = () => {
      bar.hidden = true;
      let body;
      try { body = JSON.parse(xhr.responseText); } catch (e) { body = { status: xhr.status, detail: xhr.responseText }; }
      if (xhr.status >= 200 && xhr.status < 300) window.location.href = body.links.page;
      else M.showError(body);
    };
    xhr.onerror = () => { bar.hidden = true; M.showError({ detail: "the upload failed: the connection broke" }); };
    xhr.send(form);
  }

  M.home = function () {
    const zone = document.getElementById("dropzone");
    const input = document.getElementById("file-input");
    if (!zone) return; // no write controls: the page shows why (read-only, or not signed in)
    input.addEventListener("change", () => input.files[0] && upload(input.files[0]));
    zone.addEventListener("dragover", (ev) => { ev.preventDefault(); zone.classList.add("over"); });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (ev) => {
      ev.preventDefault();
      zone.classList.remove("over");
      if (ev.dataTransfer.files.length) upload(ev.dataTransfer.files[0]);
    });
    document.querySelectorAll("[data-delete]").forEach((button) => button.addEventListener("click", async () => {
      try {
        const response = await fetch("/api/v1/models/" + button.dataset.delete, { method: "DELETE" });
        if (!response.ok) await readJson(response);
        button.closest("tr").remove();
      } catch (problem) { M.showError(problem); }
    }));
    const form = document.getElementById("problem-form");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const file = form.elements.file.files[0];
      const text = file ? await file.text() : form.elements.body.value;
      const isJson = text.trim().startsWith("{");
      try {
        const result = await readJson(await fetch("/api/v1/problems/plan", {
          method: "POST", headers: { "Content-Type": isJson ? "application/json" : "text/csv" }, body: text,
        }));
        finishPlanning(result);
      } catch (problem) { M.showError(problem); }
    });
  };

  async function finishPlanning(result, status) {
    if (result.job) {
      const bar = document.getElementById("plan-progress");
      if (bar) bar.hidden = false;
      const done = await M.follow(result.job.id, (p) => {
        if (bar) bar.value = p.progress;
        if (status) status.textContent = p.message;
      });
      if (done.result && done.result.page) { window.location.href = done.result.page; return; }
    }
    if (result.links.page) window.location.href = result.links.page;
    else M.showError({ title: "No valid plan", detail: result.plans.map((p) => p.strategy + ": " + p.error).join("; ") });
  }

  // ---- model page: the planning form ---------------------------------------------------
  M.readPlanForm = function (form) {
    // Values go to the server as typed: it answers a bad one with a reason naming the dim.
    const dims = {};
    // An empty dim is left unbound, never guessed: the server names the input and axis it leaves open.
    for (const el of form.querySelectorAll("[name^='dim:']")) if (el.value.trim() !== "") dims[el.name.slice(4)] = Number(el.value);
    const pools = [];
    for (const line of form.elements.pools.value.split("\n").map((l) => l.trim()).filter(Boolean)) {
      const [name, capacity] = line.split("=").map((x) => x.trim());
      pools.push({ name: name, capacity: capacity === undefined || capacity === "" ? null : Number(capacity) });
    }
    const strategies = [...form.querySelectorAll("[name=strategy]:checked")].map((el) => el.value);
    return {
      strategies: strategies, dims: dims, shapes: M.readShapes(form), ...M.readStepMemory(form), io: form.elements.io.value,
      inplace: form.elements.inplace.checked,
      concat_inplace: form.elements.concat_inplace.checked, fuse: form.elements.fuse.checked, pools: pools.length ? pools : null,
      reorder: form.elements.reorder ? form.elements.reorder.checked : false,
      // Tiling: "auto" lets the planner compute the first layers in bands; the server names a bad budget.
      tile: form.elements.tile && form.elements.tile.checked ? "auto" : "off",
      tile_overhead: form.elements.tile_overhead ? Number(form.elements.tile_overhead.value) : 0.2,
    };
  };

  // The memory options of a step, a training step's too (templates/_memory.html's fields), as the
  // REST bodies name them; values go as typed, the server refuses a bad one naming the field.
  M.readStepMemory = function (form) {
    return {
      alignment: Number(form.elements.alignment.value), workspace: form.elements.workspace.checked,
      prepared_weights: form.elements.prepared_weights.checked,
    };
  };

  // Whole input shapes as typed ("1x3x48x320"); an empty field leaves its input to the dims.
  M.readShapes = function (form) {
    const shapes = {};
    if (!form) return shapes;
    for (const el of form.querySelectorAll("[name^='shape:']")) if (el.value.trim()) shapes[el.name.slice(6)] = el.value.trim();
    return shapes;
  };

  M.modelPage = function () {
    const form = document.getElementById("plan-form");
    if (!form) return;
    const status = document.getElementById("plan-status");
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const button = document.getElementById("plan-button");
      button.disabled = true;
      status.textContent = "planning…";
      try {
        const body = M.readPlanForm(form);
        const result = await readJson(await fetch("/api/v1/models/" + form.dataset.model + "/plans", {
          method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
        }));
        await finishPlanning(result, status);
      } catch (problem) {
        M.showError(problem);
        status.textContent = "";
      } finally { button.disabled = false; }
    });
  };

  // ---- plan page: run the model in this plan --------------------------------------------
  M.runForm = function () {
    const form = document.getElementById("run-form");
    if (!form) return;
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      M.clearError();
      const options = { plan_id: form.dataset.plan, seed: Number(form.elements.seed.value || 0) };
      const data = new FormData();
      data.append("options", JSON.stringify(options));
      if (form.elements.inputs.files[0]) data.append("inputs", form.elements.inputs.files[0]);
      try {
        const job = await readJson(await fetch("/api/v1/models/" + form.dataset.model + "/runs", { method: "POST", body: data }));
        window.location.href = "/runs/" + job.id;
      } catch (problem) { M.showError(problem); }
    });
  };

  // ---- job and run pages ---------------------------------------------------------------
  M.jobPage = function (job) {
    const bar = document.getElementById("job-progress"), message = document.getElementById("job-message");
    const state = document.getElementById("job-state");
    if (job.state === "done" || job.state === "failed") return;
    M.follow(job.id, (p) => { bar.value = p.progress; message.textContent = p.message; state.textContent = "running"; })
      .then((done) => {
        state.textContent = "done";
        if (done.result && done.result.page) window.location.href = done.result.page;
      })
      .catch((error) => { state.textContent = "failed"; M.showError(error || {}); });
  };

  // A run's page: the permalink of a finished run (its plan chart with the measured times, live.js),
  // or a run under way, followed live on the plan it runs in, then shown finished.
  M.runPage = function (run) {
    if (run.result) {
      if (M.timeChart) M.timeChart(document.getElementById("chart-times"), run.result.steps);
      if (run.view && M.runPlan) M.runPlan(run.view, run.result.steps);
      return;
    }
    if (!run.job || run.job.state === "failed") return;
    const bar = document.getElementById("run-progress"), message = document.getElementById("run-message");
    const state = document.getElementById("run-state");
    if (run.view && M.runPlan) {
      const chart = M.runPlan(run.view, []), follower = M.runFollower(run.view, chart, chart.live);
      follower.onProgress = (p) => { bar.value = p.progress || 0; message.textContent = p.message; state.textContent = "running"; };
      follower.follow(run.job.id).then((r) => {
        state.textContent = r.done ? "done" : "failed";
        if (r.done) window.location.reload();
      });
      return;
    }
    M.follow(run.job.id, (p) => {
      bar.value = p.progress;
      message.textContent = p.message;
      state.textContent = "running";
    }).then(() => window.location.reload())
      .catch((error) => { state.textContent = "failed"; M.showError(error || {}); });
  };
})();
