// themisto report: the diff of a prediction against its reference.
// Myers' O(ND) algorithm ("An O(ND) Difference Algorithm and Its
// Variations", 1986) on Unicode code points after the common prefix and
// suffix are trimmed; when the texts are long (over CHAR_LIMIT code points
// together) or far apart (over CHAR_MAX_D edits) it falls back to the same
// algorithm on lines, and past LINE_MAX_D line edits it gives up (the texts
// are then shown apart). Time O((N + M) D), memory O(D^2).
"use strict";
var ThemistoDiff = (function () {
  var CHAR_LIMIT = 20000, CHAR_MAX_D = 2000, LINE_MAX_D = 4000;

  // ops: [[kind, items]] with kind 0 (in both), -1 (only in a), 1 (only in b);
  // null when a and b are more than maxD edits apart.
  function myers(a, b, maxD) {
    var n = a.length, m = b.length, lim = Math.min(n + m, maxD), off = lim + 1;
    var v = new Int32Array(2 * lim + 3), trace = [], d, k, x, y, found = -1;
    for (d = 0; d <= lim && found < 0; d++) {
      for (k = -d; k <= d; k += 2) {
        if (k === -d || (k !== d && v[off + k - 1] < v[off + k + 1])) x = v[off + k + 1];
        else x = v[off + k - 1] + 1;
        y = x - k;
        while (x < n && y < m && a[x] === b[y]) { x++; y++; }
        v[off + k] = x;
        if (x >= n && y >= m) { found = d; break; }
      }
      if (found < 0) trace.push(v.slice(off - d, off + d + 1));
    }
    if (found < 0) return null;
    var rev = [];
    x = n; y = m;
    for (d = found; d > 0; d--) {
      var w = trace[d - 1], at = function (kk) { return w[kk + d - 1]; };
      k = x - y;
      var down = k === -d || (k !== d && at(k - 1) < at(k + 1));
      var pk = down ? k + 1 : k - 1, px = at(pk), py = px - pk;
      while (x > px && y > py) { rev.push([0, a[x - 1]]); x--; y--; }
      if (down) rev.push([1, b[y - 1]]); else rev.push([-1, a[x - 1]]);
      x = px; y = py;
    }
    while (x > 0 && y > 0) { rev.push([0, a[x - 1]]); x--; y--; }
    var ops = [];
    for (var i = rev.length - 1; i >= 0; i--) {
      var last = ops[ops.length - 1];
      if (last && last[0] === rev[i][0]) last[1].push(rev[i][1]);
      else ops.push([rev[i][0], [rev[i][1]]]);
    }
    return ops;
  }

  function withEnds(a, b, maxD) {
    var p = 0, s = 0;
    while (p < a.length && p < b.length && a[p] === b[p]) p++;
    while (s < a.length - p && s < b.length - p && a[a.length - 1 - s] === b[b.length - 1 - s]) s++;
    var mid = myers(a.slice(p, a.length - s), b.slice(p, b.length - s), maxD);
    if (!mid) return null;
    var ops = [];
    if (p) ops.push([0, a.slice(0, p)]);
    ops = ops.concat(mid);
    if (s) ops.push([0, a.slice(a.length - s)]);
    return ops;
  }

  function lines(t) { return t.match(/[^\n]*\n|[^\n]+/g) || []; }

  // {unit: "character" | "line" | null, ops: [[kind, text]]} for a → b.
  function textDiff(a, b) {
    var ca = Array.from(a), cb = Array.from(b), ops = null, unit = null;
    if (ca.length + cb.length <= CHAR_LIMIT) { ops = withEnds(ca, cb, CHAR_MAX_D); unit = "character"; }
    if (!ops) { ops = withEnds(lines(a), lines(b), LINE_MAX_D); unit = "line"; }
    if (!ops) return { unit: null, ops: [] };
    return { unit: unit, ops: ops.map(function (o) { return [o[0], o[1].join("")]; }) };
  }

  // Edit distance in the diff's unit (insertions + deletions).
  function edits(diff) {
    var e = 0;
    diff.ops.forEach(function (o) { if (o[0] !== 0) e += diff.unit === "line" ? lines(o[1]).length : Array.from(o[1]).length; });
    return e;
  }

  return { myers: myers, textDiff: textDiff, edits: edits, lines: lines };
})();
if (typeof module !== "undefined") module.exports = ThemistoDiff;
