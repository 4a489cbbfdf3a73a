// The ascend-memsim trace player: draws the JSON of the page (player.py) in the browser.
// Text from the trace goes into the page through textContent and attributes only.
// Size: over 600 lines, on purpose: the page carries one script (no network, no module
// loader), so the panels, their timeline, map and block close-up, and the controls share it.
(function () {
  "use strict";
  const D = JSON.parse(document.getElementById("memsim-data").textContent);
  const NS = "http://www.w3.org/2000/svg";
  const UNITS = [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 1024], ["B", 1]];
  const PAGES = ["normal", "huge", "huge1g"];
  const MAX_DRAWN = 4000;
  const WIDTH = 570;        // of a panel's pictures, so that two sit side by side   // blocks drawn per map; the figures count them all
  // a block: [event, offset, size, rule size, footprint, page, api, module, stack, fallback]
  const EV = 0, OFF = 1, SIZE = 2, RULE = 3, FP = 4, PAGE = 5, API = 6, MOD = 7, STACK = 8,
    FALLBACK = 9;

  function fmt(n) {   // as ascend_memsim.memory.units.format_bytes: exact, largest units
    if (n < 0) return "-" + fmt(-n);
    const parts = [];
    for (const [unit, scale] of UNITS) {
      if (n >= scale || (!parts.length && scale === 1)) {
        const count = Math.floor(n / scale);
        n -= count * scale;
        parts.push(count + " " + unit);
      }
    }
    return parts.join(" + ");
  }

  function pageSize(page) {   // a physical handle's pages (normal attributes are placed huge)
    return page === 2 ? "1 GiB pages" : "2 MiB pages";
  }

  function offsetLabel(off) {
    return off % 2 ** 20 === 0 ? "+" + off / 2 ** 20 + " MiB" : "+" + fmt(off);
  }

  function svg(tag, attrs, parent, text) {
    const node = document.createElementNS(NS, tag);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function html(tag, attrs, parent, text) {
    const node = document.createElement(tag);
    for (const key in attrs) node.setAttribute(key, attrs[key]);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  const slider = document.getElementById("slider");
  const label = document.getElementById("event-label");
  const what = document.getElementById("what");
  const tip = document.getElementById("tip");
  const last = Math.max(D.shown - 1, 0);
  slider.max = String(last);
  const panels = [];
  let now = 0;

  // -- one panel: a product's figures, timeline and map ------------------------------------
  function Panel(slot, productIndex) {
    this.slot = slot;
    this.root = html("section", {"class": "panel", "data-slot": String(slot)},
                     document.getElementById("panels"));
    this.load(productIndex);
  }

  Panel.prototype.load = function (productIndex) {
    const P = D.products[productIndex];
    this.P = P;
    this.live = new Map();
    this.next = 0;          // the next change to apply (index into P.ops / 2)
    this.bytes = 0;
    this.requested = 0;
    this.root.textContent = "";
    this.root.setAttribute("data-product", P.product);
    const head = html("div", {"class": "phead"}, this.root);
    const select = html("select", {"class": "product", "aria-label": "product"}, head);
    D.products.forEach((Q, i) => {
      const option = html("option", {value: String(i)}, select,
                          Q.product + " (" + fmt(Q.capacity) + ")");
      if (i === productIndex) option.selected = true;
    });
    select.addEventListener("change", () => {
      this.load(Number(select.value));
      this.seek(now);
      this.draw(now);
    });
    html("span", {"class": "verdict " + (P.failed ? "bad" : "good")}, head,
         P.failed ? P.failed + " failed malloc" + (P.failed === 1 ? "" : "s") : "fits");
    this.figs = html("div", {"class": "figs"}, this.root);
    this.timeline();
    this.legend();
    this.map();
    this.zoomBox = html("div", {"class": "closeup"}, this.root);
    this.pinned = null;
  };

  Panel.prototype.timeline = function () {
    // the peak's label has a band of its own above the plot; the capacity's sits under its
    // line, inside the plot: the two never overprint, wherever the peak is
    const P = this.P, W = WIDTH, H = 160, left = 64, right = 12, top = 32, bottom = 24;
    const w = W - left - right, h = H - top - bottom, n = Math.max(D.events, 1);
    const peak = P.timeline.reduce((m, p) => Math.max(m, p[1]), 0);
    const showCap = P.capacity && P.capacity <= 4 * Math.max(peak, 1);
    const tickStep = niceBytes(Math.max(peak, showCap ? P.capacity : 0, 1));
    const topValue = Math.max(peak, showCap ? P.capacity : 0, 1) * 1.1;
    const x = (i) => left + Math.max(i, 0) / n * w;   // event N at x = N
    const y = (v) => top + h - v / topValue * h;
    const s = svg("svg", {"class": "tl", width: W, height: H, viewBox: `0 0 ${W} ${H}`},
                  this.root);
    this.x = x;
    this.tlTop = top;
    this.tlH = h;
    svg("rect", {x: left, y: top, width: w, height: h, "class": "plot"}, s);
    for (let v = 0; v <= topValue; v += tickStep) {
      svg("line", {x1: left, x2: left + w, y1: y(v), y2: y(v), "class": "grid"}, s);
      svg("text", {x: left - 5, y: y(v) + 3.5, "class": "tick", "text-anchor": "end"}, s,
          fmt(v));
    }
    let d = `M${x(0)},${y(0)}`;
    P.timeline.forEach((p, k) => {
      const x2 = k + 1 < P.timeline.length ? x(P.timeline[k + 1][0]) : x(n);
      d += ` L${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)} L${x2.toFixed(1)},${y(p[1]).toFixed(1)}`;
    });
    d += ` L${x(n)},${y(0)} Z`;
    svg("path", {d: d, "class": "area"}, s);
    if (showCap) {
      svg("line", {x1: left, x2: left + w, y1: y(P.capacity), y2: y(P.capacity), "class": "cap"},
          s);
      // under the line, on the side away from the peak's mark
      const right = P.peak[0] < 0 || x(P.peak[0]) < left + w / 2;
      svg("text", {x: right ? left + w - 3 : left + 3, y: y(P.capacity) + 11, "class": "capt",
                   "text-anchor": right ? "end" : "start"}, s, "capacity " + fmt(P.capacity));
    }
    if (D.shown < D.events) {
      const beyond = svg("rect", {x: x(D.shown), y: top, width: x(n) - x(D.shown), height: h,
                                  "class": "beyond"}, s);
      svg("title", {}, beyond, "beyond the slider: the page holds the first " +
          D.shown + " events' blocks");
    }
    const step = niceStep(n);
    for (let i = 0; i <= n; i += step) {
      svg("text", {x: x(i), y: top + h + 14, "class": "tick", "text-anchor": "middle"}, s,
          String(i));
    }
    svg("text", {x: left + w, y: H - 1, "class": "tick", "text-anchor": "end"}, s,
        "event number (event N at x = N)");
    for (const index of P.failures) {
      const mark = svg("path", {d: `M${x(index)},${top + h} l-4,7 h8 z`, "class": "fail-mark",
                                "data-index": String(index)}, s);
      svg("title", {}, mark, "malloc failed at event " + index);
    }
    if (P.first_failure) {
      const f = P.first_failure.index;
      svg("line", {x1: x(f), x2: x(f), y1: top, y2: top + h, "class": "first-failure",
                   "data-index": String(f)}, s);
      const text = "first failure (event " + f + ")";
      svg("text", {x: x(f) + 3 + 6 * text.length > left + w ? x(f) - 3 : x(f) + 3,
                   y: top + h - 4, "class": "failt",
                   "text-anchor": x(f) + 3 + 6 * text.length > left + w ? "end" : "start"}, s,
          text);
    }
    if (P.peak[0] >= 0) {
      const px = x(P.peak[0]), py = y(P.peak[1]);
      const g = svg("g", {"class": "peak-mark", "data-index": String(P.peak[0]),
                          "data-bytes": String(P.peak[1])}, s);
      svg("path", {d: `M${px},${py} l-5,-9 h10 z`}, g);
      const text = "peak " + fmt(P.peak[1]) + " (event " + P.peak[0] + ")";
      const label = svg("text", {x: px, y: top - 8, "class": "peakt"}, g, text);
      // centred over the mark, kept inside the picture (its width as the browser measures it)
      const tw = label.getComputedTextLength ? label.getComputedTextLength() || 6.4 * text.length
        : 6.4 * text.length;
      label.setAttribute("x", Math.max(2, Math.min(px - tw / 2, W - 2 - tw)).toFixed(1));
      svg("line", {x1: px, x2: px, y1: top - 5, y2: py - 9, "class": "peakl"}, g);
    }
    this.cursor = svg("rect", {y: top, height: h, "class": "cursor"}, s);
    s.addEventListener("click", (e) => {
      const box = s.getBoundingClientRect();
      const at = Math.floor((e.clientX - box.left - left) / w * n);
      go(Math.min(Math.max(at, 0), last));
    });
  };

  function niceBytes(top) {   // a round step giving 3 to 6 ticks (as the SVG's _nice_step)
    let unit = 1;
    for (const scale of [2 ** 30, 2 ** 20, 2 ** 10]) {
      if (top >= 4 * scale) { unit = scale; break; }
    }
    for (const m of [1, 2, 4, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 256, 512, 1024]) {
      if (top / (m * unit) <= 5) return m * unit;
    }
    return Math.max(1, Math.ceil(top / 5));
  }

  function niceStep(n) {
    const raw = Math.max(1, n / 6);
    const mag = 10 ** Math.floor(Math.log10(raw));
    for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
    return raw;
  }

  Panel.prototype.legend = function () {
    const box = html("div", {"class": "legend"}, this.root);
    const fills = D.fills || {};
    const kinds = new Set(this.P.blocks.filter((b) => b[API] !== D.physical_api &&
                                                      !(b[API] in fills)).map((b) => b[PAGE]));
    if (!kinds.size) { kinds.add(0); kinds.add(1); }
    const items = [...kinds].sort().map((k) => ["sw-" + PAGES[k], "requested, " + PAGES[k] +
                                                " pages"]);
    const handles = new Set(this.P.blocks.filter((b) => b[API] === D.physical_api)
                                          .map((b) => b[PAGE]));
    for (const k of [...handles].sort()) {
      items.push(["sw-physical", "physical handle, " + pageSize(k)]);
    }
    const own = new Set(this.P.blocks.filter((b) => b[API] in fills).map((b) => b[API]));
    for (const api of [...own].sort()) items.push(["sw", D.apis[api], fills[api]]);
    if (this.P.blocks.some((b) => b[FALLBACK])) items.push(["sw-fallback", D.fallback_label]);
    items.push(["sw-padding", "padding (size rule, e.g. +32)"],
               ["sw-rounding", "page rounding"], ["sw-free", "free"]);
    for (const [cls, text, fill] of items) {
      const item = html("span", {"class": "item"}, box);
      const sw = html("span", {"class": "sw " + cls}, item);
      if (fill) sw.style.background = fill;
      html("span", {}, item, text);
    }
  };

  Panel.prototype.map = function () {
    const P = this.P, W = WIDTH, left = 64, right = 12, rowH = 13, gap = 3;
    const barW = W - left - right;
    const H = 6 + P.lines.length * (rowH + gap);
    const s = svg("svg", {"class": "map", width: W, height: H, viewBox: `0 0 ${W} ${H}`},
                  this.root);
    const defs = svg("defs", {}, s);
    const hatch = "hatch" + this.slot;
    const pattern = svg("pattern", {id: hatch, width: 6, height: 6,
                                    patternUnits: "userSpaceOnUse",
                                    patternTransform: "rotate(45)"}, defs);
    svg("rect", {width: 6, height: 6, fill: "#FFFFFF"}, pattern);
    svg("line", {x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#999999", "stroke-width": 2}, pattern);
    this.hatch = hatch;
    this.rowY = new Map();
    let yy = 4;
    for (const line of P.lines) {
      if (line[0] === 0) {
        const r = line[1];
        this.rowY.set(r, yy);
        const rowW = Math.min(P.row_bytes, P.capacity - r * P.row_bytes) / P.row_bytes * barW;
        svg("rect", {x: left, y: yy, width: rowW, height: rowH, "class": "free"}, s);
        svg("text", {x: left - 5, y: yy + 10, "class": "addr", "text-anchor": "end"}, s,
            offsetLabel(r * P.row_bytes));
      } else {
        const size = Math.min(line[2] * P.row_bytes, P.capacity) - line[1] * P.row_bytes;
        svg("text", {x: left + barW / 2, y: yy + 10, "class": "fold",
                     "text-anchor": "middle"}, s,
            "… " + fmt(size) + " free (" + offsetLabel(line[1] * P.row_bytes) + " to " +
            offsetLabel(Math.min(line[2] * P.row_bytes, P.capacity)) + ") …");
      }
      yy += rowH + gap;
    }
    this.geometry = {left: left, barW: barW, rowH: rowH};
    this.layer = svg("g", {"class": "blocks"}, s);
    this.mapSvg = s;
  };

  // -- the state at event N: changes applied forward or undone backward ----------------------
  Panel.prototype.apply = function (signed, forward) {
    const id = Math.abs(signed) - 1, b = this.P.blocks[id];
    if ((signed > 0) === forward) {
      this.live.set(id, b);
      this.bytes += b[FP];
      this.requested += b[SIZE];
    } else {
      this.live.delete(id);
      this.bytes -= b[FP];
      this.requested -= b[SIZE];
    }
  };

  Panel.prototype.seek = function (n) {
    const ops = this.P.ops;
    while (this.next < ops.length / 2 && ops[2 * this.next] <= n) {
      this.apply(ops[2 * this.next + 1], true);
      this.next++;
    }
    while (this.next > 0 && ops[2 * (this.next - 1)] > n) {
      this.next--;
      this.apply(ops[2 * this.next + 1], false);
    }
  };

  // the changes made by event n: [[block id, +1 allocated / -1 freed]]
  Panel.prototype.changesAt = function (n) {
    const ops = this.P.ops, out = [];
    for (let k = this.next - 1; k >= 0 && ops[2 * k] === n; k--) {
      const s = ops[2 * k + 1];
      out.push([Math.abs(s) - 1, s > 0 ? 1 : -1]);
    }
    return out;
  };

  Panel.prototype.draw = function (n) {
    const P = this.P, g = this.geometry, layer = this.layer;
    layer.textContent = "";
    const colors = D.colors;
    let shown = [...this.live.entries()];
    const hidden = Math.max(0, shown.length - MAX_DRAWN);
    if (hidden) shown = shown.sort((a, b) => b[1][FP] - a[1][FP]).slice(0, MAX_DRAWN);
    const changes = this.changesAt(n);
    const fresh = new Set(changes.filter((c) => c[1] > 0).map((c) => c[0]));
    const piece = (start, end, cb) => {   // cut [start, end) at row boundaries
      let pos = start;
      while (pos < end) {
        const r = Math.floor(pos / P.row_bytes);
        const stop = Math.min(end, (r + 1) * P.row_bytes);
        const y = this.rowY.get(r);
        if (y !== undefined) {
          cb(g.left + (pos - r * P.row_bytes) / P.row_bytes * g.barW,
             (stop - pos) / P.row_bytes * g.barW, y, pos === start);
        }
        pos = stop;
      }
    };
    const over = [];
    for (const [id, b] of shown) {
      const physical = b[API] === D.physical_api;
      const off = b[OFF], color = physical ? colors.physical
        : (D.fills && D.fills[b[API]]) || colors.pages[b[PAGE]];
      const parts = [[off, off + b[SIZE], "data"]];
      if (b[RULE] > b[SIZE]) parts.push([off + b[SIZE], off + b[RULE], "padding"]);
      if (b[FP] > b[RULE]) parts.push([off + b[RULE], off + b[FP], "rounding"]);
      for (const [start, end, part] of parts) {
        piece(start, end, (x, w, y, first) => {
          const width = Math.max(w, part === "padding" ? 2 : 1);
          const attrs = {x: x.toFixed(2), y: y + 1, width: width.toFixed(2), height: g.rowH - 2,
                         "class": "blk " + part + (fresh.has(id) ? " new" : ""),
                         "data-id": String(id)};
          if (part === "data") {
            attrs.fill = color;
            if (b[FALLBACK]) attrs["class"] += " fallback";
          } else if (part === "padding") {
            attrs.fill = colors.padding;
          } else {
            attrs.fill = `url(#${this.hatch})`;
            attrs.stroke = color;
          }
          if (part === "padding") over.push(attrs);
          else svg("rect", attrs, layer);
          if (part === "data" && first) {
            const tail = b[FALLBACK] ? ", fallback" : "";
            let text = physical ? "physical handle, " + fmt(b[SIZE]) + ", " + pageSize(b[PAGE])
              : fmt(b[SIZE]) + " requested, " + D.apis[b[API]] + tail;
            if (text.length * 6 > w - 8) text = physical ? "physical handle" : fmt(b[SIZE]) + tail;
            if (text.length * 6 > w - 8) text = physical ? "physical handle" : fmt(b[SIZE]);
            if (text.length * 6 <= w - 8) {
              svg("text", {x: (x + 4).toFixed(2), y: y + 10, "class": "inl"}, layer, text);
            }
          }
        });
      }
      for (const [edge, isEnd] of [[off, false], [off + b[FP], true]]) {
        let r = Math.floor(edge / P.row_bytes);
        if (isEnd && edge % P.row_bytes === 0) r -= 1;   // an end on a boundary closes the row
        const y = this.rowY.get(r);
        if (y !== undefined) {
          const ex = g.left + (edge - r * P.row_bytes) / P.row_bytes * g.barW;
          svg("line", {x1: ex.toFixed(2), x2: ex.toFixed(2), y1: y, y2: y + g.rowH,
                       "class": "edge"}, layer);
        }
      }
    }
    for (const attrs of over) svg("rect", attrs, layer);   // padding above the rounding
    for (const [id, sign] of changes) {   // where a block freed by this event was
      if (sign > 0) continue;
      const b = P.blocks[id];
      piece(b[OFF], b[OFF] + b[FP], (x, w, y) => {
        svg("rect", {x: x.toFixed(2), y: y + 0.5, width: Math.max(w, 2).toFixed(2),
                     height: g.rowH - 1, "class": "freed", "data-id": String(id)}, layer);
      });
    }
    // the figures, as text and as attributes a test can read
    const blocks = this.live.size;
    this.root.setAttribute("data-event", String(n));
    this.root.setAttribute("data-bytes", String(this.bytes));
    this.root.setAttribute("data-blocks", String(blocks));
    this.root.setAttribute("data-drawn", String(shown.length));
    let text = "after event " + n + ": " + blocks + " block" + (blocks === 1 ? "" : "s") +
      ", " + fmt(this.bytes) + " in use (footprint), " + fmt(this.requested) + " requested";
    if (hidden) text += "; the " + MAX_DRAWN + " largest blocks drawn";
    this.figs.textContent = text;
    const detail = html("div", {"class": "marks"}, this.figs);
    if (P.peak[0] >= 0) {
      html("span", {"class": "peakt"}, detail, "peak " + fmt(P.peak[1]) + " at event " +
           P.peak[0]);
    }
    if (P.first_failure) {
      const text = "first failure at event " + P.first_failure.index + ": " +
        P.first_failure.message;
      html("span", {"class": "failt", title: text}, detail, text);
    }
    if (P.failures.indexOf(n) >= 0) html("span", {"class": "failt now"}, detail,
                                          "this malloc failed here");
    // another process's memory mapped here: not this device's memory, named under the figures
    const mapped = (P.imports || []).filter((m) => m[0] <= n && (m[1] < 0 || n < m[1]));
    this.root.setAttribute("data-imports", String(mapped.length));
    for (const m of mapped) {
      html("div", {"class": "import"}, this.figs, "mapped from another process: " + m[2]);
    }
    this.closeup(changes);
    this.cursor.setAttribute("x", this.x(n).toFixed(1));
    this.cursor.setAttribute("width", Math.max(this.x(n + 1) - this.x(n), 1.5).toFixed(1));
  };

  // -- a block close up: whole and magnified where the request ends (observe/closeup.py) -----
  const GRANULE = [64, 2 ** 21, 2 ** 30];   // bytes of a normal, huge and 1 GiB page
  const WINDOW = 256;                        // bytes the magnified bar shows

  function own(b) {   // a block of the program's (not a physical handle, not a pool's granule)
    return b[API] !== D.physical_api && !(D.fills && b[API] in D.fills);
  }

  // the rules that made a block's footprint, from its figures (as explain says them)
  function why(b, product) {
    const size = b[SIZE], rule = b[RULE], fp = b[FP], api = D.apis[b[API]];
    if (!own(b)) return [fmt(size) + " in " + fmt(fp) + ": " + api + ", whole pages"];
    const aligned = Math.ceil(size / 32) * 32, lines = [];
    if (rule - aligned === 32) {
      lines.push("size rule: ALIGN_UP(" + size + ", 32) + 32 = " + rule + ": " + api +
                 " on " + product + " adds 32 bytes (the +32 rule; aclrtMallocAlign32 " +
                 "and Ascend 950PR/DT do not)");
    } else if (rule === aligned) {
      lines.push("size rule: ALIGN_UP(" + size + ", 32) = " + rule + ": no +32 for " + api +
                 " on " + product);
    } else {
      lines.push("size rule: " + size + " bytes become " + rule);
    }
    const granule = GRANULE[b[PAGE]], pages = fp / granule;
    lines.push(PAGES[b[PAGE]] + " pages of " + fmt(granule) + ": footprint ALIGN_UP(" + rule +
               ", " + fmt(granule) + ") = " + fp + (b[PAGE] ? " (" + pages + " page" +
               (pages === 1 ? "" : "s") + ")" : ""));
    if (b[FALLBACK]) {
      lines.push("HUGE_FIRST fell back: no free 2 MiB huge page could be had, so normal pages");
    }
    lines.push("=> " + fp + " bytes for " + size + " requested: " + (rule - size) +
               " B padding + " + (fp - rule) + " B page rounding");
    return lines;
  }

  // the close-up of the block clicked (pinned), else of the block this event allocated
  Panel.prototype.closeup = function (changes) {
    const box = this.zoomBox, P = this.P;
    box.textContent = "";
    const made = changes.filter((c) => c[1] > 0).map((c) => c[0]);
    const id = this.pinned !== null ? this.pinned : made.length ? made[0] : null;
    box.setAttribute("data-id", id === null ? "" : String(id));
    if (id === null) {
      html("div", {"class": "hint"}, box, "Click a block for a close-up of its bytes: the " +
           "requested bytes, the size rule's padding (the +32) and the page rounding.");
      return;
    }
    const b = P.blocks[id], W = WIDTH, left = 8, barW = W - 2 * left;
    html("div", {"class": "ztitle"}, box, "Close-up of the block of event " + b[EV] + ": " +
         fmt(b[SIZE]) + " requested (" + D.apis[b[API]] + "), footprint " + fmt(b[FP]) +
         (this.pinned !== null ? " (pinned: click it again to follow the events)" : ""));
    const s = svg("svg", {"class": "zoom", width: W, height: 96, viewBox: `0 0 ${W} 96`}, box);
    const fills = {data: own(b) ? D.colors.pages[b[PAGE]] : (D.fills && D.fills[b[API]]) ||
                     D.colors.physical, padding: D.colors.padding,
                   rounding: `url(#${this.hatch})`};
    const parts = [[0, b[SIZE], "data"]];
    if (b[RULE] > b[SIZE]) parts.push([b[SIZE], b[RULE], "padding"]);
    if (b[FP] > b[RULE]) parts.push([b[RULE], b[FP], "rounding"]);
    const bar = (x, y, w, h, part, cls) => svg("rect", {
      x: x.toFixed(2), y: y, width: Math.max(w, part === "padding" ? 2 : 1).toFixed(2),
      height: h, fill: fills[part], "class": cls + " " + part +
      (part === "data" && b[FALLBACK] ? " fallback" : "")}, s);
    const scale = barW / b[FP];
    for (const [start, end, part] of parts) bar(left + start * scale, 4, (end - start) * scale,
                                                14, part, "whole");
    const first = Math.max(0, Math.min(b[SIZE] - 96, b[FP] - WINDOW));
    const last = Math.min(b[FP], first + WINDOW), zoom = barW / (last - first);
    const wx0 = left + first * scale, wx1 = left + last * scale;
    svg("rect", {x: wx0.toFixed(2), y: 2, width: Math.max(wx1 - wx0, 3).toFixed(2), height: 18,
                 "class": "window"}, s);
    svg("path", {d: `M${wx0.toFixed(2)},20 L${left},40 M${wx1.toFixed(2)},20 ` +
                    `L${left + barW},40`, "class": "zl"}, s);
    for (const [start, end, part] of parts) {
      const a = Math.max(start, first), z = Math.min(end, last);
      if (a >= z) continue;
      bar(left + (a - first) * zoom, 40, (z - a) * zoom, 24, part, "magnified");
      let word = part === "padding" ? "+" + (end - start) + " B padding"
        : part === "data" ? "requested" : "page rounding";
      if (word.length * 6 + 8 > (z - a) * zoom && part === "padding") {
        word = "+" + (end - start) + " B";
      }
      if (word.length * 6 + 8 <= (z - a) * zoom) {
        svg("text", {x: (left + (a - first) * zoom + 4).toFixed(2), y: 56, "class": "inl"}, s,
            word);
      }
    }
    for (let at = Math.ceil(first / 32) * 32; at <= last; at += 32) {
      const x = left + (at - first) * zoom;
      svg("line", {x1: x.toFixed(2), x2: x.toFixed(2), y1: 64, y2: 69, "class": "ztick"}, s);
      if (at % 64 && zoom * 32 < 80) continue;   // a label every 64 B where 32 B are narrow
      svg("text", {x: x.toFixed(2), y: 80, "class": "tick", "text-anchor": x < left + 30 ?
                   "start" : x > left + barW - 30 ? "end" : "middle"}, s, at.toLocaleString("en"));
    }
    svg("text", {x: left, y: 93, "class": "tick"}, s, "bytes " + first + " to " + last +
        " of the block, a tick every 32 B (magnified: the whole footprint is the bar above)");
    const list = html("ul", {"class": "why"}, box);
    for (const line of why(b, P.product)) html("li", {}, list, line);
  };

  // -- the controls ----------------------------------------------------------------------------
  function describe(n) {
    const failedOn = panels.filter((p) => p.P.failures.indexOf(n) >= 0).map((p) => p.P.product);
    const fails = failedOn.length ? "; it fails on " + failedOn.join(" and ") : "";
    for (const p of panels) {   // the first panel where the event changed something
      const changes = p.changesAt(n);
      if (!changes.length) continue;
      const [id, sign] = changes[0];
      const b = p.P.blocks[id];
      return (sign > 0 ? "malloc of " : "free of ") + fmt(b[SIZE]) + " (" + D.apis[b[API]] +
        ", footprint on " + p.P.product + " " + fmt(b[FP]) + ")" + (changes.length > 1 ?
        " and " + (changes.length - 1) + " more" : "") + fails;
    }
    return ({m: "a malloc", f: "a free", x: "a malloc recorded as failed",
             r: "a device reset", ".": "no change to device memory"}[D.kinds[n]] || "") + fails;
  }

  function go(n) {
    now = Math.min(Math.max(n, 0), last);
    slider.value = String(now);
    for (const p of panels) p.seek(now);
    for (const p of panels) p.draw(now);
    label.textContent = "event " + now + " of " + D.events;
    what.textContent = "Event " + now + ": " + describe(now) + " (device " + D.device + ")";
  }

  slider.addEventListener("input", () => go(Number(slider.value)));
  document.getElementById("prev").addEventListener("click", () => go(now - 1));
  document.getElementById("next").addEventListener("click", () => go(now + 1));
  let timer = null;
  const play = document.getElementById("play");
  play.addEventListener("click", () => {
    if (timer) { clearInterval(timer); timer = null; play.textContent = "play"; return; }
    if (now >= last) go(0);
    play.textContent = "pause";
    const step = Math.max(1, Math.floor(D.shown / 300));
    timer = setInterval(() => {
      go(now + step);
      if (now >= last) { clearInterval(timer); timer = null; play.textContent = "play"; }
    }, 50);
  });
  const peakAt = D.products.length ? D.products[0].peak[0] : -1;
  const toPeak = document.getElementById("to-peak");
  toPeak.addEventListener("click", () => go(peakAt));
  toPeak.disabled = peakAt < 0 || peakAt > last;
  const failures = D.products.filter((P) => P.first_failure).map((P) => P.first_failure.index);
  const toFailure = document.getElementById("to-failure");
  toFailure.disabled = !failures.length || Math.min(...failures) > last;
  toFailure.addEventListener("click", () => go(Math.min(...failures)));
  document.addEventListener("keydown", (e) => {
    if (e.target === slider || e.target.tagName === "SELECT") return;
    if (e.key === "ArrowLeft") go(now - 1);
    if (e.key === "ArrowRight") go(now + 1);
  });

  // -- the tooltip -------------------------------------------------------------------------------
  function tipText(p, id) {
    const b = p.P.blocks[id];
    const lines = [
      fmt(b[SIZE]) + " requested (" + b[SIZE] + " bytes), " + D.apis[b[API]],
      "footprint " + fmt(b[FP]) + " = rule size " + fmt(b[RULE]) + " (padding " +
        (b[RULE] - b[SIZE]) + " B) + page rounding " + fmt(b[FP] - b[RULE]),
      ...why(b, p.P.product).slice(0, -1).map((line) => "  " + line),
      (b[API] === D.physical_api ? "physical handle, " + pageSize(b[PAGE])
        : PAGES[b[PAGE]] + " pages") + (b[FALLBACK] ? " (huge pages wanted: fell back)" : "") +
        ", component " + (D.modules[String(b[MOD])] || String(b[MOD])),
      "at offset " + offsetLabel(b[OFF]) + " of " + p.P.product + " device " + D.device +
        ", allocated by event " + b[EV],
    ];
    if (b[STACK] >= 0) {
      lines.push("allocated at:");
      for (const frame of D.stacks[b[STACK]]) lines.push("  " + frame);
    } else if (b[STACK] === -2) {
      lines.push("(stack left out: the page holds at most its size limit of stacks)");
    } else {
      lines.push("(no stack recorded: record with stacks=True or run --stacks)");
    }
    return lines.join("\n");
  }

  document.getElementById("panels").addEventListener("mousemove", (e) => {
    const target = e.target.closest ? e.target.closest("[data-id]") : null;
    const section = target ? target.closest("section.panel") : null;
    if (!target || !section) { tip.style.display = "none"; return; }
    const p = panels[Number(section.getAttribute("data-slot"))];
    tip.textContent = tipText(p, Number(target.getAttribute("data-id")));
    tip.style.display = "block";
    const room = window.innerWidth - tip.offsetWidth - 8;
    tip.style.left = Math.max(4, Math.min(e.pageX + 14, window.scrollX + room)) + "px";
    const below = e.pageY + 16;   // below the pointer, or above it when there is no room
    tip.style.top = (below + tip.offsetHeight > window.scrollY + window.innerHeight - 4 ?
                     Math.max(window.scrollY + 4, e.pageY - tip.offsetHeight - 10) : below) + "px";
  });
  document.getElementById("panels").addEventListener("click", (e) => {
    const target = e.target.closest ? e.target.closest("svg.map [data-id]") : null;
    const section = target ? target.closest("section.panel") : null;
    if (!target || !section) return;
    const p = panels[Number(section.getAttribute("data-slot"))];
    const id = Number(target.getAttribute("data-id"));
    p.pinned = p.pinned === id ? null : id;   // a second click follows the events again
    p.closeup(p.changesAt(now));
  });
  document.getElementById("panels").addEventListener("mouseleave", () => {
    tip.style.display = "none";
  });

  for (let slot = 0; slot < Math.min(2, D.products.length); slot++) {
    panels.push(new Panel(slot, slot));
  }
  go(peakAt >= 0 && peakAt <= last ? peakAt : 0);
})();
