// kerasrl watch: draws the events of /events (server-sent events). No library, nothing remote.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const board = $("board"), frame = $("frame"), curveCanvas = $("curve");
  let hello = null, curve = [], lastEpisode = -1;

  function setStatus(state, text) { const s = $("status"); s.dataset.state = state; s.textContent = text; }
  function number(x, digits) { return x === null || x === undefined ? "-" : Number(x).toFixed(digits); }

  function drawBoard(f) {
    const cell = Math.max(4, Math.floor(360 / Math.max(f.rows, f.cols)));
    if (board.width !== f.cols * cell || board.height !== f.rows * cell) {
      board.width = f.cols * cell; board.height = f.rows * cell;
    }
    const ctx = board.getContext("2d"), c = hello.colours;
    const fills = [c.empty, c.body, c.head, c.fruit];
    ctx.fillStyle = c.empty; ctx.fillRect(0, 0, board.width, board.height);
    for (let i = 0; i < f.cells.length; i++) {
      if (f.cells[i] === 0) continue;
      ctx.fillStyle = fills[f.cells[i]];
      const r = Math.floor(i / f.cols), col = i % f.cols;
      ctx.fillRect(col * cell + 1, r * cell + 1, cell - 2, cell - 2);
    }
  }

  function actionName(a) {
    if (a === null || a === undefined) return "-";
    if (Array.isArray(a)) return "[" + a.map((v) => number(v, 3)).join(", ") + "]";
    return hello.actions && hello.actions[a] !== undefined ? a + " (" + hello.actions[a] + ")" : String(a);
  }

  function drawOutputs(values, action) {
    const box = $("outputs");
    if (!values) return;
    // One axis through 0 for all the bars (probabilities: 0 to 1).
    const lo = Math.min(0, ...values), hi = Math.max(0, ...values);
    const probabilities = hello.outputs === "Action probabilities";
    while (box.children.length < values.length) {
      const row = document.createElement("div"); row.className = "output";
      row.innerHTML = '<span class="name"></span><span class="track"><span class="fill"></span></span><span class="value"></span>';
      box.appendChild(row);
    }
    values.forEach((v, i) => {
      const row = box.children[i];
      row.classList.toggle("chosen", i === action);
      row.querySelector(".name").textContent = hello.actions && hello.actions[i] !== undefined ? hello.actions[i] : String(i);
      const share = probabilities ? v : (v - lo) / (hi - lo || 1);
      row.querySelector(".fill").style.width = (100 * Math.max(0, Math.min(1, share))).toFixed(1) + "%";
      row.querySelector(".value").textContent = number(v, 3);
    });
  }

  function drawCurve() {
    const ctx = curveCanvas.getContext("2d"), w = curveCanvas.width, h = curveCanvas.height, pad = 36;
    ctx.fillStyle = "#111"; ctx.fillRect(0, 0, w, h);
    const points = curve.filter((p) => p.mean_return_100 !== null);
    $("curve-note").hidden = points.length > 0;
    if (!points.length) return;
    const xs = points.map((p) => p.step), ys = points.map((p) => p.mean_return_100);
    const x0 = Math.min(...xs), x1 = Math.max(...xs, x0 + 1);
    let y0 = Math.min(...ys), y1 = Math.max(...ys); if (y1 - y0 < 1e-9) { y0 -= 1; y1 += 1; }
    const X = (x) => pad + (w - 2 * pad) * (x - x0) / (x1 - x0);
    const Y = (y) => h - pad + (2 * pad - h) * (y - y0) / (y1 - y0);
    ctx.strokeStyle = "#444"; ctx.strokeRect(pad, pad, w - 2 * pad, h - 2 * pad);
    ctx.fillStyle = "#9aa0a6"; ctx.font = "11px sans-serif";
    ctx.fillText(number(y1, 1), 2, pad + 4); ctx.fillText(number(y0, 1), 2, h - pad);
    ctx.fillText("step " + x0, pad, h - 10); ctx.fillText("step " + x1, w - pad - 70, h - 10);
    ctx.strokeStyle = "#6fcf6f"; ctx.lineWidth = 2; ctx.beginPath();
    points.forEach((p, i) => (i ? ctx.lineTo(X(p.step), Y(p.mean_return_100)) : ctx.moveTo(X(p.step), Y(p.mean_return_100))));
    ctx.stroke();
    if (points.length === 1) { ctx.fillStyle = "#6fcf6f"; ctx.fillRect(X(xs[0]) - 3, Y(ys[0]) - 3, 6, 6); }
    curveCanvas.dataset.points = String(points.length);
  }

  const source = new EventSource("/events");
  source.addEventListener("open", () => setStatus("live", "live"));
  source.addEventListener("error", () => setStatus("lost", "connection lost, retrying"));
  source.addEventListener("hello", (e) => {
    hello = JSON.parse(e.data);
    $("title").textContent = hello.title; $("env").textContent = hello.env;
    document.title = "kerasrl watch: " + hello.env;
    board.hidden = hello.frame_kind !== "board"; frame.hidden = hello.frame_kind !== "image";
    $("curve-panel").hidden = !hello.curve;
    $("outputs-title").hidden = !hello.outputs; $("outputs-title").textContent = hello.outputs || "";
    if (hello.curve) drawCurve();
  });
  source.addEventListener("step", (e) => {
    const s = JSON.parse(e.data);
    if (s.frame.kind === "board") drawBoard(s.frame); else frame.src = "data:image/png;base64," + s.frame.png;
    if (s.title && $("title").textContent !== s.title) $("title").textContent = s.title;
    $("episode").textContent = String(s.episode + 1); $("step").textContent = String(s.step);
    $("return").textContent = number(s["return"], 1);
    document.querySelectorAll(".fruits").forEach((el) => (el.hidden = s.fruits === null));
    $("fruits").textContent = s.fruits === null ? "-" : String(s.fruits);
    $("action").textContent = actionName(s.action);
    drawOutputs(s.outputs, s.action);
    if (s.ended && s.episode !== lastEpisode) {
      lastEpisode = s.episode;
      const li = document.createElement("li");
      li.textContent = "Episode " + (s.episode + 1) + ": return " + number(s["return"], 1) + (s.fruits === null ? "" : ", fruits " + s.fruits) + ", " + s.step + (s.step === 1 ? " step (" : " steps (") + s.ended + ")";
      $("episodes").prepend(li);
    }
  });
  source.addEventListener("curve", (e) => {
    const c = JSON.parse(e.data);
    if (c.reset) curve = [];
    curve = curve.concat(c.points);
    drawCurve();
  });
  source.addEventListener("end", () => { setStatus("ended", "all episodes played"); source.close(); });
  source.addEventListener("failed", (e) => {
    const m = $("message"); m.hidden = false; m.textContent = "The game stopped: " + JSON.parse(e.data).message;
    setStatus("failed", "stopped"); source.close();
  });
})();
