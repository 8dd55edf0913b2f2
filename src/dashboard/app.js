// cron-fanout dashboard. Plain JavaScript, no framework and no build step: the
// Worker embeds this file and serves it from its own origin under a CSP that
// allows nothing else (no inline script or style, no other host). The admin
// token lives in this tab's sessionStorage and travels only as a Bearer header;
// without it the page shows nothing but the sign-in form.
"use strict";

(() => {
  const TOKEN_KEY = "cron-fanout.admin-token";
  const REFRESH_MS = 3000;
  const PAGE_SIZE = 20;
  const SVG_NS = "http://www.w3.org/2000/svg";
  // Bar order: what is done first, then what is still to come.
  const BAR = ["completed", "failed", "processing", "pending"];
  const ITEM_STATUSES = ["pending", "processing", "completed", "failed"];
  // Timeline buckets the page may ask for (seconds), finest first.
  const BUCKETS = [10, 30, 60, 300, 900, 3600];
  const MAX_BARS = 120;

  const meta = document.querySelector('meta[name="cron-fanout-features"]');
  const features = new Set(((meta && meta.content) || "").split(/\s+/).filter(Boolean));
  const $ = (id) => document.getElementById(id);
  const numberFormat = new Intl.NumberFormat();

  // ---------------------------------------------------------------- helpers

  /** An element: h("td", {class: "num"}, "12"). Children may be strings, nodes or null. */
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "on") for (const [ev, fn] of Object.entries(v)) el.addEventListener(ev, fn);
      else el.setAttribute(k, v === true ? "" : v);
    }
    append(el, children);
    return el;
  }

  function append(el, children) {
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function svg(tag, attrs, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") el.setAttribute("class", v);
      else el.setAttribute(k, String(v));
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  const num = (n) => (n === null || n === undefined ? "—" : numberFormat.format(n));

  function time(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    const today = new Date().toDateString() === d.toDateString();
    const t = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    return today ? t : `${d.toLocaleDateString([], { month: "short", day: "numeric" })} ${t}`;
  }

  function duration(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "—";
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return `${s} s`;
    const m = Math.round(s / 60);
    if (m < 60) return `${m} min`;
    const hours = Math.floor(m / 60);
    return `${hours} h ${m % 60} min`;
  }

  function timeCell(iso) {
    return h("time", { datetime: iso || null, title: iso || null }, time(iso));
  }

  function eta(batch) {
    if (batch.status !== "running") return "—";
    if (!batch.eta) return "unknown";
    const left = new Date(batch.eta).getTime() - Date.now();
    return left <= 1000 ? "any moment" : `in ${duration(left)} (${time(batch.eta)})`;
  }

  function rate(batch) {
    if (batch.rate_per_min === null || batch.rate_per_min === undefined) return "—";
    return `${numberFormat.format(batch.rate_per_min)}/min`;
  }

  // ---------------------------------------------------------------- API

  class Unauthorized extends Error {}

  async function request(path, token) {
    const res = await fetch(path, {
      headers: { Authorization: `Bearer ${token}`, Accept: "application/json" },
      cache: "no-store",
    });
    if (res.status === 401) throw new Unauthorized("unauthorized");
    let body = null;
    try {
      body = await res.json();
    } catch (_) {
      body = null;
    }
    if (!res.ok) {
      const e = body && body.error;
      throw new Error(e ? `${e.code}: ${e.message}` : `HTTP ${res.status}`);
    }
    return body;
  }

  function api(path) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return Promise.reject(new Unauthorized("signed out"));
    return request(path, token);
  }

  const enc = encodeURIComponent;

  // ---------------------------------------------------------------- shared pieces

  function badge(status) {
    return h("span", { class: `badge ${status}`, "data-status": status }, status);
  }

  /** The four-colour bar, each part labelled with its number (not colour alone). */
  function progressBar(b) {
    const total = Math.max(1, b.total);
    const bar = h("div", {
      class: "bar",
      role: "img",
      "aria-label": BAR.map((s) => `${s} ${b[s]}`).join(", ") + ` of ${b.total}`,
    });
    for (const s of BAR) {
      const part = h("span", { class: s, title: `${s}: ${num(b[s])}` });
      // CSSOM, not a style attribute: allowed under style-src 'self'.
      part.style.width = `${(100 * b[s]) / total}%`;
      bar.append(part);
    }
    const legend = h(
      "div",
      { class: "legend" },
      BAR.map((s) =>
        h("span", { class: "key" }, h("span", { class: `swatch ${s}` }), `${s} `, h("b", { "data-count": s }, num(b[s]))),
      ),
    );
    return [bar, legend];
  }

  function table(columns, rows, empty) {
    if (!rows.length) return h("p", { class: "empty" }, empty);
    return h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.cls || null }, c.title)))),
        h(
          "tbody",
          {},
          rows.map((r) => h("tr", {}, columns.map((c) => h("td", { class: c.cls || null }, c.cell(r))))),
        ),
      ),
    );
  }

  /** A keyset-paged list: the cursors of the pages before this one. */
  function pager(state, nextAfter, onMove) {
    const first = h("button", { type: "button", class: "link", disabled: state.cursors.length <= 1 }, "First page");
    const prev = h("button", { type: "button", class: "link", disabled: state.cursors.length <= 1 }, "Previous");
    const next = h("button", { type: "button", class: "link", disabled: !nextAfter }, "Next");
    const move = (change) => () => {
      change();
      onMove();
    };
    first.addEventListener("click", move(() => (state.cursors = [""])));
    prev.addEventListener("click", move(() => state.cursors.pop()));
    next.addEventListener("click", move(() => state.cursors.push(nextAfter)));
    return h("div", { class: "pager" }, first, prev, next, h("span", { class: "muted" }, `page ${state.cursors.length}`));
  }

  function panel(title, ...children) {
    return h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, title)), children);
  }

  function replace(el, ...children) {
    el.replaceChildren();
    append(el, children);
  }

  // ---------------------------------------------------------------- views

  /** Batches, newest first, each with its bar, rate and ETA. */
  function batchesView() {
    const list = h("div", { id: "batches" });
    return {
      nav: "batches",
      root: h("div", {}, h("div", { class: "panel-head" }, h("h1", {}, "Batches"), h("span", { class: "muted" }, "newest first")), list),
      async refresh() {
        const { batches } = await api("/batches?limit=50");
        if (!batches.length) {
          replace(list, h("p", { class: "panel empty" }, "No batches yet. A schedule creates one when it fires (the daily one at 12:00 UTC), and so does POST /batches."));
          return;
        }
        replace(
          list,
          batches.map((b) =>
            h(
              "article",
              { class: "panel batch", "data-batch-id": b.id },
              h(
                "div",
                { class: "batch-head" },
                h("a", { class: "batch-key", href: `#/batches/${enc(b.id)}` }, b.key),
                badge(b.status),
                h("span", { class: "muted" }, "created ", timeCell(b.created_at)),
              ),
              progressBar(b),
              h(
                "div",
                { class: "figures" },
                h("span", {}, h("span", { class: "label" }, "done"), h("b", { class: "num" }, `${b.percent}%`), ` of ${num(b.total)}`),
                b.status === "running"
                  ? [
                      h("span", {}, h("span", { class: "label" }, "rate"), h("b", { class: "num", "data-rate": "" }, rate(b))),
                      h("span", {}, h("span", { class: "label" }, "ETA"), h("b", { "data-eta": "" }, eta(b))),
                    ]
                  : h("span", {}, h("span", { class: "label" }, "finished"), timeCell(b.finished_at)),
              ),
            ),
          ),
        );
      },
    };
  }

  /** One batch: counts, throughput chart, failed items, items by status. */
  function batchView(id) {
    const head = h("div", {});
    const progress = h("div", {});
    const chart = h("div", { id: "throughput" });
    const failed = h("div", { id: "failed-items" });
    const tabs = h("div", { class: "tabs", role: "group", "aria-label": "status" });
    const itemRows = h("div", {});
    const items = h("div", { id: "items" }, tabs, itemRows);
    let failedShown = null;
    let itemsShown = false;
    const failedPage = { cursors: [""] };
    const itemsPage = { cursors: [""], status: "pending" };
    const timeline = { bucket: 0, points: new Map(), from: null, to: null };
    let batch = null;

    const actions = features.has("batch-control")
      ? // Batch control (issue 11): pause / resume / cancel / retry failed, each
        // with a confirmation. Shown only once the Worker has those routes.
        h("section", { class: "panel placeholder", id: "batch-actions", "data-feature": "batch-control" }, h("h2", {}, "Actions"))
      : null;

    async function loadFailed() {
      const after = failedPage.cursors[failedPage.cursors.length - 1];
      const page = await api(`/batches/${enc(id)}/items?status=failed&limit=${PAGE_SIZE}&after=${enc(after)}`);
      replace(
        failed,
        table(
          [
            { title: "Subject", cell: (i) => h("span", { class: "mono" }, i.subject_id) },
            { title: "Attempts", cls: "num", cell: (i) => `${i.attempt}/${i.max_attempts}` },
            { title: "Last error", cls: "error-text", cell: (i) => i.last_error || "—" },
            { title: "Ended", cls: "hide-narrow", cell: (i) => timeCell(i.completed_at) },
          ],
          page.items,
          "No failed items.",
        ),
        page.items.length || failedPage.cursors.length > 1 ? pager(failedPage, page.next_after, () => loadFailed().catch(report)) : null,
      );
    }

    // The item lists are not polled: a page of a status other than failed walks
    // the batch's items in subject order (there is no index by status; one would
    // cost a written row per item), so on a big batch with few matches it reads
    // many rows. They load when the view opens, when the operator pages, switches
    // tab or reloads, and (failed items, indexed) when the failed count changes.
    function drawTabs() {
      replace(
        tabs,
        ITEM_STATUSES.map((s) =>
          h(
            "button",
            {
              type: "button",
              "aria-pressed": String(s === itemsPage.status),
              on: {
                click: () => {
                  itemsPage.status = s;
                  itemsPage.cursors = [""];
                  drawTabs();
                  loadItems().catch(report);
                },
              },
            },
            `${s} (${num(batch ? batch[s] : null)})`,
          ),
        ),
        h("button", { type: "button", class: "link", on: { click: () => loadItems().catch(report) } }, "Reload"),
      );
    }

    async function loadItems() {
      const after = itemsPage.cursors[itemsPage.cursors.length - 1];
      const page = await api(`/batches/${enc(id)}/items?status=${itemsPage.status}&limit=${PAGE_SIZE}&after=${enc(after)}`);
      replace(
        itemRows,
        table(
          [
            { title: "Subject", cell: (i) => h("span", { class: "mono" }, i.subject_id) },
            { title: "Attempt", cls: "num", cell: (i) => `${i.attempt}/${i.max_attempts}` },
            { title: "Run after", cls: "hide-narrow", cell: (i) => timeCell(i.run_after) },
            { title: "Started", cell: (i) => timeCell(i.started_at) },
            { title: "Ended", cell: (i) => timeCell(i.completed_at) },
            { title: "Last error", cls: "error-text hide-narrow", cell: (i) => i.last_error || "" },
          ],
          page.items,
          `No ${itemsPage.status} items.`,
        ),
        page.items.length || itemsPage.cursors.length > 1 ? pager(itemsPage, page.next_after, () => loadItems().catch(report)) : null,
      );
    }

    /** The finest bucket that keeps the chart under MAX_BARS bars. */
    function bucketFor(b) {
      const end = b.finished_at ? new Date(b.finished_at).getTime() : Date.now();
      const life = Math.max(0, end - new Date(b.created_at).getTime());
      return BUCKETS.find((s) => life / (s * 1000) <= MAX_BARS) || BUCKETS[BUCKETS.length - 1];
    }

    async function loadTimeline() {
      const bucket = bucketFor(batch);
      let query = `bucket_seconds=${bucket}`;
      if (bucket !== timeline.bucket) {
        timeline.bucket = bucket;
        timeline.points = new Map();
      } else if (timeline.points.size) {
        // Only what is new: the last bucket (it may have grown) and after.
        const last = [...timeline.points.keys()].pop();
        query += `&since=${enc(last)}`;
      }
      const t = await api(`/batches/${enc(id)}/timeline?${query}`);
      for (const p of t.points) timeline.points.set(p.at, p);
      if (!timeline.from) timeline.from = t.from;
      timeline.to = t.to;
      drawChart();
    }

    function drawChart() {
      const points = [...timeline.points.values()];
      const caption = h(
        "p",
        { class: "muted" },
        `Items ended per minute, in ${timeline.bucket}-second buckets, from the invocation summaries.`,
      );
      if (!points.length) {
        replace(chart, h("p", { class: "empty" }, "No items have ended yet."), caption);
        return;
      }
      const W = 720, H = 210, L = 48, R = 10, T = 12, B = 26;
      const bucketMs = timeline.bucket * 1000;
      const from = new Date(timeline.from).getTime();
      const to = Math.max(new Date(timeline.to).getTime(), from + bucketMs, new Date(points[points.length - 1].at).getTime() + bucketMs);
      const perMin = (n) => (n * 60) / timeline.bucket;
      const top = niceCeil(Math.max(...points.map((p) => perMin(p.completed + p.failed)), 1));
      const x = (ms) => L + ((ms - from) / (to - from)) * (W - L - R);
      const y = (v) => T + (1 - v / top) * (H - T - B);
      const width = Math.max(2, x(from + bucketMs) - x(from) - 1);
      const root = svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "Items ended per minute over time" });
      for (const v of [0, top / 2, top]) {
        root.append(svg("line", { class: v ? "grid" : "axis", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
        root.append(svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end" }, numberFormat.format(v)));
      }
      for (const p of points) {
        const at = new Date(p.at).getTime();
        const g = svg("g", { class: "point", "data-at": p.at });
        const done = perMin(p.completed);
        const bad = perMin(p.failed);
        g.append(svg("rect", { class: "bar-completed", x: x(at), y: y(done), width, height: Math.max(0, y(0) - y(done)) }));
        g.append(svg("rect", { class: "bar-failed", x: x(at), y: y(done + bad), width, height: Math.max(0, y(done) - y(done + bad)) }));
        g.append(svg("title", {}, `${time(p.at)}: ${num(p.completed)} completed, ${num(p.failed)} failed (${numberFormat.format(perMin(p.completed + p.failed))}/min)`));
        root.append(g);
      }
      root.append(svg("text", { x: L, y: H - 8 }, time(new Date(from).toISOString())));
      root.append(svg("text", { x: W - R, y: H - 8, "text-anchor": "end" }, time(new Date(to).toISOString())));
      const key = h(
        "div",
        { class: "legend" },
        h("span", { class: "key" }, h("span", { class: "swatch completed" }), "completed"),
        h("span", { class: "key" }, h("span", { class: "swatch failed" }), "failed"),
      );
      replace(chart, root, key, caption);
    }

    function drawHead(b) {
      replace(
        head,
        h("a", { class: "back", href: "#/" }, "← Batches"),
        h("div", { class: "batch-head" }, h("h1", { class: "batch-key" }, b.key), badge(b.status)),
        h("p", { class: "muted" }, "id ", h("span", { class: "mono" }, b.id)),
      );
      const end = b.finished_at ? new Date(b.finished_at).getTime() : Date.now();
      const stats = [
        ["Total", num(b.total)],
        ["Completed", num(b.completed)],
        ["Failed", num(b.failed)],
        ["Processing", num(b.processing)],
        ["Pending", num(b.pending)],
        ["Done", `${b.percent}%`],
        // A finished batch has no current rate; its average says how it went.
        b.status === "running" ? ["Rate", rate(b)] : ["Average rate", averageRate(b, end)],
        ["ETA", eta(b)],
        ["Created", time(b.created_at)],
        [b.finished_at ? "Took" : "Running for", duration(end - new Date(b.created_at).getTime())],
      ];
      replace(
        progress,
        progressBar(b),
        h(
          "div",
          { class: "stats" },
          stats.map(([label, value]) => h("div", { class: "stat" }, h("div", { class: "label" }, label), h("div", { class: "value", "data-stat": label.toLowerCase() }, value))),
        ),
      );
    }

    return {
      nav: "batches",
      root: h(
        "div",
        {},
        head,
        h("section", { class: "panel" }, progress),
        actions,
        panel("Throughput", chart),
        panel("Failed items", failed),
        panel("Items by status", items),
      ),
      async refresh() {
        batch = await api(`/batches/${enc(id)}`);
        drawHead(batch);
        drawTabs();
        const loads = [loadTimeline()];
        const failedNow = batch.failed;
        if (failedShown !== failedNow) loads.push(loadFailed().then(() => (failedShown = failedNow)));
        if (!itemsShown) loads.push(loadItems().then(() => (itemsShown = true)));
        await Promise.all(loads);
      },
    };
  }

  /** Recent scheduled invocations (ticks). */
  function invocationsView() {
    const body = h("div", {});
    return {
      nav: "invocations",
      root: h("div", {}, h("div", { class: "panel-head" }, h("h1", {}, "Invocations"), h("span", { class: "muted" }, "recent ticks, newest first")), h("section", { class: "panel" }, body)),
      async refresh() {
        const { invocations } = await api("/invocations?limit=50");
        replace(
          body,
          table(
            [
              { title: "Started", cell: (i) => timeCell(i.started_at) },
              { title: "Trigger", cls: "hide-narrow", cell: (i) => i.trigger },
              { title: "Elapsed", cls: "num hide-narrow", cell: (i) => `${num(i.elapsed_ms)} ms` },
              { title: "Claimed", cls: "num", cell: (i) => num(i.claimed) },
              { title: "Completed", cls: "num", cell: (i) => num(i.completed) },
              { title: "Retried", cls: "num hide-narrow", cell: (i) => num(i.retried) },
              { title: "Failed", cls: "num", cell: (i) => num(i.failed) },
              { title: "Lost", cls: "num hide-narrow", cell: (i) => num(i.lost_leases) },
              { title: "Budget used", cls: "num", cell: (i) => budgetUsed(i) },
              { title: "Stop reason", cell: (i) => i.stop_reason },
            ],
            invocations,
            "No invocations yet. Each cron tick records one.",
          ),
        );
      },
    };
  }

  function averageRate(b, end) {
    const minutes = (end - new Date(b.created_at).getTime()) / 60000;
    return minutes > 0 ? `${numberFormat.format(Math.round(((b.completed + b.failed) / minutes) * 10) / 10)}/min` : "—";
  }

  function budgetUsed(i) {
    const share = i.subrequest_budget ? i.subrequests / i.subrequest_budget : 0;
    const meter = h("span", { class: share > 0.9 ? "usage high" : "usage" }, h("span", {}));
    meter.firstChild.style.width = `${Math.min(100, share * 100)}%`;
    return [`${num(i.subrequests)} / ${num(i.subrequest_budget)}`, meter];
  }

  /** Schedules (issue 10): only reachable once the Worker has the routes. */
  function schedulesView() {
    const body = h("div", {});
    return {
      nav: "schedules",
      root: h("div", {}, h("div", { class: "panel-head" }, h("h1", {}, "Schedules")), h("section", { class: "panel" }, body)),
      async refresh() {
        const { schedules } = await api("/schedules");
        replace(
          body,
          table(
            [
              { title: "Schedule", cell: (s) => h("span", { class: "mono" }, s.id) },
              { title: "When", cell: (s) => s.cron || (s.every_seconds ? `every ${duration(s.every_seconds * 1000)}` : s.at) || "—" },
              { title: "Time zone", cls: "hide-narrow", cell: (s) => s.timezone || "UTC" },
              { title: "Next fire", cell: (s) => timeCell(s.next_fire_at) },
              { title: "Last fired", cls: "hide-narrow", cell: (s) => timeCell(s.last_fired_at) },
            ],
            schedules || [],
            "No schedules.",
          ),
        );
      },
    };
  }

  // ---------------------------------------------------------------- routing and polling

  let view = null;
  let timer = null;
  let generation = 0;

  function viewFor(hash) {
    const parts = hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
    if (parts[0] === "batches" && parts[1]) return batchView(parts[1]);
    if (parts[0] === "invocations") return invocationsView();
    if (parts[0] === "schedules" && features.has("schedules")) return schedulesView();
    return batchesView();
  }

  function show() {
    view = viewFor(location.hash);
    for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view.nav);
    replace($("view"), view.root);
    $("view").hidden = false;
    refreshNow();
  }

  function setLive(text, cls) {
    const live = $("live");
    live.hidden = false;
    live.className = `live ${cls || ""}`;
    live.textContent = text;
  }

  function report(e) {
    if (e instanceof Unauthorized) {
      signOut("Your token is no longer accepted. Sign in again.");
      return;
    }
    $("error").textContent = `Could not refresh: ${e.message}`;
    $("error").hidden = false;
    setLive("stale: last refresh failed", "stale");
  }

  /** Refresh the view now, then every REFRESH_MS while the tab is visible. */
  async function refreshNow() {
    clearTimeout(timer);
    timer = null;
    if (!view || document.hidden) return;
    const mine = ++generation;
    try {
      await view.refresh();
      if (mine !== generation) return;
      $("error").hidden = true;
      setLive(`live · updated ${time(new Date().toISOString())}`);
    } catch (e) {
      if (mine !== generation) return;
      report(e);
    }
    if (mine === generation && view && !document.hidden && sessionStorage.getItem(TOKEN_KEY)) {
      timer = setTimeout(refreshNow, REFRESH_MS);
    }
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) {
      clearTimeout(timer);
      timer = null;
      generation++;
      if (view) setLive("paused while the tab is hidden", "paused");
    } else if (view) {
      refreshNow();
    }
  });

  // ---------------------------------------------------------------- sign-in

  function signedIn() {
    $("signin").hidden = true;
    $("nav").hidden = false;
    $("signout").hidden = false;
    for (const el of document.querySelectorAll("[data-feature]")) el.hidden = !features.has(el.dataset.feature);
    show();
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    clearTimeout(timer);
    timer = null;
    generation++;
    view = null;
    $("view").replaceChildren();
    $("view").hidden = true;
    $("nav").hidden = true;
    $("signout").hidden = true;
    $("live").hidden = true;
    $("error").hidden = true;
    $("signin").hidden = false;
    const err = $("signin-error");
    err.textContent = message || "";
    err.hidden = !message;
    $("token").focus();
  }

  $("signin-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    const button = $("signin-button");
    button.disabled = true;
    $("signin-error").hidden = true;
    try {
      await request("/batches?limit=1", token);
      sessionStorage.setItem(TOKEN_KEY, token);
      $("token").value = "";
      signedIn();
    } catch (e) {
      const message =
        e instanceof Unauthorized
          ? "That token was not accepted (401 unauthorized). Use the Worker's ADMIN_TOKEN."
          : `Could not reach the Worker: ${e.message}`;
      $("signin-error").textContent = message;
      $("signin-error").hidden = false;
    } finally {
      button.disabled = false;
    }
  });

  $("signout").addEventListener("click", () => signOut(""));
  window.addEventListener("hashchange", () => {
    if (sessionStorage.getItem(TOKEN_KEY)) show();
  });

  function niceCeil(v) {
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  if (sessionStorage.getItem(TOKEN_KEY)) signedIn();
  else signOut("");
})();
