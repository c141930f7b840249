// themisto report: the sample explorer and the paired view. Reads the data
// of the JSON element #explorer-data (see src/report/explorer.rs for its
// layout), lists every sample, filters and sorts them, opens one (also from
// the URL: #sample=ID[&run=N], #pair=ID; &view=samples shows the samples
// alone), and pairs two runs. No network,
// no libraries.
(function () {
  "use strict";
  var t0 = performance.now();
  var $ = function (id) { return document.getElementById(id); };
  var raw = JSON.parse($("explorer-data").textContent);
  var runs = raw.runs, str = raw.strings;
  var S = raw.samples.map(function (r, i) {
    var o = { i: i };
    raw.fields.forEach(function (f, j) { o[f] = r[j]; });
    ["prediction", "raw_prediction", "reference", "prompt"].forEach(function (f) { o[f] = o[f] === null ? null : str[o[f]]; });
    o.runName = runs[o.run].name;
    o.model = runs[o.run].model;
    o.ctx = runs[o.run].context_tokens;
    o.rt = o.runtime ? "on" : "off";
    o.finish = o.skipped ? "skipped: " + o.skipped : (o.finish_reason || "—");
    o.kind = o.answer_kind || "—";
    return o;
  });

  function esc(s) {
    return String(s).replace(/[&<>"']/g, function (c) { return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]; });
  }
  function preview(s) { s = (s || "").replace(/\s+/g, " ").trim(); return s.length > 80 ? s.slice(0, 79) + "…" : s; }
  function fmt(v, digits) { return v === null || v === undefined ? "—" : (digits === 0 ? String(v) : v.toFixed(digits)); }

  // Columns: key, label, type (cat: a select; num: an expression; text: a substring), value, cell.
  var COLS = [
    { k: "runName", l: "run", t: "cat", w: 14 },
    { k: "model", l: "model", t: "cat", w: 10 },
    { k: "ctx", l: "context", t: "num", w: 4.5 },
    { k: "task", l: "task", t: "cat", w: 6 },
    { k: "rt", l: "runtime", t: "cat", w: 4.5 },
    { k: "trajectory", l: "trajectory", t: "text", w: 9 },
    { k: "step", l: "step", t: "num", w: 3.5 },
    { k: "exact_match", l: "EM", t: "num", d: 0, w: 3 },
    { k: "rouge_l", l: "ROUGE-L", t: "num", d: 3, w: 5 },
    { k: "chrf", l: "chrF", t: "num", d: 1, w: 4 },
    { k: "kind", l: "answer", t: "cat", w: 5.5 },
    { k: "finish", l: "finish", t: "cat", w: 5.5 },
    { k: "prompt_tokens", l: "prompt tok", t: "num", w: 5 },
    { k: "steps_kept", l: "kept", t: "num", w: 3.5 },
    { k: "dropped_steps", l: "dropped", t: "num", w: 4.5 },
    { k: "prediction", l: "prediction", t: "text", p: true, w: 16 },
    { k: "id", l: "id", t: "text", w: 10 }
  ];
  var state = { filters: {}, sort: null, dir: 1, open: -1 };

  function parseNum(e) {
    e = e.trim();
    if (!e) return function () { return true; };
    var m = /^(-?\d*\.?\d+)\s*\.\.\s*(-?\d*\.?\d+)$/.exec(e);
    if (m) { var lo = +m[1], hi = +m[2]; return function (v) { return v !== null && v >= lo && v <= hi; }; }
    m = /^(<=|>=|<|>|=|==)?\s*(-?\d*\.?\d+)$/.exec(e);
    if (!m) return null;
    var x = +m[2];
    return {
      "<": function (v) { return v !== null && v < x; }, "<=": function (v) { return v !== null && v <= x; },
      ">": function (v) { return v !== null && v > x; }, ">=": function (v) { return v !== null && v >= x; }
    }[m[1]] || function (v) { return v !== null && v === x; };
  }

  function visible() {
    var tests = [];
    COLS.forEach(function (c) {
      var f = state.filters[c.k];
      if (f === undefined || f === "") return;
      if (c.t === "cat") tests.push(function (o) { return String(o[c.k]) === f; });
      else if (c.t === "text") { var q = f.toLowerCase(); tests.push(function (o) { return String(o[c.k] || "").toLowerCase().indexOf(q) >= 0; }); }
      else { var p = parseNum(f); if (p) tests.push(function (o) { return p(o[c.k] === undefined ? null : o[c.k]); }); }
    });
    var rows = S.filter(function (o) { return tests.every(function (t) { return t(o); }); });
    if (state.sort) {
      var k = state.sort, dir = state.dir;
      rows.sort(function (a, b) {
        var x = a[k], y = b[k];
        if (x === null || x === undefined) return (y === null || y === undefined) ? a.i - b.i : 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : x > y ? 1 : a.i - b.i) * dir;
      });
    }
    return rows;
  }

  function cell(c, o) {
    var v = o[c.k];
    if (c.p) return '<td class="preview">' + esc(preview(v)) + "</td>";
    if (c.t === "num") return '<td class="num">' + fmt(v, c.d || 0) + "</td>";
    return "<td>" + esc(v === null || v === undefined ? "—" : v) + "</td>";
  }

  function head() {
    var h = "<tr>" + COLS.map(function (c) {
      var arrow = state.sort === c.k ? (state.dir > 0 ? " ▲" : " ▼") : "";
      return '<th data-k="' + c.k + '" style="width:' + (c.w || 5) + 'em"' + (c.t === "num" ? ' class="num"' : "") + ">" + esc(c.l) + arrow + "</th>";
    }).join("") + '</tr><tr class="filters">';
    h += COLS.map(function (c) {
      var v = state.filters[c.k] || "";
      if (c.t === "cat") {
        var vals = {};
        S.forEach(function (o) { vals[String(o[c.k])] = 1; });
        return '<th><select data-f="' + c.k + '"><option value="">all</option>' + Object.keys(vals).sort().map(function (x) {
          return '<option value="' + esc(x) + '"' + (x === v ? " selected" : "") + ">" + esc(x) + "</option>";
        }).join("") + "</select></th>";
      }
      return '<th><input data-f="' + c.k + '" value="' + esc(v) + '" placeholder="' + (c.t === "num" ? "&lt;, &gt;, a..b" : "contains") + '"></th>';
    }).join("") + "</tr>";
    $("explorer-table").tHead.innerHTML = h;
  }

  function body() {
    var rows = visible();
    $("explorer-table").tBodies[0].innerHTML = rows.map(function (o) {
      return '<tr data-i="' + o.i + '"' + (o.i === state.open ? ' class="open"' : "") + ">" + COLS.map(function (c) { return cell(c, o); }).join("") + "</tr>";
    }).join("");
    var withPrompt = S.filter(function (o) { return o.prompt !== null; }).length;
    $("explorer-status").textContent = rows.length + " of " + S.length + " samples shown (" + runs.length + " run" +
      (runs.length === 1 ? "" : "s") + "; prompts recorded for " + withPrompt + ")";
    $("explorer-table").setAttribute("data-rows", rows.length);
  }

  // Text with the fitter's marks of what was cut highlighted.
  function markCuts(text) {
    return esc(text).replace(/\.\.\.\[\d+ characters? cut\]\.\.\.|\(\d+ earlier cells? not shown\)|\(\d+ more variables? not shown\)/g,
      function (m) { return "<mark>" + m + "</mark>"; });
  }
  function shown(text, cls) {
    if (text === null || text === undefined) return '<pre class="sv-text"><span class="sv-empty">(none)</span></pre>';
    if (text === "") return '<pre class="sv-text ' + (cls || "") + '"><span class="sv-empty">(empty)</span></pre>';
    return '<pre class="sv-text ' + (cls || "") + '">' + esc(text) + "</pre>";
  }
  function visibleWs(s) { return /^\s+$/.test(s) ? s.replace(/ /g, "·").replace(/\t/g, "→").replace(/\n/g, "↵\n") : s.replace(/\n/g, "↵\n"); }
  function diffBlock(reference, prediction) {
    var d = ThemistoDiff.textDiff(reference || "", prediction || "");
    if (!d.unit) return '<div class="sv-note">The texts are too far apart to diff; they are shown apart above.</div>';
    var h = d.ops.map(function (o) {
      if (o[0] === 0) return esc(o[1]);
      return (o[0] < 0 ? "<del>" : "<ins>") + esc(visibleWs(o[1])) + (o[0] < 0 ? "</del>" : "</ins>");
    }).join("");
    var e = ThemistoDiff.edits(d);
    return '<div class="sv-label">Diff of the prediction against the reference (' + d.unit + " level, " + e + " " + d.unit +
      (e === 1 ? "" : "s") + ' inserted or deleted)</div><pre class="sv-text sv-diff">' + (h || '<span class="sv-empty">(both empty)</span>') + "</pre>";
  }
  function promptBlock(o) {
    var h = "";
    if (o.dropped_steps > 0) h += '<div class="sv-note">' + o.dropped_steps + " earlier step" + (o.dropped_steps === 1 ? "" : "s") + " dropped (oldest first) to fit the budget; " + o.steps_kept + " kept.</div>";
    if (o.truncated_chars > 0) h += '<div class="sv-note">' + o.truncated_chars + " characters cut from long outputs or code (marked).</div>";
    if (o.prompt === null) return h + '<div class="sv-note">' + esc(o.prompt_note || "prompt not recorded") + "</div>";
    return h + '<details open><summary class="sv-label">Prompt as the model saw it (' + o.prompt_tokens + " tokens, " + o.reused_prompt_tokens +
      " reused from the previous sample)</summary><pre class=\"sv-text sv-prompt\">" + markCuts(o.prompt) + "</pre></details>";
  }
  function meta(o) {
    var rows = [["run", o.runName], ["id", o.id], ["dataset", o.dataset], ["trajectory", o.trajectory + " step " + o.step], ["task", o.task + ", runtime " + o.rt],
      ["template", o.template || "—"], ["scores", o.exact_match === null ? "— (not scored)" : "EM " + fmt(o.exact_match, 0) + " (whitespace-free " + fmt(o.exact_match_ws, 0) + "), ROUGE-L " + fmt(o.rouge_l, 3) + " (code " + fmt(o.rouge_l_code, 3) + "), chrF " + fmt(o.chrf, 2)],
      ["answer kind", o.kind], ["finish", o.finish + (o.skip_detail ? " (" + o.skip_detail + ")" : "")], ["tokens", o.prompt_tokens + " prompt, " + o.generated_tokens + " generated"],
      ["context", o.steps_kept + " steps kept, " + o.dropped_steps + " dropped, " + o.truncated_chars + " characters cut, " + o.runtime_rows_kept + " runtime rows"]];
    return '<table class="sv-meta">' + rows.map(function (r) { return "<tr><th>" + esc(r[0]) + "</th><td>" + esc(r[1]) + "</td></tr>"; }).join("") + "</table>";
  }

  // Highlight the open sample's row (without drawing the table again).
  function mark(i) {
    var tb = $("explorer-table").tBodies[0], old = tb.querySelector("tr.open"), row = tb.querySelector('tr[data-i="' + i + '"]');
    if (old) old.className = "";
    if (row) row.className = "open";
    state.open = i;
  }
  function openSample(i, scroll) {
    var o = S[i], v = $("sample-view");
    if (!o) return;
    var raw = o.raw_prediction === o.prediction ? '<div class="sv-empty">(the same as the cleaned prediction)</div>' : shown(o.raw_prediction);
    v.innerHTML = '<button class="sv-close" id="sv-close">close</button><h3>Sample ' + esc(o.id) + " · " + esc(o.runName) + "</h3>" + meta(o) +
      '<div class="sv-grid"><div><div class="sv-label">Prediction (cleaned, scored)</div><div id="sv-prediction">' + shown(o.prediction) +
      '</div></div><div><div class="sv-label">Reference</div><div id="sv-reference">' + shown(o.reference) + "</div></div></div>" +
      diffBlock(o.reference, o.prediction) + '<div class="sv-label">Raw prediction (as generated)</div>' + raw + promptBlock(o);
    v.hidden = false;
    v.setAttribute("data-open", o.id);
    $("sv-close").onclick = function () { v.hidden = true; mark(-1); };
    mark(i);
    if (scroll) v.scrollIntoView();
  }

  // ---- paired view ----
  var P = { a: 0, b: runs.length > 1 ? 1 : 0, by: "id", metric: "chrf", task: "", dir: 1, pairs: [] };
  var METRICS = { chrf: ["chrF", 1], rouge_l: ["ROUGE-L", 3], exact_match: ["EM", 0] };
  function pairKey(o) { return P.by === "id" ? o.id : o.dataset + "\u0001" + o.trajectory + "\u0001" + o.step + "\u0001" + o.task; }
  function computePairs() {
    var A = {}, B = {}, pairs = [], onlyA = 0, onlyB = 0;
    S.forEach(function (o) {
      if (P.task && o.task !== P.task) return;
      if (o.run === P.a && (P.by === "id" || !o.runtime)) A[pairKey(o)] = o;
      if (o.run === P.b && (P.by === "id" || o.runtime)) B[pairKey(o)] = o;
    });
    Object.keys(A).forEach(function (k) {
      if (B[k]) {
        var x = A[k][P.metric], y = B[k][P.metric];
        pairs.push({ a: A[k], b: B[k], d: x === null || y === null ? null : y - x });
      } else onlyA++;
    });
    Object.keys(B).forEach(function (k) { if (!A[k]) onlyB++; });
    var dir = P.dir;
    pairs.sort(function (p, q) {
      if (p.d === null) return q.d === null ? p.a.i - q.a.i : 1;
      if (q.d === null) return -1;
      return (p.d - q.d) * dir || p.a.i - q.a.i;
    });
    P.pairs = pairs;
    return { onlyA: onlyA, onlyB: onlyB };
  }
  function pairedControls() {
    var opts = function (sel) { return runs.map(function (r, i) { return '<option value="' + i + '"' + (i === sel ? " selected" : "") + ">" + esc(r.name) + "</option>"; }).join(""); };
    var sel = function (name, choices, cur) { return '<select id="pv-' + name + '">' + choices.map(function (c) { return '<option value="' + c[0] + '"' + (c[0] === cur ? " selected" : "") + ">" + esc(c[1]) + "</option>"; }).join("") + "</select>"; };
    $("paired-controls").innerHTML = '<label>A <select id="pv-a">' + opts(P.a) + '</select></label><label>B <select id="pv-b">' + opts(P.b) + "</select></label><label>pair by " +
      sel("by", [["id", "sample id"], ["step", "step and task (A: runtime off, B: on)"]], P.by) + "</label><label>metric " +
      sel("metric", [["chrf", "chrF"], ["rouge_l", "ROUGE-L"], ["exact_match", "exact match"]], P.metric) + "</label><label>task " +
      sel("task", [["", "all"], ["next_cell", "next_cell"], ["output", "output"]], P.task) + "</label>";
    ["a", "b", "by", "metric", "task"].forEach(function (k) {
      $("pv-" + k).onchange = function (e) { P[k] = k === "a" || k === "b" ? +e.target.value : e.target.value; pairedBody(); };
    });
  }
  function pairedBody() {
    var c = computePairs(), m = METRICS[P.metric], up = 0, down = 0, same = 0, sum = 0, n = 0;
    P.pairs.forEach(function (p) { if (p.d === null) return; n++; sum += p.d; if (p.d > 0) up++; else if (p.d < 0) down++; else same++; });
    $("paired-summary").textContent = P.pairs.length + " pairs (" + n + " scored in both): B " + runs[P.b].name + " higher in " + up + ", lower in " + down +
      ", equal in " + same + "; mean " + m[0] + " difference B − A " + (n ? (sum / n).toFixed(m[1] + 1) : "—") + "; only in A: " + c.onlyA + ", only in B: " + c.onlyB + ".";
    $("paired-table").tHead.innerHTML = "<tr><th>task</th><th>trajectory</th><th class=\"num\">step</th><th>runtime A/B</th><th class=\"num\">A " + m[0] +
      "</th><th class=\"num\">B " + m[0] + '</th><th class="num" id="pv-sort">Δ B − A ' + (P.dir > 0 ? "▲" : "▼") + "</th><th>A answer</th><th>B answer</th><th>A prediction</th><th>B prediction</th><th>reference</th></tr>";
    $("pv-sort").onclick = function () { P.dir = -P.dir; pairedBody(); };
    $("paired-table").tBodies[0].innerHTML = P.pairs.map(function (p, j) {
      var cls = p.d === null ? "" : p.d > 0 ? "pos" : p.d < 0 ? "neg" : "";
      return '<tr data-j="' + j + '"><td>' + esc(p.a.task) + "</td><td>" + esc(p.a.trajectory) + '</td><td class="num">' + p.a.step + "</td><td>" + p.a.rt + "/" + p.b.rt +
        '</td><td class="num">' + fmt(p.a[P.metric], m[1]) + '</td><td class="num">' + fmt(p.b[P.metric], m[1]) + '</td><td class="num ' + cls + '">' +
        (p.d === null ? "—" : (p.d > 0 ? "+" : "") + p.d.toFixed(m[1])) + "</td><td>" + esc(p.a.kind) + "</td><td>" + esc(p.b.kind) + '</td><td class="preview">' +
        esc(preview(p.a.prediction)) + '</td><td class="preview">' + esc(preview(p.b.prediction)) + '</td><td class="preview">' + esc(preview(p.a.reference)) + "</td></tr>";
    }).join("");
    $("paired-table").setAttribute("data-rows", P.pairs.length);
  }
  function openPair(p, scroll) {
    var v = $("pair-view"), side = function (o, name) {
      return "<div><div class=\"sv-label\">" + name + ": " + esc(o.runName) + ", runtime " + o.rt + " (" + esc(o.kind) + ", " + esc(o.finish) + ", " +
        METRICS[P.metric][0] + " " + fmt(o[P.metric], METRICS[P.metric][1]) + ")</div>" + shown(o.prediction) + diffBlock(o.reference, o.prediction) +
        "<details><summary class=\"sv-label\">prompt</summary>" + promptBlock(o) + "</details></div>";
    };
    v.innerHTML = '<button class="sv-close" id="pv-close">close</button><h3>' + esc(p.a.trajectory) + " step " + p.a.step + " · " + esc(p.a.task) + "</h3>" +
      '<div class="sv-label">Reference</div>' + shown(p.a.reference) + '<div class="sv-grid">' + side(p.a, "A") + side(p.b, "B") + "</div>";
    v.hidden = false;
    v.setAttribute("data-open", p.a.id);
    $("pv-close").onclick = function () { v.hidden = true; };
    if (scroll) v.scrollIntoView();
  }

  // ---- wiring ----
  function fromHash() {
    var h = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) { var p = kv.split("="); if (p[0]) h[decodeURIComponent(p[0])] = decodeURIComponent(p[1] || ""); });
    // view=samples: the explorer and the paired view alone, nothing scrolled.
    var focus = h.view === "samples";
    if (focus) document.body.classList.add("focus");
    if (h.sample) {
      var run = h.run === undefined ? null : +h.run;
      var o = S.filter(function (x) { return x.id === h.sample && (run === null || x.run === run); })[0];
      if (o) openSample(o.i, !focus);
    }
    if (h.pair && $("paired")) {
      var p = P.pairs.filter(function (q) { return q.a.id === h.pair || q.b.id === h.pair; })[0];
      if (p) openPair(p, !focus);
    }
  }
  var table = $("explorer-table");
  table.tHead.addEventListener("click", function (e) {
    var th = e.target.closest("th[data-k]");
    if (!th) return;
    var k = th.getAttribute("data-k");
    if (state.sort === k) state.dir = -state.dir; else { state.sort = k; state.dir = 1; }
    head(); body();
  });
  table.tHead.addEventListener("input", function (e) {
    var f = e.target.getAttribute("data-f");
    if (!f) return;
    state.filters[f] = e.target.value;
    var col = COLS.filter(function (c) { return c.k === f; })[0];
    if (col && col.t === "num") e.target.className = parseNum(e.target.value) ? "" : "bad";
    body();
  });
  table.tBodies[0].addEventListener("click", function (e) {
    var tr = e.target.closest("tr[data-i]");
    if (!tr) return;
    var o = S[+tr.getAttribute("data-i")];
    location.hash = "sample=" + encodeURIComponent(o.id) + "&run=" + o.run;
  });
  window.addEventListener("hashchange", fromHash);
  $("explorer-focus").onclick = function () { document.body.classList.toggle("focus"); };
  head(); body();
  if ($("paired")) {
    var ids = {};
    S.forEach(function (o) { if (o.run === P.a) ids[o.id] = 1; });
    var shared = S.some(function (o) { return o.run === P.b && P.a !== P.b && ids[o.id]; });
    if (!shared) P.by = "step";
    pairedControls(); pairedBody();
    $("paired-table").tBodies[0].addEventListener("click", function (e) {
      var tr = e.target.closest("tr[data-j]");
      if (tr) openPair(P.pairs[+tr.getAttribute("data-j")], true);
    });
  }
  fromHash();
  // Load figures: this script, and the script plus the page's first full layout.
  $("explorer").setAttribute("data-init-ms", (performance.now() - t0).toFixed(0));
  void document.body.offsetHeight;
  $("explorer").setAttribute("data-layout-ms", (performance.now() - t0).toFixed(0));
  $("explorer").setAttribute("data-ready", "1");
})();
