// memplan charts: the offset chart of a big plan (more tensors than a page draws at once).
// charts.js calls these from Memplan.offsetChart when the page's view carries an aggregate.
(function () {
  "use strict";
  const M = (window.Memplan = window.Memplan || {});
  const fmt = M.fmt, kindColor = M.kindColor;

  // ---- c'. offsets of a big plan -------------------------------------------------------
  // Past view.aggregate.above tensors the page holds, per plan, the largest rectangles and an
  // occupancy raster of the rest (a window of the whole plan), and asks the server for the
  // window in view after each zoom or pan (GET /api/v1/plans/{id}/chart). The picture is a canvas
  // under Plotly's transparent axes, repainted in place: no image to encode on every frame.
  const FETCH_DELAY_MS = 120;  // a fetch waits for the zoom or pan to settle
  const RASTER_RGB = [70, 70, 80];

  M.bigChart = function (chart, view, layout) {
    const agg = view.aggregate;
    chart.big = { overview: agg.windows[chart.planId] || null, detail: null, asked: 0, fetches: 0 };
    layout.plot_bgcolor = "rgba(0,0,0,0)";
    layout.paper_bgcolor = "rgba(0,0,0,0)";
  };

  function rasterImage(win) {
    if (win._image || !win.raster) return win._image || null;
    const r = win.raster, bytes = atob(r.cells), image = document.createElement("canvas");
    image.width = r.nx;
    image.height = r.ny;
    const g = image.getContext("2d"), data = g.createImageData(r.nx, r.ny);
    for (let row = 0; row < r.ny; row++) {
      const line = (r.ny - 1 - row) * r.nx;  // row 0 is the lowest bytes: the bottom of the picture
      for (let col = 0; col < r.nx; col++) {
        const v = bytes.charCodeAt(row * r.nx + col), at = (line + col) * 4;
        if (!v) continue;
        data.data[at] = RASTER_RGB[0]; data.data[at + 1] = RASTER_RGB[1]; data.data[at + 2] = RASTER_RGB[2];
        data.data[at + 3] = 40 + Math.round((215 * v) / 255);  // any use shows; full cells are dark
      }
    }
    g.putImageData(data, 0, 0);
    return (win._image = image);
  }

  function drawWindow(g, win, view, hidden, map) {
    const image = rasterImage(win), w = win.window;
    if (image) {
      g.imageSmoothingEnabled = false;
      g.drawImage(image, map.x(w.x0), map.y(w.y1), map.x(w.x1) - map.x(w.x0), map.y(w.y0) - map.y(w.y1));
    }
    const r = win.rects;
    let kind = -1;
    g.globalAlpha = 0.85;
    for (let i = 0; i < r.id.length; i++) {
      const k = r.kind[i];
      if (hidden[k]) continue;
      const left = map.x(r.first[i]), right = map.x(r.last[i] + 1);
      const top = map.y(r.offset[i] + r.size[i]), bottom = map.y(r.offset[i]);
      if (right < 0 || left > map.w || bottom < 0 || top > map.h) continue;
      if (k !== kind) { g.fillStyle = kindColor(view.kinds[k], k); kind = k; }
      g.fillRect(left, top, Math.max(right - left, 0.5), Math.max(bottom - top, 0.5));  // a thin one still shows
    }
    g.globalAlpha = 1;
  }

  M.paintBig = function (chart, view) {
    const full = chart.el._fullLayout, xa = full.xaxis, ya = full.yaxis;
    const holder = chart.el.querySelector(".svg-container");
    if (!holder) return;
    let canvas = chart.big.canvas;
    if (!canvas || !canvas.isConnected) {
      canvas = chart.big.canvas = document.createElement("canvas");
      canvas.className = "mp-big-picture";
      canvas.style.position = "absolute";
      canvas.style.pointerEvents = "none";
      holder.insertBefore(canvas, holder.firstChild);  // under the axes, which are transparent
    }
    const ratio = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(xa._length)), h = Math.max(1, Math.round(ya._length));
    if (canvas.width !== Math.round(w * ratio) || canvas.height !== Math.round(h * ratio)) {
      canvas.width = Math.round(w * ratio);
      canvas.height = Math.round(h * ratio);
      canvas.style.width = w + "px";
      canvas.style.height = h + "px";
    }
    canvas.style.left = xa._offset + "px";
    canvas.style.top = ya._offset + "px";
    const g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    g.clearRect(0, 0, w, h);
    const [x0, x1] = xa.range.map(Number), [y0, y1] = ya.range.map(Number);
    const sx = w / (x1 - x0), sy = h / (y1 - y0);
    const map = { w, h, x: (x) => (x - x0) * sx, y: (y) => (y1 - y) * sy };
    const hidden = chart.hidden || [];
    const { overview, detail } = chart.big;
    const d = detail && detail.window, covered = d && d.x0 <= x0 && d.x1 >= x1 && d.y0 <= y0 && d.y1 >= y1;
    if (overview && !covered) drawWindow(g, overview, view, hidden, map);  // what the window fetched leaves out
    if (detail) {
      // The window fetched replaces the overview inside it.
      const left = map.x(d.x0), top = map.y(d.y1);
      g.save();
      g.beginPath();
      g.rect(left, top, map.x(d.x1) - left, map.y(d.y0) - top);
      g.clip();
      g.clearRect(left, top, map.x(d.x1) - left, map.y(d.y0) - top);
      drawWindow(g, detail, view, hidden, map);
      g.restore();
    }
    chart.big.painted = (chart.big.painted || 0) + 1;
  };

  // The window in view, unless the rectangles at hand already cover it all.
  M.fetchWindow = function (chart, view) {
    const full = chart.el._fullLayout, big = chart.big;
    const [x0, x1] = full.xaxis.range.map(Number), [y0, y1] = full.yaxis.range.map(Number);
    const d = big.detail;
    if (d && !d.truncated && d.window.x0 <= x0 && d.window.x1 >= x1 && d.window.y0 <= y0 && d.window.y1 >= y1) {
      clearTimeout(big.timer);  // a fetch still waiting was for an earlier view
      big.asked += 1;
      big.inView = countInView(d.rects, x0, x1, y0, y1);
      M.bigNote();
      return Promise.resolve(d);
    }
    const asked = ++big.asked;
    clearTimeout(big.timer);
    return new Promise((resolve) => {
      big.timer = setTimeout(() => {
        const q = new URLSearchParams({ x0: x0, x1: x1, y0: y0, y1: y1, max: view.aggregate.limit });
        const started = performance.now();
        fetch("/api/v1/plans/" + encodeURIComponent(chart.planId) + "/chart?" + q)
          .then((r) => (r.ok ? r.json() : Promise.reject(new Error("chart window: HTTP " + r.status))))
          .then((win) => {
            if (asked !== big.asked || chart.el._mpChart !== chart) return resolve(null);  // a newer view was asked for
            big.detail = win;
            big.fetches += 1;
            big.inView = win.truncated ? win.total : countInView(win.rects, x0, x1, y0, y1);
            M.paintBig(chart, view);
            big.fetchMs = performance.now() - started;
            M.bigNote();
            resolve(win);
          })
          .catch((e) => { big.error = String(e); M.bigNote(); resolve(null); });
      }, FETCH_DELAY_MS);
    });
  };

  function countInView(r, x0, x1, y0, y1) {
    let n = 0;
    for (let i = 0; i < r.id.length; i++) if (r.first[i] < x1 && r.last[i] + 1 > x0 && r.offset[i] < y1 && r.offset[i] + r.size[i] > y0) n++;
    return n;
  }

  // The rectangle under the pointer among those drawn: the fetched window's first, then the overview's.
  M.bigRectAt = function (chart, x, y) {
    const hidden = chart.hidden || [];
    for (const win of [chart.big.detail, chart.big.overview]) {
      if (!win) continue;
      const w = win.window, r = win.rects;
      if (x < w.x0 || x >= w.x1 || y < w.y0 || y >= w.y1) continue;
      for (let i = r.id.length - 1; i >= 0; i--) {
        if (x < r.first[i] || x >= r.last[i] + 1 || y < r.offset[i] || y >= r.offset[i] + r.size[i] || hidden[r.kind[i]]) continue;
        return { rects: r, i };
      }
      return null;  // inside the fetched window only its rectangles are drawn
    }
    return null;
  };

  // What each offset chart of the plan page shows: every tensor in view, or the largest and shading.
  M.bigNote = function () {
    const el = document.getElementById("aggregate-note"), state = M.plan;
    if (!el || !state) return;
    const parts = [["left", state.a], ["right", state.b]].filter(([, c]) => c && c.big).map(([side, c]) => {
      const big = c.big, win = big.detail || big.overview;
      if (big.error) return side + ": " + big.error;
      if (!win) return side + ": loading";
      const n = big.inView !== undefined ? big.inView : win.total;
      return side + ": " + (win.truncated
        ? "an aggregate, the " + fmt(win.count) + " largest of " + fmt(n) + " tensors in view drawn, the rest shaded by how full each cell is"
        : fmt(n) + " tensors in view, all drawn");
    });
    el.hidden = !parts.length;
    el.textContent = fmt(M.plan.tensors) + " tensors, more than the page draws at once: " + parts.join("; ") + ". Zoom in for every tensor.";
  };

})();
