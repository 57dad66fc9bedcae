// The odf-node console: renders each page from the node's JSON-RPC methods (POST /ui/rpc) and
// keeps it current from the event stream (/ui/ws). No library, no build step. Every value from
// the node is put into the page with textContent / attributes, never parsed as HTML (the CSP
// requires Trusted Types with no policy, so innerHTML assignments would throw anyway).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const TOPICS = [
  "verify.started", "verify.progress", "verify.finished", "head.accepted", "attestation",
  "dispute", "equivocation", "announce", "pull.started", "pull.finished", "peer.connected",
  "peer.disconnected", "head.trusted", "head.distrusted", "source.split_view",
];
const OUTCOMES = ["verified", "failed", "nondeterministic", "unverifiable"];

// ---- DOM helpers

function el(ns, tag, attrs, kids) {
  const e = ns ? document.createElementNS(ns, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "text") e.textContent = String(v);
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const kid of kids || []) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}
const h = (tag, attrs, ...kids) => el(null, tag, attrs, kids);
const s = (tag, attrs, ...kids) => el(SVG_NS, tag, attrs, kids);

function short(x, n) {
  if (x === null || x === undefined) return "";
  x = String(x);
  n = n || 10;
  return x.length > 2 * n + 1 ? x.slice(0, n) + "…" + x.slice(-6) : x;
}
function when(ns) {
  if (!ns) return "";
  return new Date(ns / 1e6).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}
function ago(ns) {
  if (!ns) return "";
  const s = Math.max(0, (Date.now() - ns / 1e6) / 1000);
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return (s / 3600).toFixed(1) + " h ago";
  return (s / 86400).toFixed(1) + " d ago";
}
function badge(outcome) {
  const text = outcome || "pending";
  return h("span", { class: "badge outcome-" + text, "data-outcome": text, text: text });
}
function link(did, alias) {
  return h("a", { href: "/ui/dataset?id=" + encodeURIComponent(did), text: alias || short(did) });
}
function code(x, n) {
  return h("code", { title: x || "", text: short(x, n) });
}
function table(id, headers, rows) {
  return h("table", { id: id },
    h("thead", {}, h("tr", {}, ...headers.map((t) => h("th", { text: t })))),
    h("tbody", {}, ...rows));
}
function section(title, ...kids) {
  return h("section", {}, h("h2", { text: title }), ...kids);
}
function flash(text, kind) {
  const f = document.getElementById("flash");
  f.textContent = text;
  f.dataset.kind = kind || "info";
}
function ready() {
  document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
  // For the benchmark: "console-ready" when the page's content is in the DOM, "console-painted"
  // once the frame showing it has been laid out and painted (a task queued from the next
  // animation frame runs after that frame).
  performance.mark("console-ready");
  requestAnimationFrame(() => setTimeout(() => performance.mark("console-painted"), 0));
}

// ---- the node's API

let rpcId = 0;
async function rpc(method, params) {
  const r = await fetch("/ui/rpc", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: ++rpcId, method: method, params: params || {} }),
  });
  if (r.status === 401) {
    location.replace("/ui/login");
    throw new Error("the console session ended; log in again");
  }
  const body = await r.json();
  if (body.error) throw new Error(body.error.message);
  return body.result;
}

// ---- the event stream

const Live = {
  handlers: [],
  on(fn) { this.handlers.push(fn); },
  connect(delay) {
    const ind = document.getElementById("live");
    const ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ui/ws");
    ws.onopen = () => {
      ws.send(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "rpc.subscribe", params: { topics: TOPICS } }));
      ind.dataset.state = "open";
      ind.textContent = "live";
      delay = 1000;
    };
    ws.onmessage = (m) => {
      let msg;
      try { msg = JSON.parse(m.data); } catch (e) { return; }
      if (msg.method !== "event") return;
      for (const fn of this.handlers) {
        try { fn(msg.params); } catch (e) { console.error(e); }
      }
    };
    ws.onclose = () => {
      ind.dataset.state = "closed";
      ind.textContent = "reconnecting…";
      const next = Math.min(2 * (delay || 1000), 15000);
      setTimeout(() => this.connect(next), delay || 1000);
    };
  },
};

function debounce(fn, ms) {
  let t = null;
  return () => { clearTimeout(t); t = setTimeout(fn, ms); };
}

// ---- charts (SVG drawn here from the node's metrics)

function chartFrame(id, title, w, hgt) {
  const svg = s("svg", { id: id, class: "chart", viewBox: `0 0 ${w} ${hgt}`, role: "img", "aria-label": title });
  svg.append(s("title", { text: title }));
  return svg;
}
function axes(svg, x0, y0, x1, y1, labels) {
  svg.append(s("line", { x1: x0, y1: y1, x2: x1, y2: y1, class: "axis" }));
  svg.append(s("line", { x1: x0, y1: y0, x2: x0, y2: y1, class: "axis" }));
  svg.append(s("text", { x: x0 - 4, y: y0 + 4, "text-anchor": "end", class: "tick", text: labels.ymax }));
  svg.append(s("text", { x: x0 - 4, y: y1, "text-anchor": "end", class: "tick", text: "0" }));
  svg.append(s("text", { x: x0, y: y1 + 14, class: "tick", text: labels.xmin }));
  svg.append(s("text", { x: x1, y: y1 + 14, "text-anchor": "end", class: "tick", text: labels.xmax }));
}
function legend(svg, items, x, y) {
  items.forEach(([name, cls, extra], i) => {
    svg.append(s("rect", { x: x + i * 140, y: y - 9, width: 10, height: 10, class: cls }));
    svg.append(s("text", { x: x + i * 140 + 14, y: y, class: "tick", text: name + (extra || "") }));
  });
}
function verificationChart(points) {
  const W = 640, H = 220, X0 = 50, Y0 = 24, X1 = 620, Y1 = 190;
  const svg = chartFrame("chart-verify", "Verification durations (s) over time, by outcome", W, H);
  const counts = {};
  for (const p of points) counts[p.outcome] = (counts[p.outcome] || 0) + 1;
  legend(svg, OUTCOMES.map((o) => [o, "fill-" + o, " (" + (counts[o] || 0) + ")"]), X0, 14);
  if (!points.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty", text: "no verification yet" }));
    return svg;
  }
  const t0 = points[0].at_ns, t1 = Math.max(points[points.length - 1].at_ns, t0 + 1);
  const ymax = Math.max(1, ...points.map((p) => p.seconds)) * 1.1;
  axes(svg, X0, Y0, X1, Y1, { ymax: ymax.toFixed(1) + " s", xmin: when(t0), xmax: when(t1) });
  for (const p of points) {
    const x = X0 + ((p.at_ns - t0) / (t1 - t0)) * (X1 - X0);
    const y = Y1 - (p.seconds / ymax) * (Y1 - Y0);
    const c = s("circle", { cx: x.toFixed(1), cy: y.toFixed(1), r: 4, class: "point fill-" + p.outcome, "data-outcome": p.outcome });
    c.append(s("title", { text: `${p.outcome} in ${p.seconds.toFixed(2)} s at ${when(p.at_ns)}` }));
    svg.append(c);
  }
  return svg;
}
function rateChart(samples, family, id, title) {
  const W = 640, H = 220, X0 = 50, Y0 = 24, X1 = 620, Y1 = 190;
  const svg = chartFrame(id, title, W, H);
  const outcomes = new Set();
  for (const smp of samples) for (const k of Object.keys(smp.totals[family] || {})) outcomes.add(k);
  const names = [...outcomes].sort();
  legend(svg, names.map((o, i) => [o, "fill-series-" + (i % 6)]), X0, 14);
  if (samples.length < 2 || !names.length) {
    svg.append(s("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty", text: "no data yet (sampled every 5 s)" }));
    return svg;
  }
  const series = names.map(() => []);
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i];
    const dt = (b.at_ns - a.at_ns) / 1e9;
    names.forEach((o, j) => {
      const d = ((b.totals[family] || {})[o] || 0) - ((a.totals[family] || {})[o] || 0);
      series[j].push([b.at_ns, dt > 0 ? Math.max(0, d) / dt : 0]);
    });
  }
  const t0 = samples[1].at_ns, t1 = Math.max(samples[samples.length - 1].at_ns, t0 + 1);
  const ymax = Math.max(0.1, ...series.flat().map((p) => p[1])) * 1.1;
  axes(svg, X0, Y0, X1, Y1, { ymax: ymax.toFixed(2) + "/s", xmin: when(t0), xmax: when(t1) });
  series.forEach((pts, j) => {
    const d = pts.map(([t, v]) =>
      `${(X0 + ((t - t0) / (t1 - t0)) * (X1 - X0)).toFixed(1)},${(Y1 - (v / ymax) * (Y1 - Y0)).toFixed(1)}`);
    svg.append(s("polyline", { points: d.join(" "), class: "line stroke-series-" + (j % 6), "data-outcome": names[j] }));
  });
  return svg;
}

// ---- pages

async function overview(main) {
  const [st, events, charts] = await Promise.all([
    rpc("node.status"), rpc("console.events", { limit: 50 }), rpc("console.charts"),
  ]);
  const ipfs = st.ipfs || {};
  const cards = [
    ["Node id", st.node_id], ["Uptime", st.uptime_s + " s"], ["Peers", st.p2p.peers],
    ["Datasets", st.datasets], ["Subscriptions", st.subscriptions],
    ["IPFS", ipfs.peer_id ? (ipfs.mode || "on") + " " + short(ipfs.peer_id) : (ipfs.state || "off")],
    ["Engine", st.engine.running ? "running (" + st.engine.spark_master + ")" : "idle (" + st.engine.spark_master + ")"],
    ["Queues", `verify ${st.work.verify} · publish ${st.work.publish} · dispute ${st.work.dispute} · running ${st.running_work}`],
    ["Pulls running", st.p2p.fetches_running],
  ];
  learnAliases(events);
  const list = h("ol", { id: "events", class: "events" }, ...events.map(eventItem));
  const chartBox = h("div", { id: "charts" },
    verificationChart(charts.verifications),
    rateChart(charts.samples, "announcements", "chart-announce", "Announcements per second by outcome"));
  main.replaceChildren(
    h("h1", { text: "Overview" }),
    h("dl", { id: "status", class: "cards" }, ...cards.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })])),
    section("Charts", chartBox),
    section("Recent events (live)", list));
  Live.on((ev) => {
    list.prepend(eventItem({ kind: ev.topic, did: ev.did, at_ns: Date.now() * 1e6, data: ev, live: true }));
    while (list.children.length > 200) list.lastChild.remove();
  });
  setInterval(async () => {
    const c = await rpc("console.charts");
    chartBox.replaceChildren(
      verificationChart(c.verifications),
      rateChart(c.samples, "announcements", "chart-announce", "Announcements per second by outcome"));
  }, 10000);
}
// ---- events as sentences
// Each kind the node logs (`grep -rn "log_event(" node`) or streams (TOPICS) reads as a
// sentence with links to the dataset, peer or block it names; the JSON payload is behind a
// details toggle. A kind not listed here still gets a sentence ("<kind> for <dataset>").

function peerLink(p) {
  if (!p) return "a peer";
  return h("a", { href: "/ui/peers#peer-" + encodeURIComponent(p), class: "peer", title: p, text: short(p, 12) });
}
function blockLink(did, hash) {
  if (!hash) return "a block";
  if (!did) return code(hash);
  return h("a", { href: "/ui/dataset?id=" + encodeURIComponent(did) + "#block-" + encodeURIComponent(hash), class: "block", title: hash, text: short(hash) });
}
function plural(n, one, many) { return n + " " + (n === 1 ? one : many || one + "s"); }
const seconds = (x) => (typeof x === "number" ? x.toFixed(2) + " s" : "");

// kind -> (d, ds, blk) => the sentence's parts (strings and nodes). ds: the dataset's link;
// blk(hash): a block link on that dataset.
const SENTENCES = {
  "daemon.start": (d) => ["The node started", d.node_id ? [" as ", code(d.node_id, 16)] : "", "."],
  "daemon.stop": () => ["The node stopped."],
  "node.reachability": (d) => ["Reachability is now ", h("strong", { text: d.status || "unknown" }),
    (d.relayed_addrs || []).length ? " (relayed via " + d.relayed_addrs.length + " address(es))" : "",
    d.message ? ": " + d.message : "", "."],
  "p2p.hole_punch": (d) => ["Hole punch with ", peerLink(d.peer), ": ", h("strong", { text: d.result || "?" }),
    d.reason ? " (" + d.reason + ")" : "", "."],
  "verify.start": (d, ds, blk) => ["Verification of ", ds, " at ", blk(d.head), " started."],
  "verify.started": (d, ds) => ["Verification of ", ds, " started."],
  "verify.progress": (d, ds) => ["Verifying ", ds, ": ", d.phase || "", " ", d.done, "/", d.total, "."],
  "verify.finished": (d, ds) => ["Verification of ", ds, " finished: ", badge(d.outcome), "."],
  "verify.coalesced": (d, ds, blk) => ["A verification of ", ds, " at ", blk(d.head), " joined one already queued."],
  "republish": (d, ds, blk) => ["Republished ", ds, " at ", blk(d.head), " to IPFS as ", code(d.cid), "."],
  "announce": (d, ds, blk) => ["Announced ", ds, " at ", blk(d.head), (d.cids || []).length ? " (" + plural(d.cids.length, "CID") + ")" : "", " to peers."],
  "attestation": (d, ds, blk) => [d.own ? "This node attested " : "A peer attested ", ds, " at ", blk(d.head), "."],
  "dispute": (d, ds, blk) => [d.own === false ? "A peer disputed " : "A dispute of ", ds, " at block ", blk(d.block || d.head),
    d.kind ? " (" + d.kind + ")" : "", d.detail ? ": " + d.detail : "", "."],
  "equivocation": (d, ds) => ["The key of ", ds, " signed two heads for one position (equivocation)."],
  "head.accepted": (d, ds, blk) => ["Accepted head ", blk(d.head), d.sequence !== undefined ? " (#" + d.sequence + ")" : "", " of ", ds,
    d.source ? [" from ", code(d.source, 24)] : "", "."],
  "head.rejected": (d, ds, blk) => ["Rejected head ", blk(d.head), " of ", ds, d.reason ? ": " + d.reason : "", "."],
  "head.repaired": (d, ds, blk) => ["Anti-entropy brought head ", blk(d.head), " of ", ds, " from ", peerLink(d.peer), "."],
  // by: "local" (this node's own replay) or "quorum" (p2p/trust.py TrustedBy)
  "head.trusted": (d, ds, blk) => ["Head ", blk(d.head), " of ", ds, " is trusted",
    d.by === "local" ? " by this node's own replay" : d.by === "quorum" ? " by a quorum of attesters" : d.by ? " by " + d.by : "",
    (d.attesters || []).length ? " (" + plural(d.attesters.length, "attester") + ")" : "", "."],
  "head.distrusted": (d, ds, blk) => ["Head ", blk(d.head), " of ", ds, " is no longer trusted", d.reason ? ": " + d.reason : "", "."],
  // reason: p2p/trust.py ReplayReason
  "trust.replay": (d, ds, blk) => ["Replaying ", ds, " at ", blk(d.head), " for the trust policy",
    ({ policy: " (verify-all: every head)", sample: " (this head was sampled)", dispute: " (a trusted attester disputed it)" })[d.reason]
      || (d.reason ? " (" + d.reason + ")" : ""), "."],
  "pull.started": (d, ds) => ["Pull of ", ds, " from ", code(d.url, 24), " started."],
  "pull.finished": (d, ds) => ["Pull of ", ds, " from ", code(d.url, 24), ": ", h("strong", { text: d.outcome || "done" }), "."],
  "pull.ok": (d, ds) => ["Pulled ", ds, " from ", code(d.url, 24), d.blocks !== undefined ? " (" + plural(d.blocks, "block") + ")" : "", "."],
  "pull.refused": (d, ds) => ["Pull of ", ds, " from ", code(d.url, 24), " refused: ", d.error || "", "."],
  "pull.rejected": (d, ds) => ["Pull of ", ds, " from ", code(d.url || d.source, 24), " rejected bad data: ", d.error || "", "."],
  "pull.abandoned": (d, ds, blk) => ["Pull of ", ds, " at ", blk(d.head), " abandoned", d.reason ? ": " + d.reason : "", "."],
  "pull.source_failed": (d, ds) => ["Source ", code(d.url, 24), " of ", ds, " failed (", d.reason || "?", "): ", d.error || "",
    d.setting ? " — see " + d.setting : "", "."],
  "storage.budget_exceeded": (d, ds) => ["Pull of ", ds, " paused: it needs ", d.needed_bytes, " bytes, ", d.allowed_bytes,
    " allowed by ", d.budget || "the storage budget", "."],
  "source.unreachable": (d, ds) => ["Source ", code(d.source, 24), " of ", ds, " is unreachable: ", d.error || "", "."],
  "source.diverged": (d, ds, blk) => ["Source ", code(d.source, 24), " of ", ds, " shows head ", blk(d.head), ", which does not descend from the accepted one."],
  "source.split_view": (d, ds) => ["Split view: source ", code(d.source, 24), " of ", ds, " showed two diverging heads."],
  "subscribe": (d, ds) => ["Subscribed to ", ds, d.alias ? " as " + d.alias : "", d.source ? [" from ", code(d.source, 24)] : "", "."],
  "subscribe.input": (d, ds) => ["Following input ", ds, " of ", d.of ? link(d.of) : "a derivative", "."],
  "ipfs.connect": (d) => ["Connected to IPFS peer ", code(d.multiaddr, 24), "."],
  "dataset.create": (d, ds) => ["Created dataset ", ds, "."],
  "dataset.ingest": (d, ds) => [d.up_to_date ? "Ingest into " : "Ingested ", d.up_to_date ? ds : [d.records !== undefined ? plural(d.records, "record") + " into " : "", ds],
    d.up_to_date ? ": up to date." : "."],
  "dataset.transform": (d, ds) => ["Transformed ", ds, d.offsets ? " (offsets " + d.offsets.join("..") + ")" : "", "."],
  "dataset.poll": (d, ds) => ["Polled the source of ", ds, d.records !== undefined ? ": " + plural(d.records, "record") : "", "."],
  "flow.schedule": (d, ds) => ["Scheduled ", ds, ": ", d.trigger || "", "."],
  "flow.schedule_failed": (d, ds) => ["Scheduled run of ", ds, " failed: ", d.error || "", "."],
  "peer.connected": (d) => ["Peer ", peerLink(d.peer), " connected."],
  "peer.disconnected": (d) => ["Peer ", peerLink(d.peer), " disconnected."],
  "peer.graylisted": (d) => ["Peer ", peerLink(d.peer), " graylisted (score ", Number(d.score).toFixed(2), ")."],
  "node.key_incepted": (d) => [d.own ? "This node's key " : "Key ", code(d.node, 16), " incepted", d.action ? ": " + d.action : "", "."],
  "node.key_rotated": (d) => [d.own ? "This node's key rotated from " : "Node key rotated from ", code(d.old, 16), " to ", code(d.new, 16), "."],
  "node.key_revoked": (d) => [d.own ? "This node's key " : "Node key ", code(d.node, 16), " was revoked."],
  "node.key_inception_conflict": (d) => ["Key inception of ", code(d.node, 16), " refused: ", d.reason || "conflict", "."],
};
const VERIFY_OUTCOMES = ["verified", "failed", "nondeterministic", "unverifiable", "inconclusive"];

// Aliases the events name (create, subscribe, ingest…), so an event that names only the DID
// (announce, verify) still reads "cities" rather than "did:odf:fed…".
const ALIASES = {};
function learnAliases(events) {
  for (const e of events) if (e.did && e.data && typeof e.data.alias === "string" && e.data.alias) ALIASES[e.did] = e.data.alias;
}
function eventSentence(kind, did, d) {
  const ds = did ? link(did, d.alias || ALIASES[did]) : "a dataset";
  const blk = (hash) => blockLink(did, hash);
  const fn = SENTENCES[kind];
  if (fn) return fn(d, ds, blk);
  const [group, tail] = [kind.slice(0, kind.indexOf(".")), kind.slice(kind.indexOf(".") + 1)];
  if (group === "verify" && VERIFY_OUTCOMES.includes(tail)) {
    return ["Verification of ", ds, " at ", blk(d.head), ": ", badge(tail),
      d.seconds !== undefined ? " in " + seconds(d.seconds) : "",
      d.blocks_replayed ? " (" + plural(d.blocks_replayed, "block") + " replayed)" : "", "."];
  }
  if (tail === "error") {
    // Not final: waiting is normal (a derivative's inputs still being pulled), not a failure.
    return ["Work (" + group + ") on ", ds, d.final ? " failed for good: " : " did not finish yet, will retry: ", d.error || "", "."];
  }
  return [h("strong", { text: kind }), did ? [" for ", ds] : "", "."];
}
function eventItem(e) {
  const data = Object.assign({}, e.data || {});
  delete data.topic; delete data.did;
  const parts = eventSentence(e.kind, e.did, data).flat(2);
  const json = JSON.stringify(data);
  return h("li", { "data-kind": e.kind, class: e.live ? "live" : "" },
    h("time", { text: when(e.at_ns) }), " ", h("span", { class: "sentence" }, ...parts),
    json !== "{}" ? h("details", { class: "event-json" }, h("summary", { text: "JSON" }), h("code", { text: json })) : "");
}

async function datasets(main) {
  const input = h("input", { id: "subscribe-did", placeholder: "did:odf:fed01…", size: 70, required: true });
  const alias = h("input", { id: "subscribe-alias", placeholder: "alias (optional)", size: 20 });
  const form = h("form", { id: "subscribe-form" }, input, " ", alias, " ",
    h("button", { id: "subscribe-btn", type: "submit", text: "Subscribe" }));
  const progress = {};
  const box = h("div", { id: "datasets-box" });
  const count = h("p", { id: "datasets-count", class: "muted" });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const p = { did: input.value.trim() };
      if (alias.value.trim()) p.alias = alias.value.trim();
      const r = await rpc("subscriptions.add", p);
      flash("Subscribed to " + r.did, "ok");
      input.value = ""; alias.value = "";
      await refresh();
    } catch (e) { flash("Subscribe failed: " + e.message, "error"); }
  });
  async function unsubscribe(did) {
    try {
      await rpc("subscriptions.remove", { did: did });
      flash("Unsubscribed from " + did, "ok");
      await refresh();
    } catch (e) { flash("Unsubscribe failed: " + e.message, "error"); }
  }
  // With 1,000 rows: rows are clones of one prototype filled in place and listened to once on
  // the table body (not createElement + setAttribute per cell and a listener per button), and
  // the table is a "long" one (console.css: rows off screen are not laid out). Its CSS display
  // is a grid, so the roles keep it a table for assistive technology.
  // Every cell and element starts with an empty text node: filling it (.data) is cheaper than
  // replacing it (textContent).
  const cell = (attrs, ...kids) => h("td", Object.assign({ role: "cell" }, attrs), ...(kids.length ? kids : [""]));
  const proto = h("tr", { role: "row" },
    cell({}, h("a", {}, "")), cell({}, h("code", {}, "")), cell(), cell(), cell({}, h("code", {}, "")),
    cell({ class: "num" }), cell({ class: "num" }),
    cell({ class: "verification" }, h("span", {}, ""), " ", h("span", { class: "trust" }, "")),
    cell({ class: "progress" }), cell(),
    cell({}, h("button", { class: "unsubscribe", type: "button", text: "Unsubscribe" })));
  function fillCode(c, x, n) {
    if (x) c.setAttribute("title", x);
    c.firstChild.data = short(x, n);
  }
  const text = (td, v) => { td.firstChild.data = v === null || v === undefined ? "" : v; };
  function row(d) {
    const tr = proto.cloneNode(true);
    tr.setAttribute("data-did", d.id);
    const c = tr.cells;
    const a = c[0].firstChild;
    a.setAttribute("href", "/ui/dataset?id=" + encodeURIComponent(d.id));
    a.firstChild.data = d.alias || short(d.id);
    a.setAttribute("title", a.firstChild.data);  // the cell may cut a long alias short
    fillCode(c[1].firstChild, d.id, 14);
    text(c[2], d.kind);
    text(c[3], d.owned ? "owned" : d.followed ? "followed" : "stored");
    fillCode(c[4].firstChild, d.head);
    text(c[5], d.blocks);
    text(c[6], d.records);
    if (d.verification_detail) c[7].setAttribute("title", d.verification_detail);
    // Trust (docs/trust.md): state, how, and by whom, as `subscriptions --json` has it.
    const t = c[7].lastChild;
    if (d.trust) {
      t.className = "badge trust-" + d.trust.state;
      t.setAttribute("data-trust", d.trust.state);
      t.firstChild.data = d.trust.state + (d.trust.by ? " by " + d.trust.by : "");
      const who = (d.trust.attesters || []).concat(d.trust.disputed_by ? ["disputed by:"].concat(d.trust.disputed_by) : []);
      t.setAttribute("title", (who.length ? who.join("\n") + "\n" : "") + "trusted head: " + (d.trusted_head || "none"));
    } else t.remove();
    if (d.owned && !d.verification) c[7].firstChild.remove();
    else {
      const outcome = d.verification || "pending";
      const b = c[7].firstChild;
      b.className = "badge outcome-" + outcome;
      b.setAttribute("data-outcome", outcome);
      b.firstChild.data = outcome;
    }
    text(c[8], progress[d.id] || "");
    text(c[9], ago(d.changed_ns));
    if (d.changed_ns) c[9].setAttribute("title", when(d.changed_ns));
    if (!d.followed) c[10].firstChild.remove();
    return tr;
  }
  const COLUMNS = ["Alias", "DID", "Kind", "Role", "Head", "Blocks", "Records", "Verification",
    "Progress", "Last change", ""];
  async function refresh() {
    const rows = await rpc("console.datasets");
    performance.mark("datasets-fetched");
    count.textContent = rows.length + " datasets";
    const body = h("tbody", { role: "rowgroup" });
    for (const d of rows) body.append(row(d));
    body.addEventListener("click", (ev) => {
      const b = ev.target.closest("button.unsubscribe");
      if (b) unsubscribe(b.closest("tr").dataset.did);
    });
    box.replaceChildren(h("table", { id: "datasets-table", class: "long", role: "table" },
      h("thead", { role: "rowgroup" },
        h("tr", { role: "row" }, ...COLUMNS.map((t) => h("th", { role: "columnheader", text: t })))),
      body));
    ready();
  }
  main.replaceChildren(h("h1", { text: "Datasets" }), section("Follow a dataset", form), count, box);
  await refresh();
  const later = debounce(refresh, 300);
  Live.on((ev) => {
    if (ev.topic === "verify.progress") progress[ev.did] = `verifying: ${ev.phase} ${ev.done}/${ev.total}`;
    else if (ev.topic === "verify.started") progress[ev.did] = "verifying…";
    else if (ev.topic === "pull.started") progress[ev.did] = "pulling…";
    else if (ev.topic === "verify.finished" || ev.topic === "pull.finished") delete progress[ev.did];
    const cell = ev.did && box.querySelector(`tr[data-did="${CSS.escape(ev.did)}"] td.progress`);
    if (cell) cell.textContent = progress[ev.did] || "";
    if (["verify.finished", "head.accepted", "attestation", "dispute", "pull.finished", "head.trusted", "head.distrusted"].includes(ev.topic)) later();
  });
}

function lineageGraph(lin, self) {
  // Layered layout: a node's column is its longest path from a source.
  const depth = {};
  const ins = {};
  for (const [a, b] of lin.edges) (ins[b] = ins[b] || []).push(a);
  function d(id, seen) {
    if (depth[id] !== undefined) return depth[id];
    if (seen.has(id)) return 0;
    seen.add(id);
    const v = Math.max(-1, ...(ins[id] || []).map((p) => d(p, seen))) + 1;
    depth[id] = v;
    return v;
  }
  lin.nodes.forEach((n) => d(n.id, new Set()));
  const cols = {};
  lin.nodes.forEach((n) => (cols[depth[n.id]] = cols[depth[n.id]] || []).push(n));
  const ncol = Math.max(...Object.keys(cols).map(Number)) + 1;
  const nrow = Math.max(...Object.values(cols).map((c) => c.length));
  const BW = 170, BH = 36, GX = 70, GY = 18;
  const W = ncol * (BW + GX), H = nrow * (BH + GY) + GY;
  const svg = s("svg", { id: "lineage", class: "lineage", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "Lineage" });
  const pos = {};
  for (const [c, list] of Object.entries(cols)) {
    list.forEach((n, i) => (pos[n.id] = [Number(c) * (BW + GX) + 10, GY + i * (BH + GY)]));
  }
  for (const [a, b] of lin.edges) {
    const [ax, ay] = pos[a], [bx, by] = pos[b];
    svg.append(s("path", { class: "edge", d: `M${ax + BW},${ay + BH / 2} C${ax + BW + GX / 2},${ay + BH / 2} ${bx - GX / 2},${by + BH / 2} ${bx},${by + BH / 2}` }));
  }
  for (const n of lin.nodes) {
    const [x, y] = pos[n.id];
    const g = s("a", { href: "/ui/dataset?id=" + encodeURIComponent(n.id), "data-did": n.id });
    g.append(s("rect", { x: x, y: y, width: BW, height: BH, rx: 6, class: "node" + (n.id === self ? " self" : "") + (n.stored ? "" : " missing") }));
    g.append(s("text", { x: x + 8, y: y + 15, class: "label", text: short(n.alias || n.id, 9) }));
    g.append(s("text", { x: x + 8, y: y + 29, class: "tick", text: (n.kind || "not stored") }));
    svg.append(g);
  }
  return svg;
}

function yamlLines(v, indent, out) {
  const pad = "  ".repeat(indent);
  if (Array.isArray(v)) {
    for (const x of v) {
      if (x !== null && typeof x === "object") { out.push(pad + "-"); yamlLines(x, indent + 1, out); }
      else out.push(pad + "- " + JSON.stringify(x));
    }
  } else if (v !== null && typeof v === "object") {
    for (const [k, x] of Object.entries(v)) {
      if (x !== null && typeof x === "object") { out.push(pad + k + ":"); yamlLines(x, indent + 1, out); }
      else out.push(pad + k + ": " + (typeof x === "string" ? x : JSON.stringify(x)));
    }
  }
  return out;
}

function evidenceTable(d) {
  const fields = ["logical_hash", "physical_hash", "offsets", "watermark_ns"];
  const rows = fields.map((f) => {
    const e = d.expected ? d.expected[f] : null, c = d.computed ? d.computed[f] : null;
    const show = (v) => (v === null || v === undefined ? "—" : f === "watermark_ns" ? when(v) : Array.isArray(v) ? v.join("..") : v);
    const differs = JSON.stringify(e) !== JSON.stringify(c);
    return h("tr", { class: differs ? "differs" : "", "data-field": f },
      h("th", { text: f }), h("td", { class: "expected" }, h("code", { text: show(e) })),
      h("td", { class: "computed" }, h("code", { text: show(c) })));
  });
  return h("table", { class: "evidence" },
    h("thead", {}, h("tr", {}, h("th", {}), h("th", { text: "expected (published)" }), h("th", { text: "computed (replayed)" }))),
    h("tbody", {}, ...rows));
}

// A split view (docs/follow.md): the source showed two heads that do not descend one from the
// other; both signed observations are the evidence (envelopes in hex, for anyone to check).
function splitView(x) {
  const rows = (x.observations || []).map((o) => h("tr", { "data-head": o.head, "data-signer": o.signer },
    h("td", {}, code(o.head)), h("td", { class: "num", text: o.sequence }),
    h("td", {}, code(o.signer, 16)), h("td", { text: o.own ? "this node" : "peer" }),
    h("td", { text: when(o.at_ns) }),
    h("td", {}, h("details", {}, h("summary", { text: "envelope" }), h("code", { class: "envelope", text: o.envelope })))));
  return h("article", { class: "dispute split-view", "data-block": x.block, "data-source": x.source },
    h("h3", {}, "Split view of source ", h("code", { text: x.source }), " — ", h("span", { class: "kind", text: x.kind })),
    // One record per source and fork: a fork found again counts, it is not a new record.
    h("p", {}, "Detected at ", when(x.at_ns),
      x.seen > 1 && h("span", { class: "seen", text: `; seen ${x.seen} times, last at ${when(x.last_seen_ns)}` })),
    h("p", { class: "detail", text: x.detail }),
    h("table", { class: "observations" },
      h("thead", {}, h("tr", {}, ...["Head", "Sequence", "Observed by", "By", "When", "Signed observation"].map((t) => h("th", { text: t })))),
      h("tbody", {}, ...rows)));
}

async function dataset(main) {
  const id = new URLSearchParams(location.search).get("id");
  if (!id) { main.replaceChildren(h("p", { text: "No dataset given." })); return; }
  const progress = h("p", { id: "dataset-progress", class: "muted" });
  const tail = tailSection(id);
  async function act(label, fn) {
    try { flash(label + "…", "info"); const r = await fn(); flash(label + ": " + r, "ok"); await refresh(); }
    catch (e) { flash(label + " failed: " + e.message, "error"); }
  }
  async function refresh() {
    const tailed = tail.load();
    const [d, log, atts, disps] = await Promise.all([
      rpc("console.dataset", { ref: id }), rpc("dataset.log", { ref: id, limit: 100 }),
      rpc("attestations.list", { did: id }), rpc("console.disputes", { did: id }),
    ]);
    let preview = { columns: [], rows: [] };
    try { preview = await rpc("console.preview", { ref: id, limit: 20 }); } catch (e) { preview.error = e.message; }
    const actions = h("div", { id: "actions" },
      h("button", { id: "verify-btn", onclick: () => act("Verify", async () => { const r = await rpc("dataset.verify", { ref: id }); return r.ok ? "ok" : "problems: " + r.problems.join("; "); }), text: "Verify now" }),
      d.owned ? h("button", { id: "publish-btn", onclick: () => act("Publish", async () => "queued as work item " + (await rpc("dataset.publish", { ref: id })).work_id), text: "Publish" }) : "",
      !d.owned && d.followed ? h("button", { id: "unsubscribe-btn", onclick: () => act("Unsubscribe", async () => ((await rpc("subscriptions.remove", { did: id })).removed ? "removed" : "was not followed")), text: "Unsubscribe" }) : "",
      !d.owned && !d.followed ? h("button", { id: "subscribe-btn", onclick: () => act("Subscribe", async () => "following " + (await rpc("subscriptions.add", { did: id })).did), text: "Subscribe" }) : "");
    const summary = [
      ["DID", d.id], ["Kind", d.kind], ["Role", d.owned ? "owned" : d.followed ? "followed" : "stored"],
      ["Head", d.head], ["Accepted head", d.accepted_head || "—"], ["Blocks", d.blocks], ["Records", d.records],
      ["Watermark", d.watermark_ns ? when(d.watermark_ns) : "—"],
    ];
    const slices = d.slices.map((x) => h("tr", {},
      h("td", { class: "num", text: x.sequence }), h("td", { text: x.event }),
      h("td", { class: "num", text: x.offsets[0] + ".." + x.offsets[1] }),
      h("td", {}, code(x.logical_hash, 14)), h("td", {}, code(x.physical_hash, 14)),
      h("td", { class: "num", text: x.size }), h("td", { text: when(x.system_time_ns) })));
    const prev = preview.error ? h("p", { class: "error", text: preview.error })
      : table("preview-table", preview.columns, preview.rows.map((r) => h("tr", {}, ...r.map((c) => h("td", { text: c === null ? "null" : c })))));
    const attRows = atts.map((a) => h("tr", {}, h("td", {}, code(a.head)), h("td", {}, badge(a.verdict)),
      h("td", {}, code(a.signer, 16)), h("td", { text: a.own ? "this node" : "peer" }), h("td", { text: when(a.at_ns) })));
    const disputes = disps.map((x) => x.kind === "split-view" ? splitView(x) : h("article", { class: "dispute", "data-block": x.block },
      h("h3", {}, "Dispute of block ", code(x.block), " — ", h("span", { class: "kind", text: x.kind })),
      h("p", {}, "By ", code(x.signer, 16), x.own ? " (this node)" : " (peer)", " at ", when(x.issued_at_ns || x.at_ns)),
      h("p", { class: "detail", text: x.detail }),
      evidenceTable(x)));
    const blocks = log.map((b) => h("pre", { class: "block", id: "block-" + b.hash, "data-hash": b.hash },
      `Block #${b.block.sequenceNumber}: ${b.hash}\n` + yamlLines(b.block, 0, []).join("\n")));
    main.replaceChildren(
      h("h1", {}, d.alias, " ", badge(d.verification)),
      d.verification_detail ? h("details", { id: "verification-detail" }, h("summary", { text: "Why verification " + d.verification }), h("p", { class: "detail", text: d.verification_detail })) : "",
      actions, progress,
      h("dl", { class: "cards", id: "summary" }, ...summary.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: v === null ? "" : v })])),
      section("Lineage", lineageGraph(d.lineage, d.id)),
      section(`Attestations (${atts.length})`, table("attestations-table", ["Head", "Verdict", "Signer", "By", "When"], attRows)),
      section(`Disputes (${disps.length})`, h("div", { id: "disputes" }, ...(disputes.length ? disputes : [h("p", { class: "muted", text: "none" })]))),
      section(`Data slices (${d.slices.length})`, table("slices-table", ["Block", "Event", "Offsets", "Logical hash", "Physical hash", "Bytes", "System time"], slices)),
      tail.el,
      section("Preview: last rows of the newest slice" + (preview.offsets ? ` (offsets ${preview.offsets[0]}..${preview.offsets[1]})` : ""), prev),
      section(`Metadata chain (${log.length} newest blocks, as kamu log)`, h("div", { id: "chain" }, ...blocks)));
    await tailed;
    if (location.hash) { const t = document.getElementById(decodeURIComponent(location.hash.slice(1))); if (t) t.scrollIntoView(); }
    ready();
  }
  await refresh();
  const later = debounce(refresh, 300);
  Live.on((ev) => {
    if (ev.did !== id) return;
    if (ev.topic === "verify.progress") progress.textContent = `Verifying: ${ev.phase} ${ev.done}/${ev.total}`;
    else if (ev.topic === "verify.started") progress.textContent = "Verifying…";
    else if (ev.topic === "pull.started") progress.textContent = "Pulling from " + ev.url + "…";
    else if (ev.topic === "pull.finished") progress.textContent = "Pull " + ev.outcome;
    else if (ev.topic === "verify.finished") progress.textContent = "Verification " + ev.outcome;
    if (["verify.finished", "head.accepted", "attestation", "dispute", "pull.finished", "head.trusted", "head.distrusted", "source.split_view"].includes(ev.topic)) later();
  });
}

// ---- query results: tables, downloads

// A cell as text: null shown as "null", objects (structs, lists) as JSON.
function cellText(c) {
  if (c === null || c === undefined) return "null";
  return typeof c === "object" ? JSON.stringify(c) : String(c);
}
const NUMERIC = /^(u?int\d+|float\d*|double|halffloat|decimal)/;
function rowsTable(id, answer) {
  return h("table", { id: id, class: "rows" },
    h("thead", {}, h("tr", {}, ...answer.columns.map((c, i) => h("th", { title: (answer.types || [])[i] || "", text: c })))),
    h("tbody", {}, ...answer.rows.map((r) => h("tr", {}, ...r.map((c, i) =>
      h("td", { class: c === null ? "null" : NUMERIC.test((answer.types || [])[i] || "") ? "num" : "", text: cellText(c) }))))));
}
function csvField(c) {
  const t = c === null || c === undefined ? "" : cellText(c);
  return /[",\r\n]/.test(t) ? '"' + t.replace(/"/g, '""') + '"' : t;
}
function toCsv(answer) {
  return [answer.columns, ...answer.rows].map((r) => r.map(csvField).join(",")).join("\r\n") + "\r\n";
}
// A download of text made here (a blob: URL, same origin; the CSP governs fetches, not this).
function download(name, type, text) {
  const url = URL.createObjectURL(new Blob([text], { type: type }));
  const a = h("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}
function trustBadge(x) {
  const t = x.trusted ? "trusted" : "untrusted";
  return h("span", { class: "badge trust-" + (x.trusted ? "trusted" : "disputed"), "data-trust": x.trust || t, text: x.trust || t });
}
// The inputs behind an answer: each table's head, whether it is trusted and why, and who
// attested it (console.dataset's trust; the dataset page lists the attestations themselves).
async function inputsTable(inputs) {
  const details = await Promise.all(inputs.map((x) => rpc("console.dataset", { ref: x.did }).catch(() => null)));
  const rows = inputs.map((x, i) => {
    const t = details[i] && details[i].trust;
    const who = t && t.attesters && t.attesters.length ? t.attesters.map((a) => code(a, 12)) : [h("span", { class: "muted", text: x.trust === "owned" ? "this node (owner)" : "—" })];
    return h("tr", { "data-did": x.did, "data-trust": x.trust },
      h("td", {}, h("code", { text: x.name || x.alias || x.did })),
      h("td", {}, link(x.did, x.alias)),
      h("td", {}, blockLink(x.did, x.head)),
      h("td", {}, trustBadge(x), t && t.by ? " by " + t.by : ""),
      h("td", { class: "attesters" }, ...who.flatMap((w, j) => (j ? [" ", w] : [w]))));
  });
  return table("query-inputs", ["Table", "Dataset", "Head read", "Trust", "Attesters"], rows);
}

async function query(main) {
  const params = new URLSearchParams(location.search);
  const sql = h("textarea", { id: "sql", rows: 6, cols: 100, spellcheck: "false", placeholder: 'select * from "dataset.alias" limit 10' });
  const untrusted = h("input", { id: "untrusted", type: "checkbox" });
  const pageSize = h("select", { id: "page-size" }, ...[10, 50, 100, 500].map((n) => h("option", { value: n, text: n + " rows", selected: n === 50 })));
  const run = h("button", { id: "run-btn", type: "submit", text: "Run (Ctrl+Enter)" });
  const prev = h("button", { id: "prev-btn", type: "button", disabled: true, text: "◀ Previous" });
  const next = h("button", { id: "next-btn", type: "button", disabled: true, text: "Next ▶" });
  const status = h("p", { id: "query-status", class: "muted" });
  const error = h("p", { id: "query-error", class: "error", hidden: true });
  const result = h("div", { id: "query-result" });
  const inputs = h("div", { id: "query-inputs-box" });
  const dlCsv = h("button", { id: "download-csv", type: "button", disabled: true, text: "Download CSV" });
  const dlJson = h("button", { id: "download-json", type: "button", disabled: true, text: "Download JSON" });
  const dlProof = h("button", { id: "download-proof", type: "button", disabled: true, text: "Download signed commitment" });
  const tables = h("ul", { id: "query-tables", class: "tables" });
  let skip = 0;
  let last = null;  // {sql, untrusted, skip, limit, answer}

  async function go(at) {
    const text = sql.value.trim();
    if (!text) return;
    const limit = Number(pageSize.value);
    skip = Math.max(0, at);
    error.hidden = true;
    status.textContent = "Running…";
    run.disabled = true;
    try {
      // One row more than the page tells whether there is a next page.
      const p = { sql: text, skip: skip, limit: limit + 1 };
      if (untrusted.checked) p.untrusted = true;
      const t0 = performance.now();
      const answer = await rpc("data.query", p);
      const ms = Math.round(performance.now() - t0);
      const more = answer.rows.length > limit || answer.truncated;
      answer.rows = answer.rows.slice(0, limit);
      last = { sql: text, untrusted: untrusted.checked, skip: skip, limit: limit, answer: answer };
      result.replaceChildren(rowsTable("query-rows", answer));
      status.textContent = answer.rows.length
        ? `Rows ${skip + 1}–${skip + answer.rows.length}${more ? " (more on the next page)" : ""} · ${ms} ms`
        : (skip ? "No rows past " + skip : "No rows") + ` · ${ms} ms`;
      const unsure = (answer.inputs || []).filter((x) => !x.trusted).map((x) => x.alias || x.did);
      if (unsure.length) status.append(h("span", { id: "query-untrusted", class: "error", text: " · read untrusted heads: " + unsure.join(", ") }));
      prev.disabled = skip === 0;
      next.disabled = !more;
      dlCsv.disabled = dlJson.disabled = dlProof.disabled = false;
      inputs.replaceChildren(await inputsTable(answer.inputs || []));
      history.replaceState(null, "", "/ui/query?sql=" + encodeURIComponent(text) + (untrusted.checked ? "&untrusted=1" : ""));
    } catch (e) {
      // The node's message names the refusal (sandbox, deadline, unknown table, untrusted head).
      error.textContent = e.message;
      error.hidden = false;
      status.textContent = "";
      result.replaceChildren();
      prev.disabled = next.disabled = true;
      dlCsv.disabled = dlJson.disabled = dlProof.disabled = true;
      last = null;
    } finally {
      run.disabled = false;
      ready();
    }
  }
  const form = h("form", { id: "query-form" }, sql, h("div", { class: "controls" },
    run, " ", h("label", {}, untrusted, " read untrusted heads too"), " ", pageSize, " ", prev, " ", next));
  form.addEventListener("submit", (ev) => { ev.preventDefault(); go(0); });
  sql.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); go(0); }
  });
  prev.addEventListener("click", () => go(skip - Number(pageSize.value)));
  next.addEventListener("click", () => go(skip + Number(pageSize.value)));
  pageSize.addEventListener("change", () => { if (last) go(0); });
  dlCsv.addEventListener("click", () => { if (last) download("query.csv", "text/csv", toCsv(last.answer)); });
  dlJson.addEventListener("click", () => { if (last) download("query.json", "application/json", JSON.stringify(last.answer, null, 2)); });
  // The signed commitment is kamu's /query answer with its proof (data.query_api), for the
  // rows on this page; `odf-node query verify FILE` or any node's /verify checks it.
  dlProof.addEventListener("click", async () => {
    if (!last) return;
    try {
      const req = { query: last.sql, include: ["Input", "Proof"], skip: last.skip, limit: last.limit };
      if (last.untrusted) req.untrusted = true;
      const r = await rpc("data.query_api", { request: req });
      download("query-commitment.json", "application/json", JSON.stringify(r, null, 2));
      flash("Signed commitment downloaded: check it with `odf-node query verify query-commitment.json`", "ok");
    } catch (e) { flash("Commitment failed: " + e.message, "error"); }
  });
  main.replaceChildren(h("h1", { text: "Query" }),
    h("p", { class: "muted", text: "SQL over the datasets this node verified: each dataset's alias (or DID) is a table, quoted as in kamu (select * from \"covid19.canada\"). Only trusted heads are read unless you tick the box." }),
    form, error, status, result,
    h("p", { id: "downloads" }, dlCsv, " ", dlJson, " ", dlProof),
    section("Inputs behind the answer", inputs),
    section("Tables", tables));
  async function listTables() {
    let ts = [];
    try { ts = await rpc("data.tables", untrusted.checked ? { untrusted: true } : {}); } catch (e) { tables.replaceChildren(h("li", { class: "error", text: e.message })); return; }
    tables.replaceChildren(...(ts.length ? ts.map((x) => h("li", { "data-did": x.did },
      h("button", { type: "button", class: "use-table", text: '"' + (x.alias || x.did) + '"',
        onclick: () => { sql.value = 'select * from "' + (x.alias || x.did) + '"'; go(0); } }),
      " ", trustBadge(x), " head ", blockLink(x.did, x.head), " · ", link(x.did, "dataset page"))) : [h("li", { class: "muted", text: "no readable table" })]));
  }
  untrusted.addEventListener("change", listTables);
  if (params.get("untrusted")) untrusted.checked = true;
  await listTables();
  if (params.get("sql")) { sql.value = params.get("sql"); await go(0); }
  else ready();
}

// The tail of a dataset (data.tail): its last records at the trusted head, as `dataset tail`.
function tailSection(id) {
  const n = h("select", { id: "tail-n" }, ...[10, 20, 50, 100].map((x) => h("option", { value: x, text: "last " + x, selected: x === 10 })));
  const untrusted = h("input", { id: "tail-untrusted", type: "checkbox" });
  const box = h("div", { id: "tail-box" });
  const note = h("p", { id: "tail-note", class: "muted" });
  async function load() {
    const p = { ref: id, n: Number(n.value) };
    if (untrusted.checked) p.untrusted = true;
    try {
      const t = await rpc("data.tail", p);
      const x = (t.inputs || [])[0];
      note.replaceChildren(...(x ? ["At head ", blockLink(x.did, x.head), " (", trustBadge(x), ") · ",
        h("a", { href: "/ui/query?sql=" + encodeURIComponent('select * from "' + (x.alias || x.did) + '"') + (untrusted.checked ? "&untrusted=1" : ""), text: "query it" })] : []));
      box.replaceChildren(rowsTable("tail-table", t));
    } catch (e) {
      note.replaceChildren();
      box.replaceChildren(h("p", { class: "error", id: "tail-error", text: e.message }));
    }
  }
  n.addEventListener("change", load);
  untrusted.addEventListener("change", load);
  const el = section("Tail: the last records at the trusted head",
    h("p", {}, n, " ", h("label", {}, untrusted, " read the newest head even if untrusted")), note, box);
  el.id = "tail";
  return { el: el, load: load };
}

async function peers(main) {
  async function refresh() {
    const p = await rpc("console.peers");
    const rows = p.peers.map((x) => h("tr", { "data-peer": x.peer_id, id: "peer-" + x.peer_id, class: x.graylisted ? "graylisted" : "" },
      h("td", {}, code(x.peer_id, 12)), h("td", { text: x.connected ? "connected" : "—" }),
      h("td", { class: "num", text: Number(x.score).toFixed(2) }), h("td", { text: x.graylisted ? "graylisted" : "" }),
      h("td", {}, ...x.addrs.map((a) => h("div", {}, h("code", { text: a })))), h("td", { text: ago(x.last_seen_ns) })));
    const pen = Object.entries(p.penalties).map(([r, n]) => h("tr", {}, h("td", { text: r }), h("td", { class: "num", text: n })));
    main.replaceChildren(h("h1", { text: "Peers" }),
      table("peers-table", ["Peer", "Connection", "Score", "Graylist (< " + p.graylist_threshold + ")", "Addresses", "Last seen"], rows),
      section("Penalties by reason (all peers)", pen.length ? table("penalties-table", ["Reason", "Messages"], pen) : h("p", { class: "muted", text: "none" })));
    ready();
  }
  await refresh();
  const later = debounce(refresh, 500);
  Live.on((ev) => { if (ev.topic.startsWith("peer.")) later(); });
}

async function work(main) {
  const select = h("select", { id: "work-state" }, ...["", "pending", "claimed", "done", "failed"].map((v) => h("option", { value: v, text: v || "all states" })));
  const box = h("div", {});
  async function refresh() {
    const params = select.value ? { state: select.value } : {};
    const items = await rpc("work.list", params);
    box.replaceChildren(table("work-table", ["Id", "Kind", "Dataset", "Head", "State", "Attempts", "Last error"],
      items.map((w) => h("tr", { "data-id": w.id, "data-state": w.state },
        h("td", { class: "num", text: w.id }), h("td", { text: w.kind }), h("td", {}, link(w.did)),
        h("td", {}, code(w.head)), h("td", {}, h("span", { class: "badge state-" + w.state, text: w.state })),
        h("td", { class: "num", text: w.attempts }), h("td", { class: "error", text: w.last_error || "" })))));
    ready();
  }
  select.addEventListener("change", refresh);
  main.replaceChildren(h("h1", { text: "Work items" }), h("p", {}, "Show ", select), box);
  await refresh();
  const later = debounce(refresh, 300);
  Live.on((ev) => { if (ev.topic.startsWith("verify.") || ev.topic === "announce" || ev.topic === "dispute" || ev.topic === "attestation") later(); });
}

async function flows(main) {
  const schedules = h("div", {});
  const runs = h("div", {});
  async function refresh() {
    const f = await rpc("flows.list", { limit: 200 });
    schedules.replaceChildren(table("flows-schedules", ["Dataset", "Trigger", "Next run"],
      f.schedules.map((s) => h("tr", { "data-id": s.id, "data-trigger": s.trigger },
        h("td", {}, link(s.id, s.alias)), h("td", { text: s.trigger }), h("td", { text: s.next_run || "" })))));
    runs.replaceChildren(table("flows-runs", ["Run", "Kind", "Dataset", "Trigger", "State", "Attempts", "Updated", "Last error"],
      f.runs.map((r) => h("tr", { "data-id": r.id, "data-state": r.state, "data-kind": r.kind },
        h("td", { class: "num", text: r.id }), h("td", { text: r.kind }), h("td", {}, link(r.did, r.alias)),
        h("td", { text: r.trigger }), h("td", {}, h("span", { class: "badge state-" + r.state, text: r.state })),
        h("td", { class: "num", text: r.attempts }), h("td", { text: r.updated }),
        h("td", { class: "error", text: r.last_error || "" })))));
    ready();
  }
  main.replaceChildren(h("h1", { text: "Flows" }),
    h("p", { text: "Datasets that update themselves: `odf-node dataset schedule ALIAS --every 1h | --cron EXPR | --on-input`." }),
    section("Schedules", schedules), section("Runs (newest first)", runs));
  await refresh();
  const later = debounce(refresh, 500);
  Live.on((ev) => { if (ev.topic === "announce" || ev.topic.startsWith("dataset.")) later(); });
}

const PAGES = { overview, datasets, dataset, query, peers, work, flows };

document.addEventListener("DOMContentLoaded", async () => {
  const name = location.pathname.replace(/^\/ui\/?/, "") || "overview";
  document.body.dataset.page = name;
  for (const a of document.querySelectorAll("nav a")) if (a.dataset.nav === name) a.classList.add("current");
  const main = document.getElementById("main");
  try {
    // The page sends its first requests before the event stream connects: they are what the
    // user waits for.
    const page = (PAGES[name] || overview)(main);
    Live.connect(1000);
    await page;
    if (name === "overview") ready();
  } catch (e) {
    main.replaceChildren(h("p", { class: "error", id: "page-error", text: "Could not load this page: " + e.message }));
  }
});
