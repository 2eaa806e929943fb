// The raygang status page: polls /v1/queues, /v1/gangs, /v1/jobs and /v1/cluster every
// 2 s and draws them, and /v1/history (the queues over the last hours) every 15 s. Plain
// DOM, no dependencies, nothing loaded from outside this server.
// Every text from the API goes in through textContent (via el()), never as markup.
"use strict";

(function () {
  const REFRESH_MS = 2000;
  const HISTORY_MS = 15000;  // the scheduler samples every 30 s by default: no need for more
  const SVG = "http://www.w3.org/2000/svg";
  const TOKEN_KEY = "raygang.token";
  const FINISHED = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
  const EPS = 1e-6;

  const $ = (id) => document.getElementById(id);
  let timer = null;
  const openHistories = new Set();  // gang ids whose history is unfolded
  let inFlight = false;
  let historyAt = 0;  // when /v1/history was last drawn (Date.now())

  class AuthError extends Error {}

  // Token -----------------------------------------------------------------------------
  function storage() {
    try { return window.localStorage; } catch (e) { return null; }  // blocked storage
  }

  function readToken() {
    return (storage() && storage().getItem(TOKEN_KEY)) || "";
  }

  function saveToken(token) {
    const s = storage();
    if (!s) return;
    if (token) s.setItem(TOKEN_KEY, token); else s.removeItem(TOKEN_KEY);
  }

  // `#token=...` lets links and tests hand the page a token; it leaves the address bar
  // at once so it is not bookmarked or shared by accident.
  function takeTokenFromFragment() {
    const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
    const token = params.get("token");
    if (token === null) return;
    saveToken(token.trim());
    history.replaceState(null, "", window.location.pathname + window.location.search);
  }

  // Fetching --------------------------------------------------------------------------
  async function getJson(path) {
    const headers = { Accept: "application/json" };
    const token = readToken();
    if (token) headers.Authorization = "Bearer " + token;
    const response = await fetch(path, { headers, cache: "no-store" });
    if (response.status === 401) throw new AuthError(token ? "the token was rejected" : "a token is needed");
    if (!response.ok) {
      let detail = response.statusText;
      try { detail = (await response.json()).detail || detail; } catch (e) { /* not JSON */ }
      throw new Error(path + ": " + response.status + " " + detail);
    }
    return response.json();
  }

  async function refresh() {
    if (inFlight) return;
    inFlight = true;
    try {
      const [queues, gangs, jobs, cluster] = await Promise.all([
        getJson("/v1/queues"), getJson("/v1/gangs?limit=1000&order=newest"),
        getJson("/v1/jobs?limit=1000&order=newest"), getJson("/v1/cluster"),
      ]);
      // Answered: no error, no token form, before anything is drawn (a test, or a user,
      // who sees the queues must not see the last refresh's error beside them).
      showError(null);
      $("token-form").hidden = true;
      $("forget-token").hidden = !readToken();
      renderQueues(queues);
      renderGangs(gangs);
      renderJobs(jobs);
      renderNodes(cluster);
      if (Date.now() - historyAt >= HISTORY_MS) {
        renderHistory(await getJson("/v1/history"));
        historyAt = Date.now();
      }
      $("updated").textContent = "last updated " + new Date().toLocaleTimeString();
      $("updated").dataset.updatedAt = String(Date.now());
      schedule();
    } catch (error) {
      if (error instanceof AuthError) {
        showError("Not authorized: " + error.message + ".");
        showTokenForm();  // polling waits for a token
      } else {
        showError("Refresh failed: " + error.message + " (retrying)");
        schedule();
      }
    } finally {
      inFlight = false;
    }
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(refresh, REFRESH_MS);
  }

  function showError(text) {
    const banner = $("error");
    banner.hidden = !text;
    banner.textContent = text || "";
  }

  function showTokenForm() {
    clearTimeout(timer);
    $("token-form").hidden = false;
    $("token-input").focus();
  }

  // DOM helpers -----------------------------------------------------------------------
  // el("td", {class: "state", data: {state: "RUNNING"}}, "RUNNING", child...)
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key === "data") {
        for (const [k, v] of Object.entries(value)) if (v !== undefined && v !== null) node.dataset[k] = v;
      }
      else if (key === "style") for (const [p, v] of Object.entries(value)) node.style.setProperty(p, v);
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // GPU first, then CPU, then the rest by name.
  function resourceOrder(a, b) {
    const rank = (n) => (n === "GPU" ? 0 : n === "CPU" ? 1 : 2);
    return rank(a) - rank(b) || (a < b ? -1 : a > b ? 1 : 0);
  }

  function label(name) {
    return name === "object_store_memory" ? "object store" : name;
  }

  function amount(name, value) {
    if (value === undefined || value === null) return "-";
    if (name === "memory" || name === "object_store_memory") return (value / 2 ** 30).toFixed(1) + " GiB";
    return String(Math.round(value * 100) / 100);
  }

  function percent(part, whole) {
    if (!whole) return part > EPS ? 100 : 0;
    return Math.max(0, Math.min(100, (100 * part) / whole));
  }

  function bar(kind, used, cap, title) {
    const over = cap !== null && used > cap + EPS;
    const fill = cap === null ? 0 : percent(used, cap);
    return el("div", {
      class: "bar " + kind + (over ? " over" : "") + (cap === null ? " uncapped" : ""),
      title, data: { used: String(used), cap: cap === null ? "none" : String(cap) },
    }, el("div", { class: "fill", style: { width: fill + "%" } }));
  }

  function age(seconds) {
    seconds = Math.max(0, Math.floor(seconds));
    if (seconds < 60) return seconds + "s";
    if (seconds < 3600) return Math.floor(seconds / 60) + "m " + (seconds % 60) + "s";
    if (seconds < 86400) return Math.floor(seconds / 3600) + "h " + Math.floor((seconds % 3600) / 60) + "m";
    return Math.floor(seconds / 86400) + "d " + Math.floor((seconds % 86400) / 3600) + "h";
  }

  // A stable colour per gang, so its GPU slots and its row read together.
  function hue(gangId) {
    let h = 0;
    for (const c of gangId) h = (h * 31 + c.charCodeAt(0)) >>> 0;
    return String(h % 360);
  }

  // Queues ----------------------------------------------------------------------------
  function renderQueues(queues) {
    $("queue-list").replaceChildren(...queues.map(renderQueue));
  }

  function renderQueue(q) {
    const names = new Set([...Object.keys(q.quota), ...Object.keys(q.limit || {}),
                           ...Object.keys(q.usage), ...Object.keys(q.fair_share)]);
    // Resources all zero for this queue are noise (memory, object store), but GPU stays.
    const shown = [...names].filter((n) => n === "GPU" ||
      [q.quota[n], q.limit && q.limit[n], q.usage[n], q.fair_share[n]].some((v) => v));
    const rows = shown.sort(resourceOrder).map((name) => queueResource(q, name));
    const count = (kind, n) => el("span", { class: kind, data: { count: String(n) } }, n + " " + kind);
    return el("div", { class: "card queue" + (q.leaf ? "" : " parent"), data: { queue: q.name } },
      el("div", { class: "card-head" },
        el("span", { class: "title" }, q.name),
        q.parent ? el("span", { class: "muted" }, "in " + q.parent) : null,
        el("span", { class: "counts" }, count("pending", q.pending), count("running", q.running))),
      el("div", { class: "muted meta" },
        "weight " + q.weight + " · share ratio " + Math.round(q.share_ratio * 100) / 100),
      el("div", { class: "resources" }, ...rows));
  }

  // One resource of a queue: usage against its quota and against its limit (if capped).
  function queueResource(q, name) {
    const used = q.usage[name] || 0;
    const quota = q.quota[name] || 0;
    const limit = q.limit ? (q.limit[name] ?? null) : null;
    const fair = q.fair_share[name] || 0;
    const of = (what, cap) => "usage " + amount(name, used) + " of " + what + " " + amount(name, cap);
    const line = (kind, cap, title) => el("div", { class: "barline" },
      el("span", { class: "blabel" }, kind), bar(kind, used, cap, title));
    return el("div", {
      class: "resource",
      data: { resource: name, usage: String(used), quota: String(quota),
              limit: limit === null ? "none" : String(limit) },
    },
      el("span", { class: "rname", title: name }, label(name)),
      el("div", { class: "bars" },
        line("quota", quota, of("quota", quota)),
        line("limit", limit, limit === null ? "no limit" : of("limit", limit))),
      el("span", { class: "numbers" },
        amount(name, used) + " used / " + amount(name, quota) + " quota / " +
        (limit === null ? "no limit" : amount(name, limit) + " limit") +
        " · fair share " + amount(name, fair)));
  }

  // Gangs -----------------------------------------------------------------------------
  // Unfinished first, then newest first.
  function byActivity(items) {
    return [...items].sort((a, b) =>
      (FINISHED.has(a.state) - FINISHED.has(b.state)) ||
      (b.submitted_at - a.submitted_at) || (a.gang_id < b.gang_id ? -1 : 1));
  }

  function positionOf(g) {
    return g.queue_position === null || g.queue_position === undefined
      ? "" : String(g.queue_position);
  }

  function renderGangs(page) {
    const rows = byActivity(page.items).map((g) => gangRow(g, page.now));
    if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colspan: "8" }, "no gangs yet")));
    $("gang-rows").replaceChildren(...rows);
    $("gang-count").textContent = "(" + page.total + ")";
  }

  // An elastic gang: the members it runs now, of its min..max, and why it grows no further;
  // then each role's size and why it is not larger.
  function elasticSize(g) {
    if (!g.max_size) return null;
    const roles = (g.roles || []).map((r) => r.role + " " + r.size + " of " + r.min_size +
      "\u2013" + r.max_size + (r.step > 1 ? " (by " + r.step + ")" : "") +
      (r.grow_reason ? ": " + r.grow_reason : ""));
    const title = [g.grow_reason || "elastic: " + g.min_size + " to " + g.max_size +
      " members"].concat(roles).join("\n");
    return el("span", { class: "kind elastic", title: title },
      g.world_size + " of " + g.min_size + "\u2013" + g.max_size);
  }

  function gangRow(g, now) {
    const position = positionOf(g);
    const submitted = "submitted " + new Date(g.submitted_at * 1000).toLocaleString();
    return el("tr", { data: { gangId: g.gang_id, state: g.state } },
      el("td", { class: "id mono", title: g.gang_id }, g.gang_id),
      el("td", { class: "name" }, g.name,
         g.kind !== "gang" ? el("span", { class: "kind" }, g.kind) : null,
         elasticSize(g)),
      el("td", { class: "queue" }, g.queue),
      el("td", { class: "priority num" }, String(g.priority)),
      el("td", { class: "state" }, el("span", { class: "pill state-" + g.state }, g.state)),
      el("td", { class: "position num" }, position),
      el("td", { class: "age num", title: submitted }, age(now - g.submitted_at)),
      el("td", { class: "reason" }, g.reason || "", historyOf(g, now)));
  }

  // Ray Jobs: a job is also a gang (its row above); here with its Ray job and command.
  function renderJobs(page) {
    const rows = byActivity(page.items).map((j) => jobRow(j, page.now));
    if (!rows.length) rows.push(el("tr", { class: "empty" }, el("td", { colspan: "8" }, "no jobs yet")));
    $("job-rows").replaceChildren(...rows);
    $("job-count").textContent = "(" + page.total + ")";
  }

  function jobRow(j, now) {
    const submitted = "submitted " + new Date(j.submitted_at * 1000).toLocaleString();
    return el("tr", { data: { jobId: j.gang_id, state: j.state } },
      el("td", { class: "id mono", title: j.gang_id }, j.gang_id),
      el("td", { class: "queue" }, j.queue),
      el("td", { class: "state" }, el("span", { class: "pill state-" + j.state }, j.state)),
      el("td", { class: "position num" }, positionOf(j)),
      el("td", { class: "ray-job mono", title: j.ray_job_id || "not started" }, j.ray_job_id || ""),
      el("td", { class: "entrypoint mono", title: j.entrypoint || "" }, j.entrypoint || ""),
      el("td", { class: "age num", title: submitted }, age(now - j.submitted_at)),
      el("td", { class: "reason" }, j.reason || ""));
  }

  // Every state change of the gang (time since submission, from -> to, why): folded; a
  // gang whose history is open stays open across refreshes.
  function historyOf(g, now) {
    const events = g.events || [];
    const items = events.map((e) => el("li", {},
      el("span", { class: "mono" }, "+" + (e.at - g.submitted_at).toFixed(2) + "s"), " ",
      (e.from_state || "-") + " \u2192 " + e.to_state, e.reason ? ": " + e.reason : ""));
    const details = el("details", { class: "history" },
      el("summary", {}, "history (" + events.length + ")"), timeline(g, now),
      el("ol", {}, ...items));
    details.open = openHistories.has(g.gang_id);
    details.addEventListener("toggle", () => {
      if (details.open) openHistories.add(g.gang_id); else openHistories.delete(g.gang_id);
    });
    return details;
  }

  // The gang's states laid end to end, each as long as it lasted (the last one until now,
  // or a sliver once the gang has finished).
  function timeline(g, now) {
    const events = g.events || [];
    const end = FINISHED.has(g.state) && events.length ? events[events.length - 1].at : now;
    const span = Math.max(end - g.submitted_at, EPS);
    const segs = events.map((e, i) => {
      const until = i + 1 < events.length ? events[i + 1].at : end;
      const seconds = Math.max(0, until - e.at);
      return el("span", {
        class: "seg state-" + e.to_state,
        title: e.to_state + " for " + seconds.toFixed(2) + "s" + (e.reason ? ": " + e.reason : ""),
        data: { state: e.to_state, seconds: seconds.toFixed(3) },
        style: { "flex-grow": String(seconds / span) },
      });
    });
    return el("div", { class: "timeline", data: { span: span.toFixed(3) } }, ...segs);
  }

  // History ---------------------------------------------------------------------------
  // One card per queue: gangs pending and running, and GPUs in use against the guarantee,
  // as lines over the ring's time span.
  function renderHistory(history) {
    const points = history.points;
    const names = [...new Set(points.flatMap((p) => Object.keys(p.queues)))];
    const spanS = points.length ? points[points.length - 1].at - points[0].at : 0;
    $("history-span").textContent = points.length
      ? "(last " + age(spanS) + ", a point every " + age(history.interval_s) + ")"
      : "(no samples yet)";
    $("history-list").replaceChildren(...names.map((name) => {
      const samples = points.filter((p) => p.queues[name])
        .map((p) => Object.assign({ at: p.at }, p.queues[name]));
      return el("div", { class: "card history-queue",
                         data: { historyQueue: name, points: String(samples.length) } },
        el("div", { class: "card-head" }, el("span", { class: "title" }, name)),
        chart("gangs", samples, ["pending", "running"]),
        legend(["pending", "running"], samples),
        chart("gpus", samples, ["gpus", "guarantee"]),
        legend(["gpus", "guarantee"], samples));
    }));
  }

  const WORDS = { pending: "pending", running: "running", gpus: "GPUs in use",
                  guarantee: "GPU guarantee" };

  function legend(series, samples) {
    const last = samples[samples.length - 1] || {};
    return el("div", { class: "legend" }, ...series.map((s) =>
      el("span", { class: "key " + s }, WORDS[s] + " " + amount("GPU", last[s] || 0))));
  }

  function svgEl(tag, attrs) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    return node;
  }

  // Lines of `series` over time, on one scale from 0 to the largest value drawn.
  function chart(kind, samples, series) {
    const W = 300, H = 80;
    const svg = svgEl("svg", { viewBox: "0 0 " + W + " " + H, preserveAspectRatio: "none",
                               class: "chart", "data-chart": kind });
    const t0 = samples.length ? samples[0].at : 0;
    const t1 = samples.length ? samples[samples.length - 1].at : 0;
    const top = Math.max(1, ...samples.flatMap((p) => series.map((s) => p[s])));
    const x = (at) => (t1 > t0 ? ((at - t0) / (t1 - t0)) * W : W);
    const y = (v) => H - 2 - (v / top) * (H - 4);
    svg.append(svgEl("line", { x1: 0, y1: H - 1, x2: W, y2: H - 1, class: "axis" }));
    for (const s of series) {
      svg.append(svgEl("polyline", {
        class: s, "data-series": s, "data-values": samples.map((p) => p[s]).join(" "),
        points: samples.map((p) => x(p.at).toFixed(1) + "," + y(p[s]).toFixed(1)).join(" "),
      }));
    }
    return svg;
  }

  // Nodes -----------------------------------------------------------------------------
  // Lay bundles' GPU amounts onto whole-GPU slots in order; a fractional bundle shares a
  // slot. GPUs in use by nothing this token can see are shown as "other".
  function gpuSlots(node) {
    const total = node.total.GPU || 0;
    const slots = Array.from({ length: Math.ceil(total - EPS) }, (_, i) =>
      ({ room: Math.min(1, total - i), holders: [] }));
    let i = 0;
    const place = (holder, gpus) => {
      while (gpus > EPS && i < slots.length) {
        const take = Math.min(gpus, slots[i].room);
        if (take > EPS) { slots[i].holders.push(holder); slots[i].room -= take; gpus -= take; }
        if (slots[i].room <= EPS) i++;
      }
    };
    let held = 0;
    for (const b of node.bundles) {
      const gpus = b.resources.GPU || 0;
      held += gpus;
      place(b, gpus);
    }
    place(null, (node.used.GPU || 0) - held);
    return slots;
  }

  function renderSlot(slot, index) {
    const gangs = slot.holders.filter((h) => h !== null);
    const other = slot.holders.includes(null);
    const names = gangs.map((b) => b.name + " #" + b.rank).concat(other ? ["other"] : []);
    const titles = gangs.map((b) => b.name + " (" + b.gang_id + ", queue " + b.queue +
                                    ", rank " + b.rank + ")");
    const first = gangs[0];
    return el("div", {
      class: "slot" + (gangs.length ? " held" : other ? " other" : " free"),
      title: titles.concat(other ? ["used by something not shown"] : []).join("\n") || "free",
      data: { slot: String(index), gangId: first ? first.gang_id : undefined,
              gangIds: gangs.map((b) => b.gang_id).join(" ") },
      style: first ? { "--gang-hue": hue(first.gang_id) } : {},
    }, el("span", { class: "gpu-index" }, "GPU " + index),
       el("span", { class: "holder" }, names.length ? names.join(", ") : "free"));
  }

  function renderNode(node) {
    const slots = gpuSlots(node);
    const cpuTotal = node.total.CPU || 0;
    const cpuUsed = node.used.CPU || 0;
    const cpus = amount("CPU", cpuUsed) + " / " + amount("CPU", cpuTotal);
    const others = Object.keys(node.total).filter((n) => n !== "GPU" && n !== "CPU")
      .sort(resourceOrder)
      .map((n) => label(n) + " " + amount(n, node.used[n] || 0) + " / " + amount(n, node.total[n]));
    const state = node.alive ? "alive" : "dead";
    return el("div", { class: "card node " + state, data: { nodeId: node.node_id } },
      el("div", { class: "card-head" },
        el("span", { class: "title" }, node.name),
        el("span", { class: "muted mono", title: node.node_id }, node.node_id.slice(0, 12)),
        el("span", { class: "pill " + state }, state)),
      slots.length
        ? el("div", { class: "slots" }, ...slots.map(renderSlot))
        : el("div", { class: "muted" }, "no GPUs"),
      el("div", { class: "resource cpu",
                  data: { resource: "CPU", used: String(cpuUsed), total: String(cpuTotal) } },
        el("span", { class: "rname" }, "CPU"),
        bar("cpu", cpuUsed, cpuTotal, cpus + " CPUs used"),
        el("span", { class: "numbers" }, cpus + " used")),
      others.length ? el("div", { class: "muted other-resources" }, others.join(" · ")) : null);
  }

  function renderNodes(cluster) {
    // While Ray's GCS does not answer, the scheduler decides nothing: say so, and since when
    // (the nodes below are then the last view it had).
    const since = cluster.unreachable_since;
    $("unreachable").hidden = since == null;
    $("unreachable").textContent = since == null ? "" :
      "Ray's GCS does not answer since " + new Date(since * 1000).toLocaleTimeString() +
      ": no scheduling decision until it does; nodes as last seen (" +
      cluster.unreachable_reason + ")";
    const byName = (a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    const nodes = [...cluster.nodes].sort((a, b) =>
      (b.alive - a.alive) || ((b.total.GPU || 0) - (a.total.GPU || 0)) || byName(a, b));
    $("node-list").replaceChildren(...nodes.map(renderNode));
  }

  // Start -----------------------------------------------------------------------------
  $("token-form").addEventListener("submit", (event) => {
    event.preventDefault();
    saveToken($("token-input").value.trim());
    $("token-input").value = "";
    $("token-form").hidden = true;
    refresh();
  });
  $("forget-token").addEventListener("click", () => { saveToken(""); refresh(); });

  takeTokenFromFragment();
  refresh();
})();
