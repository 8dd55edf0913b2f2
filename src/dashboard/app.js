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
  const SCHEDULE_PAGE = 100;
  const LIMIT_PAGE = 100;
  const SVG_NS = "http://www.w3.org/2000/svg";
  // Bar order: what has ended first, then what is still to come.
  const BAR = ["completed", "failed", "cancelled", "processing", "pending"];
  // Timeline buckets the page may ask for (seconds), finest first.
  const BUCKETS = [10, 30, 60, 300, 900, 3600];
  const MAX_BARS = 120;

  // What the Worker tells the page (filled in by src/api/page.rs): the optional
  // views its routes enable, the batch statuses each batch action changes (its
  // transition table), and the item statuses. Never a copy kept here.
  const metaWords = (name) => {
    const meta = document.querySelector(`meta[name="${name}"]`);
    return ((meta && meta.content) || "").split(/\s+/).filter(Boolean);
  };
  const features = new Set(metaWords("cron-fanout-features"));
  const ACTION_FROM = new Map(
    metaWords("cron-fanout-actions").map((word) => {
      const [name, from] = word.split(":");
      return [name, new Set((from || "").split(",").filter(Boolean))];
    }),
  );
  const ITEM_STATUSES = metaWords("cron-fanout-item-statuses");
  const $ = (id) => document.getElementById(id);
  const numberFormat = new Intl.NumberFormat();
  const viewerZone = Intl.DateTimeFormat().resolvedOptions().timeZone || "your time zone";

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

  /** Appends `children`, arrays of them at any depth flattened. */
  function append(el, children) {
    for (const c of children.flat(Infinity)) {
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

  /** An instant in the viewer's time zone: the time, with the date unless today. */
  function time(iso) {
    if (!iso) return "—";
    const d = new Date(iso);
    const now = new Date();
    const t = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
    if (now.toDateString() === d.toDateString()) return t;
    const year = d.getFullYear() === now.getFullYear() ? undefined : "numeric";
    return `${d.toLocaleDateString([], { year, month: "short", day: "numeric" })} ${t}`;
  }

  /** The UTC instant, for a title: `2026-11-22 08:00:00.000 UTC`. */
  const utc = (iso) => (iso ? `${iso.replace("T", " ").replace(/Z$/, "")} UTC` : null);

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
    return h("time", { datetime: iso || null, title: utc(iso) }, time(iso));
  }

  function eta(batch) {
    if (batch.status === "paused") return "paused";
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

  /** An error answer of the API: its status and `{"error": {code, message}}`. */
  class ApiError extends Error {
    constructor(status, error) {
      super(error ? `${error.code}: ${error.message}` : `HTTP ${status}`);
      this.status = status;
    }
  }

  /** `GET path`, or `POST` with a JSON body: the answer's JSON. */
  async function request(path, token, { method = "GET", body } = {}) {
    const headers = { Authorization: `Bearer ${token}`, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
    if (res.status === 401) throw new Unauthorized("unauthorized");
    let answer = null;
    try {
      answer = await res.json();
    } catch (_) {
      answer = null;
    }
    if (!res.ok) throw new ApiError(res.status, answer && answer.error);
    return answer;
  }

  function api(path, options) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) return Promise.reject(new Unauthorized("signed out"));
    return request(path, token, options);
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

  /**
   * A table of `rows`. `detail(r)`, if given, may return what goes under a row
   * across the whole width (a multi item's receipts): one line of its own reads
   * at phone width, where a column of it would squeeze the others.
   */
  function table(columns, rows, empty, detail) {
    if (!rows.length) return h("p", { class: "empty" }, empty);
    const line = (r) => {
      const row = h("tr", {}, columns.map((c) => h("td", { class: c.cls || null, "data-col": c.key || null }, c.cell(r))));
      const more = detail ? detail(r) : null;
      if (!more) return [row];
      row.className = "has-detail";
      return [row, h("tr", { class: "detail" }, h("td", { colspan: columns.length }, more))];
    };
    return h(
      "div",
      { class: "table-wrap" },
      h(
        "table",
        {},
        h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.cls || null }, c.title)))),
        h("tbody", {}, rows.flatMap(line)),
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

  /**
   * Keeps the reads of one list in order: call it as a read starts; the function
   * it returns says, once the answer is in, whether no newer read of that list
   * has started since. Only then may the answer be drawn (a page turned, a tab
   * switched or a refresh after an action wins over a read started before it).
   */
  function newestOnly() {
    let started = 0;
    return () => {
      const mine = ++started;
      return () => mine === started;
    };
  }

  function replace(el, ...children) {
    el.replaceChildren();
    append(el, children);
  }

  /** A line under the header saying what the last action did (or why it could not). */
  function notice(text, isError) {
    const el = $("notice");
    el.textContent = text;
    el.className = isError ? "notice banner error" : "notice banner";
    el.hidden = !text;
  }

  // ---------------------------------------------------------------- delivery

  /**
   * Where a completion callback goes, as far as the page shows it: the origin
   * only. Many receivers carry their credential in the path or the query (chat
   * webhooks do), and a dashboard ends up on shared screens and screenshots; the
   * API gives the whole URL to whoever holds the admin token.
   */
  function callbackTarget(onFinish) {
    if (!onFinish || !onFinish.url) return null;
    try {
      const url = new URL(onFinish.url);
      return url.pathname === "/" && !url.search ? url.origin : `${url.origin}/…`;
    } catch (_) {
      return null;
    }
  }

  const tries = (n) => (n === 1 ? "1 attempt" : `${num(n)} attempts`);

  /** What a callback's state means for batch `b`, in words next to its badge. */
  function callbackMeaning(b, cb) {
    switch (cb.status) {
      case "delivered":
        return `after ${tries(cb.attempts)}; a later end (after a replay) calls back again`;
      case "failed":
        return `gave up after ${tries(cb.attempts)}; only a later end (after a replay) sends it again`;
      default:
        if (!b.finished_at) return "sent when the batch ends";
        return cb.attempts ? `${tries(cb.attempts)} so far, tried again with backoff` : "the batch ended: the next tick sends it";
    }
  }

  /**
   * The batch's completion callback: its state as a labelled badge,
   * what that means, where it goes and its last error; "none" without on_finish.
   */
  function callbackLine(b) {
    const label = h("span", { class: "label" }, "Completion callback");
    const cb = b.callback;
    if (!cb) return h("div", { class: "callback", id: "callback", "data-callback": "none" }, label, h("span", { class: "muted" }, "none"));
    const to = callbackTarget(b.on_finish);
    return h(
      "div",
      { class: "callback", id: "callback", "data-callback": cb.status, "data-attempts": cb.attempts },
      label,
      h("span", { class: `badge cb-${cb.status}` }, cb.status),
      h("span", { class: "meaning" }, callbackMeaning(b, cb)),
      to ? h("span", { class: "muted" }, "to ", h("span", { class: "mono", "data-callback-to": "", title: "path and query not shown: they may hold the receiver's secret" }, to)) : null,
      cb.last_error ? h("div", { class: "error-text", "data-callback-error": "" }, `last error: ${cb.last_error}`) : null,
    );
  }

  // A receipt's state in a sign as well as a colour (and its word).
  const RECEIPT_MARK = { delivered: "✓", pending: "…", failed: "✗" };

  /**
   * A multi item's receipts: each channel's name, state, and when it was
   * delivered or why it was not. Null for kinds without channels.
   */
  function receiptList(i) {
    const receipts = i.receipts;
    if (!receipts) return null;
    const names = Object.keys(receipts);
    if (!names.length) return h("p", { class: "receipts muted small" }, "channels: none tried yet");
    return h(
      "ul",
      { class: "receipts", "aria-label": `channels of ${i.subject_id}`, "data-receipts": i.id },
      names.map((name) => {
        const r = receipts[name];
        return h(
          "li",
          { class: `receipt ${r.status}`, "data-channel": name, "data-receipt": r.status },
          h("span", { class: "channel mono" }, name),
          h("span", { class: "state" }, `${RECEIPT_MARK[r.status] || ""} ${r.status}`),
          r.status === "delivered" ? timeCell(r.at) : h("span", { class: "error-text" }, r.error || ""),
        );
      }),
    );
  }

  /** The channels of a multi item that a retry does not send again. */
  function deliveredChannels(i) {
    return Object.entries(i.receipts || {})
      .filter(([, r]) => r.status === "delivered")
      .map(([name]) => name);
  }

  // ---------------------------------------------------------------- waiting on

  // What holds a pending item, in words: the API's `waiting_on` reasons in
  // their order of precedence, and the items the batch's counts did not read.
  const REASON_WORDS = {
    batch_paused: "batch paused",
    backoff: "backoff",
    paused: "receiver's pause",
    concurrency: "concurrency limit",
    rate: "rate limit",
    turn: "turn (higher priority first)",
    due: "due (next claim)",
    not_read: "not read (past the batch's head)",
  };

  /** A key's state as a reason names it: paused until, n of m in flight, next token. */
  function keyState(w) {
    switch (w.reason) {
      case "paused":
        return ["paused until ", timeCell(w.until)];
      case "concurrency":
        return `${num(w.in_flight)} of ${num(w.concurrency)} in flight`;
      case "rate":
        return ["next token ", timeCell(w.next_token_at), w.learned ? " (learned rate)" : null];
      default:
        return null;
    }
  }

  /** What holds a pending item (its `waiting_on`): the reason, and what it names. */
  function waitingCell(i) {
    const w = i.waiting_on;
    if (!w) return "";
    let what = null;
    if (w.reason === "backoff") what = ["until ", timeCell(w.until)];
    else if (w.key) what = [h("span", { class: "mono" }, w.key), " ", keyState(w)];
    else if (w.reason === "turn") what = `${num(w.batches)} ${w.batches === 1 ? "batch" : "batches"} of priority ${w.priority} first`;
    return h(
      "span",
      { class: "waiting", "data-waiting": w.reason, "data-waiting-key": w.key || null },
      h("b", {}, REASON_WORDS[w.reason] || w.reason),
      what ? [": ", what] : null,
      w.word ? h("div", { class: "error-text small", "data-word": "" }, `receiver: ${w.word}`) : null,
    );
  }

  /**
   * A batch's pending items by what holds them (`waiting_on`, its non-zero
   * counts) and the keys holding most (`waiting_keys`), each with its state and
   * a paused key with the receiver's word.
   */
  function waitingOn(b) {
    const counts = b.waiting_on || {};
    const reasons = Object.keys(REASON_WORDS).filter((r) => counts[r] > 0);
    const keys = b.waiting_keys || [];
    return [
      h(
        "ul",
        { class: "reasons", "aria-label": "pending items by what holds them" },
        reasons.map((r) =>
          h("li", { "data-reason": r }, h("b", { class: "num", "data-waiting-count": r }, num(counts[r])), ` ${REASON_WORDS[r]}`),
        ),
      ),
      keys.length
        ? table(
            [
              { key: "key", title: "Key", cell: (k) => h("a", { class: "mono", href: "#/limits", "data-waiting-key": k.key }, k.key) },
              { key: "reason", title: "Holds them by", cell: (k) => h("span", { "data-reason": k.reason }, REASON_WORDS[k.reason]) },
              {
                key: "state",
                title: "State",
                cell: (k) => [keyState(k), k.word ? h("div", { class: "error-text small", "data-word": "" }, `receiver: ${k.word}`) : null],
              },
              { key: "items", title: "Items", cls: "num", cell: (k) => num(k.items) },
            ],
            keys,
            "",
          )
        : h("p", { class: "muted small" }, "No limit key holds its pending items."),
    ];
  }

  // ---------------------------------------------------------------- batch actions

  // Batch control, in button order. Where each may be pressed comes
  // from the Worker (ACTION_FROM); this says how to ask for it and what it does.
  const ACTIONS = [
    {
      name: "pause",
      label: "Pause",
      leadsTo: "paused",
      explain: (b) =>
        `Nothing more of it is claimed until it is resumed: its ${num(b.pending)} pending items wait. ` +
        `Items already in flight (${num(b.processing)}) finish and commit.`,
      done: (b) => `Paused ${b.key}.`,
    },
    {
      name: "resume",
      label: "Resume",
      leadsTo: "running",
      explain: (b) => `Its ${num(b.pending)} pending items are claimed again from the next tick.`,
      done: (b) => `Resumed ${b.key}.`,
    },
    {
      name: "cancel",
      label: "Cancel batch",
      leadsTo: "cancelled",
      danger: true,
      explain: (b) =>
        `Its ${num(b.pending)} pending items become cancelled and never run; items in flight ` +
        `(${num(b.processing)}) finish and commit. This cannot be undone.`,
      done: (b) => `Cancelled ${b.key}: ${num(b.cancelled)} items cancelled.`,
    },
    {
      name: "retry",
      label: "Retry failed",
      body: { status: "failed" },
      needs: (b) => (b.failed > 0 ? null : "no failed items"),
      explain: (b) =>
        `Its ${num(b.failed)} failed items go back to pending, due now, each with a fresh allowance ` +
        `of attempts; their last error stays visible until they run again.` +
        (b.status === "finished" ? " The batch runs again." : "") +
        (b.status === "paused" ? " The batch stays paused until it is resumed." : ""),
      done: (b, answer) => `Requeued ${num(answer.requeued)} failed items of ${b.key}.`,
    },
  ].filter((a) => ACTION_FROM.has(a.name));

  /** Why `action` cannot be pressed for batch `b` now, or null when it can. */
  function whyNot(action, b) {
    if (!ACTION_FROM.get(action.name).has(b.status)) {
      return action.leadsTo === b.status ? `already ${b.status}` : `not possible: the batch is ${b.status}`;
    }
    return action.needs ? action.needs(b) : null;
  }

  let confirming = null;

  /**
   * Asks in the modal dialog before `run` does anything. A refusal (a 4xx, e.g.
   * a 409 because the batch changed since the page last read it) is shown in the
   * dialog and the view reloads behind it.
   */
  function askFirst({ title, text, yes, danger, run }) {
    const dialog = $("confirm");
    $("confirm-title").textContent = title;
    $("confirm-text").textContent = text;
    $("confirm-error").hidden = true;
    $("confirm-error").textContent = "";
    const ok = $("confirm-yes");
    ok.textContent = yes;
    ok.className = danger ? "danger" : "";
    ok.disabled = false;
    $("confirm-no").textContent = "Keep it";
    confirming = { run, busy: false };
    dialog.showModal();
    // The harmless choice has the focus: Enter does not cancel a batch.
    $("confirm-no").focus();
  }

  $("confirm-yes").addEventListener("click", async () => {
    const asked = confirming;
    if (!asked || asked.busy) return;
    const ok = $("confirm-yes");
    asked.busy = true;
    ok.disabled = true;
    $("confirm-no").disabled = true;
    try {
      await asked.run();
      $("confirm").close();
    } catch (e) {
      if (e instanceof Unauthorized) {
        $("confirm").close();
        report(e);
        return;
      }
      $("confirm-error").textContent = `Not done: ${e.message}`;
      $("confirm-error").hidden = false;
      $("confirm-no").textContent = "Close";
      notice(`Not done: ${e.message}`, true);
      // The batch changed under the page: read it and its lists again.
      refreshNow({ batch: null });
    } finally {
      asked.busy = false;
      $("confirm-no").disabled = false;
    }
  });
  $("confirm-no").addEventListener("click", () => $("confirm").close());
  // Escape closes the dialog, except while its request is on its way.
  $("confirm").addEventListener("cancel", (event) => {
    if (confirming && confirming.busy) event.preventDefault();
  });
  $("confirm").addEventListener("close", () => (confirming = null));

  /**
   * The buttons of the batch actions for `b`. `compact` (the list) shows only
   * what can be pressed now; the batch view shows each, disabled with the reason.
   */
  function actionButtons(b, { compact }) {
    return ACTIONS.map((a) => {
      const why = whyNot(a, b);
      if (compact && why) return null;
      return h(
        "button",
        {
          type: "button",
          class: [a.danger ? "danger" : "secondary", compact ? "small" : ""].join(" ").trim(),
          "data-action": a.name,
          disabled: Boolean(why),
          title: why ? `${a.label}: ${why}` : null,
          on: { click: () => askAction(a, b) },
        },
        a.label,
      );
    });
  }

  function askAction(a, b) {
    askFirst({
      title: `${a.label}: ${b.key}?`,
      text: a.explain(b),
      yes: a.name === "retry" ? `Retry ${num(b.failed)} failed items` : `${a.label.replace(/ batch$/, "")} batch`,
      danger: a.danger,
      run: async () => {
        const answer = await api(`/batches/${enc(b.id)}/${a.name}`, { method: "POST", body: a.body });
        // Pause, resume and cancel answer with the batch after them; a replay
        // with {"requeued": n}, so the refresh reads the batch.
        const after = answer && answer.id ? answer : null;
        notice(a.done(after || b, answer));
        await refreshNow({ batch: after });
      },
    });
  }

  /** Unavailable actions and why, as text (a disabled button's title is not read on touch screens). */
  function unavailable(b) {
    const why = ACTIONS.map((a) => [a, whyNot(a, b)]).filter(([, w]) => w);
    if (!why.length) return "";
    if (why.length === ACTIONS.length) return `Nothing to do: the batch is ${b.status}${b.failed ? "" : " and has no failed items"}.`;
    const byReason = new Map();
    for (const [a, w] of why) byReason.set(w, [...(byReason.get(w) || []), a.label]);
    return `Unavailable now: ${[...byReason].map(([w, labels]) => `${labels.join(", ")} (${w})`).join("; ")}.`;
  }

  // ---------------------------------------------------------------- views

  /** Batches, newest first, each with its bar, rate and ETA. */
  function batchesView() {
    const list = h("div", { id: "batches" });
    return {
      nav: "batches",
      root: h("div", {}, h("div", { class: "panel-head" }, h("h1", {}, "Batches"), h("span", { class: "muted" }, "newest first")), list),
      async refresh(fresh) {
        const { batches } = await api("/batches?limit=50");
        if (!fresh()) return;
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
                statusFigures(b),
              ),
              ACTIONS.length ? h("div", { class: "card-actions" }, actionButtons(b, { compact: true })) : null,
            ),
          ),
        );
      },
    };
  }

  /** What a batch's status adds to its figures in the list. */
  function statusFigures(b) {
    const figure = (label, ...value) => h("span", {}, h("span", { class: "label" }, label), value);
    switch (b.status) {
      case "running":
        return [figure("rate", h("b", { class: "num", "data-rate": "" }, rate(b))), figure("ETA", h("b", { "data-eta": "" }, eta(b)))];
      case "paused":
        return figure("paused", `nothing is claimed until it is resumed; ${num(b.pending)} pending`);
      case "cancelled":
        return [
          figure("cancelled", h("b", { class: "num" }, num(b.cancelled))),
          b.finished_at ? figure("ended", timeCell(b.finished_at)) : figure("ending", `${num(b.processing)} in flight`),
        ];
      default:
        return figure("finished", timeCell(b.finished_at));
    }
  }

  /**
   * One batch: counts and its completion callback, actions, throughput chart,
   * failed items, items by status (a multi item with its channels' receipts).
   */
  function batchView(id) {
    const head = h("div", {});
    const progress = h("div", {});
    const chart = h("div", { id: "throughput" });
    const failed = h("div", { id: "failed-items" });
    const waiting = h("div", { id: "waiting-on" });
    // Shown while the batch has pending items.
    const waitingPanel = h(
      "section",
      { class: "panel", hidden: true },
      h("div", { class: "panel-head" }, h("h2", {}, "Waiting on"), h("span", { class: "muted" }, "what holds its pending items now")),
      waiting,
    );
    const tabs = h("div", { class: "tabs", role: "group", "aria-label": "status" });
    const itemRows = h("div", {});
    const items = h("div", { id: "items" }, tabs, itemRows);
    // What the failed list was drawn for (failedKey); whether the items list has
    // been drawn since the view opened or the last action.
    let failedShown = null;
    let itemsShown = false;
    const failedReads = newestOnly();
    const itemsReads = newestOnly();
    const failedPage = { cursors: [""] };
    // status null: the view picks the first status with items when it reads the
    // list (see openingStatus) until the operator picks a tab.
    const itemsPage = { cursors: [""], status: null, chosen: false };
    const timeline = { bucket: 0, points: new Map(), from: null, to: null };
    let batch = null;

    // Batch control: pause, resume, cancel, retry failed, each asked
    // first. Shown only once the Worker has those routes.
    const control = features.has("batch-control") && ACTIONS.length > 0;
    const actions = h("div", {});
    const actionsPanel = control
      ? h("section", { class: "panel", id: "batch-actions", "data-feature": "batch-control" }, h("h2", {}, "Actions"), actions)
      : null;

    /** Whether a failed item of batch `b` may be retried now (its own button). */
    const itemsRetryable = (b) => control && ACTION_FROM.has("retry") && ACTION_FROM.get("retry").has(b.status);
    /** The failed list is read again when this changes: the failed count, or whether they can be retried. */
    const failedKey = (b) => `${b.failed} ${itemsRetryable(b)}`;
    /** Draws what a read returns now, for the operator's paging and tabs. */
    const drawNow = (read) => read.then((draw) => draw()).catch(report);

    function askItemRetry(i) {
      askFirst({
        title: `Retry ${i.subject_id}?`,
        text:
          `Item ${i.id} goes back to pending, due now, with a fresh allowance of attempts ` +
          `(${i.attempt} of ${i.max_attempts} used). Its last error stays visible until it runs again.` +
          (deliveredChannels(i).length ? ` Its delivered channels (${deliveredChannels(i).join(", ")}) are not sent again.` : ""),
        yes: "Retry item",
        run: async () => {
          const r = await api(`/items/${enc(String(i.id))}/retry`, { method: "POST" });
          notice(r.requeued ? `Requeued ${i.subject_id} (item ${i.id}).` : `${i.subject_id} was already pending or in flight: nothing to do.`);
          await refreshNow({ batch: null });
        },
      });
    }

    /**
     * Reads a page of the failed items of batch `b` (as last read); returns what
     * draws it, if no newer read of the list has started by then.
     */
    async function readFailed(b) {
      const newest = failedReads();
      const after = failedPage.cursors[failedPage.cursors.length - 1];
      const page = await api(`/batches/${enc(id)}/items?status=failed&limit=${PAGE_SIZE}&after=${enc(after)}`);
      return () => {
        if (newest()) drawFailed(b, page);
      };
    }

    function drawFailed(b, page) {
      failedShown = failedKey(b);
      const retry = itemsRetryable(b)
        ? [
            {
              title: "Retry",
              cls: "num",
              cell: (i) =>
                h("button", { type: "button", class: "small secondary", "data-retry-item": i.id, on: { click: () => askItemRetry(i) } }, "Retry"),
            },
          ]
        : [];
      replace(
        failed,
        table(
          [
            { title: "Subject", cell: (i) => h("span", { class: "mono" }, i.subject_id) },
            { title: "Attempts", cls: "num", cell: (i) => `${i.attempt}/${i.max_attempts}` },
            { title: "Last error", cls: "error-text", cell: (i) => i.last_error || "—" },
            { title: "Ended", cls: "hide-narrow", cell: (i) => timeCell(i.completed_at) },
            ...retry,
          ],
          page.items,
          "No failed items.",
          receiptList,
        ),
        page.items.length || failedPage.cursors.length > 1 ? pager(failedPage, page.next_after, () => drawNow(readFailed(batch))) : null,
      );
    }

    // The item lists are not polled: a page of a status other than failed walks
    // the batch's items in subject order (there is no index by status; one would
    // cost a written row per item), so on a big batch with few matches it reads
    // up to 10,000 rows. They load when the view opens, when the operator pages, switches
    // tab or reloads, after an action, and (failed items, indexed) when the failed
    // count changes.
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
                  itemsPage.chosen = true;
                  itemsPage.cursors = [""];
                  drawTabs();
                  drawNow(readItems(batch));
                },
              },
            },
            `${s} (${num(batch ? batch[s] : null)})`,
          ),
        ),
        h("button", { type: "button", class: "link", on: { click: () => drawNow(readItems(null)) } }, "Reload"),
      );
    }

    /**
     * The tab the list opens on for batch `b`: the first status with items. A
     * status whose count is 0 is never read unasked: its page would walk the
     * whole batch to find nothing (a finished million-item batch's `pending`).
     */
    function openingStatus(b) {
      return ITEM_STATUSES.find((s) => b[s] > 0) || ITEM_STATUSES[0];
    }

    /**
     * Reads a page of the items tab shown (for batch `b`, as last read); returns
     * what draws it (if still the newest read). A status `b` counts none of is
     * drawn empty without a read; Reload reads it again with fresh counts.
     */
    async function readItems(b) {
      const newest = itemsReads();
      if (!itemsPage.chosen && b) itemsPage.status = openingStatus(b);
      const status = itemsPage.status;
      const after = itemsPage.cursors[itemsPage.cursors.length - 1];
      const page =
        b && b[status] === 0 && after === ""
          ? { items: [], next_after: null }
          : await api(`/batches/${enc(id)}/items?status=${status}&limit=${PAGE_SIZE}&after=${enc(after)}`);
      return () => {
        if (newest()) drawItems(status, page);
      };
    }

    function drawItems(status, page) {
      itemsShown = true;
      // A page stops walking a big batch after 10,000 items: it may hold fewer
      // than PAGE_SIZE items, even none, and still have a next page.
      const empty = page.next_after ? `No ${status} items in this part of the batch: Next reads on.` : `No ${status} items.`;
      replace(
        itemRows,
        table(
          [
            { key: "subject", title: "Subject", cell: (i) => h("span", { class: "mono" }, i.subject_id) },
            ...(status === "pending" ? [{ key: "waiting", title: "Waiting on", cell: waitingCell }] : []),
            { title: "Attempt", cls: "num", cell: (i) => `${i.attempt}/${i.max_attempts}` },
            { title: "Run after", cls: "hide-narrow", cell: (i) => timeCell(i.run_after) },
            { title: "Started", cell: (i) => timeCell(i.started_at) },
            { title: "Ended", cell: (i) => timeCell(i.completed_at) },
            { title: "Last error", cls: "error-text hide-narrow", cell: (i) => i.last_error || "" },
          ],
          page.items,
          empty,
          receiptList,
        ),
        page.items.length || page.next_after || itemsPage.cursors.length > 1
          ? pager(itemsPage, page.next_after, () => drawNow(readItems(null)))
          : null,
      );
    }

    /** The finest bucket that keeps the chart under MAX_BARS bars. */
    function bucketFor(b) {
      const end = b.finished_at ? new Date(b.finished_at).getTime() : Date.now();
      const life = Math.max(0, end - new Date(b.created_at).getTime());
      return BUCKETS.find((s) => life / (s * 1000) <= MAX_BARS) || BUCKETS[BUCKETS.length - 1];
    }

    /** Reads the timeline of batch `b`; returns what merges it in and draws the chart. */
    async function readTimeline(b) {
      const bucket = bucketFor(b);
      let query = `bucket_seconds=${bucket}`;
      if (bucket === timeline.bucket && timeline.points.size) {
        // Only what is new: the last bucket (it may have grown) and after.
        const last = [...timeline.points.keys()].pop();
        query += `&since=${enc(last)}`;
      }
      const t = await api(`/batches/${enc(id)}/timeline?${query}`);
      return () => {
        if (bucket !== timeline.bucket) {
          timeline.bucket = bucket;
          timeline.points = new Map();
        }
        for (const p of t.points) timeline.points.set(p.at, p);
        if (!timeline.from) timeline.from = t.from;
        timeline.to = t.to;
        drawChart();
      };
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
        ["Cancelled", num(b.cancelled)],
        ["Processing", num(b.processing)],
        ["Pending", num(b.pending)],
        ["Done", `${b.percent}%`],
        // Claimed before batches of lower priority (-10 to 10; its schedule's when fired).
        ["Priority", String(b.priority ?? 0)],
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
        callbackLine(b),
      );
    }

    function drawActions(b) {
      if (!control) return;
      replace(
        actions,
        h("div", { class: "action-buttons" }, actionButtons(b, { compact: false })),
        h("p", { class: "muted hint", id: "actions-unavailable" }, unavailable(b)),
      );
    }

    /** Draws the batch's head, counts, what its pending items wait on, tabs and actions. */
    function paint(b) {
      batch = b;
      drawHead(b);
      waitingPanel.hidden = !b.pending || !b.waiting_on;
      if (!waitingPanel.hidden) replace(waiting, waitingOn(b));
      drawTabs();
      drawActions(b);
    }

    return {
      nav: "batches",
      root: h(
        "div",
        {},
        head,
        h("section", { class: "panel" }, progress),
        waitingPanel,
        actionsPanel,
        panel("Throughput", chart),
        panel("Failed items", failed),
        panel("Items by status", items),
      ),
      /**
       * After an action: both lists are read again by the next refresh, whatever
       * the counts say, and no read of them started before the action draws.
       */
      acted() {
        failedShown = null;
        itemsShown = false;
        failedReads();
        itemsReads();
      },
      /**
       * Reads the batch (or takes an action's answer, the batch after it), then
       * what it changed: the timeline, the failed items when their number or
       * whether they can be retried changed, the items tab when not yet shown
       * (both after an action: see `acted`). All is drawn together once every
       * answer is in, so the counts never disagree with the lists under them;
       * nothing is drawn if a newer refresh started meanwhile (one after an
       * action: its view is the newer one).
       */
      async refresh(fresh, action) {
        const b = action && action.batch ? action.batch : await api(`/batches/${enc(id)}`);
        if (!fresh()) return;
        const reads = [readTimeline(b)];
        if (failedShown !== failedKey(b)) reads.push(readFailed(b));
        if (!itemsShown) reads.push(readItems(b));
        const draws = await Promise.all(reads);
        if (!fresh()) return;
        paint(b);
        for (const draw of draws) draw();
      },
    };
  }

  /** Recent scheduled invocations (ticks). */
  function invocationsView() {
    const body = h("div", {});
    return {
      nav: "invocations",
      root: h("div", {}, h("div", { class: "panel-head" }, h("h1", {}, "Invocations"), h("span", { class: "muted" }, "recent ticks, newest first")), h("section", { class: "panel" }, body)),
      async refresh(fresh) {
        const { invocations } = await api("/invocations?limit=50");
        if (!fresh()) return;
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

  /** How often an `every_seconds` schedule fires, in words. */
  function every(seconds) {
    const units = [
      [86400, "day"],
      [3600, "hour"],
      [60, "minute"],
    ];
    for (const [size, name] of units) {
      if (seconds % size === 0) {
        const n = seconds / size;
        return n === 1 ? `every ${name}` : `every ${numberFormat.format(n)} ${name}s`;
      }
    }
    return `every ${numberFormat.format(seconds)} seconds`;
  }

  const kind = (s) => (s.cron ? "cron" : s.every_seconds ? "every" : "at");

  /** When a schedule fires; a cron with the zone it reads (intervals and one-offs are instants). */
  function when(s) {
    if (s.cron) {
      const zone = s.timezone === "subject" ? "each subject's own time zone" : s.timezone;
      return [h("code", { class: "cron" }, s.cron), h("div", { class: "muted small", "data-zone": "" }, zone)];
    }
    if (s.every_seconds) return every(s.every_seconds);
    return timeCell(s.at);
  }

  /** Schedules: only reachable once the Worker has the routes. Read-only. */
  function schedulesView() {
    const body = h("div", {});
    const page = { cursors: [""] };
    const load = async (fresh = () => true) => {
      const after = page.cursors[page.cursors.length - 1];
      const { schedules, next_after } = await api(`/schedules?limit=${SCHEDULE_PAGE}&after=${enc(after)}`);
      if (!fresh()) return;
      replace(
        body,
        table(
          [
            { key: "id", title: "Schedule", cell: (s) => h("span", { class: "mono", "data-schedule-id": s.id }, s.id) },
            // On a phone the kind shows in how "when" reads (a cron, "every …", a date).
            { key: "kind", title: "Kind", cls: "hide-narrow", cell: (s) => h("span", { class: "kind" }, kind(s)) },
            { key: "when", title: "When (time zone)", cell: when },
            { key: "group", title: "Group", cls: "hide-narrow", cell: (s) => (s.group === null || s.group === undefined ? h("span", { class: "muted" }, "all subjects") : h("span", { class: "mono" }, s.group)) },
            { key: "jitter", title: "Jitter", cls: "num hide-narrow", cell: (s) => (s.jitter_seconds ? `up to ${duration(s.jitter_seconds * 1000)}` : "none") },
            // What the batches it fires get: claimed before those of lower priority.
            { key: "priority", title: "Priority", cls: "num hide-narrow", cell: (s) => String(s.priority ?? 0) },
            { key: "enabled", title: "Enabled", cell: (s) => h("span", { class: `flag ${s.enabled ? "on" : "off"}` }, s.enabled ? "yes" : "no") },
            { key: "next", title: "Next fire", cell: (s) => (s.next_fire_at ? timeCell(s.next_fire_at) : "—") },
            // A schedule backing off after failed fires (0 failures: nothing shown).
            {
              key: "failures",
              title: "Failed fires",
              cell: (s) => (s.fire_failures ? h("span", { class: "flag off", "data-fire-failures": s.fire_failures }, `${s.fire_failures}, retry `, timeCell(s.retry_at)) : "—"),
            },
            { key: "last-fired", title: "Last fired", cls: "hide-narrow", cell: (s) => timeCell(s.last_fired_at) },
            {
              key: "last-batch",
              title: "Last batch",
              cell: (s) => (s.last_batch_id ? h("a", { class: "mono", href: `#/batches/${enc(s.last_batch_id)}`, title: s.last_batch_id }, s.last_batch_id.slice(0, 8)) : "—"),
            },
          ],
          schedules,
          "No schedules. PUT /schedules/{id} creates one.",
        ),
        schedules.length || page.cursors.length > 1 ? pager(page, next_after, () => load().catch(report)) : null,
      );
    };
    return {
      nav: "schedules",
      root: h(
        "div",
        {},
        h(
          "div",
          { class: "panel-head" },
          h("h1", {}, "Schedules"),
          h("span", { class: "muted", id: "schedules-zone" }, `times in ${viewerZone} (yours); hover one for its UTC instant`),
        ),
        h("section", { class: "panel", id: "schedules" }, body),
      ),
      refresh: load,
    };
  }

  /** A rate's window in words: `second`, `hour`, `5 minutes`, `90 seconds`. */
  function perWindow(seconds) {
    for (const [size, name] of [
      [86400, "day"],
      [3600, "hour"],
      [60, "minute"],
      [1, "second"],
    ]) {
      if (seconds % size === 0) {
        const n = seconds / size;
        return n === 1 ? name : `${numberFormat.format(n)} ${name}s`;
      }
    }
    return `${seconds} seconds`;
  }

  /** A limit as set, in words: `30 per second (burst 30) · 10 at once`. */
  function limitRule(l) {
    const parts = [];
    if (l.rate) parts.push(`${num(l.rate)} per ${perWindow(l.per_seconds)} (burst ${num(l.burst)})`);
    if (l.concurrency) parts.push(`${num(l.concurrency)} at once`);
    if (l.learned) parts.push(`learned ${learnedRate(l)}`);
    return parts.join(" · ");
  }

  /** In flight, against the concurrency when there is one. */
  const inFlight = (l) => (l.concurrency ? `${num(l.in_flight)} / ${num(l.concurrency)}` : num(l.in_flight));

  /** A rate's tokens against its burst; a partitioned limit's are per partition. */
  function tokensOf(l, burst) {
    if (l.tokens === null || l.tokens === undefined) return burst && l.partitioned ? "per partition" : "—";
    return `${num(l.tokens)} / ${num(burst)}`;
  }

  /** Waiting, counted among the first due items only: "1,000+" when it stopped there. */
  function waitingOf(l, capped) {
    if (!capped) return num(l.waiting);
    return h("span", { title: "counted among the first due items only, as /metrics counts them: more may wait" }, `${num(l.waiting)}+`);
  }

  /** Links to the batches a limit's keys hold (their items in flight or due). */
  function batchLinks(ids) {
    if (!ids || !ids.length) return h("span", { class: "muted" }, "—");
    return h(
      "span",
      { class: "batch-links" },
      ids.map((id) => h("a", { class: "mono", href: `#/batches/${enc(id)}`, title: id, "data-batch-link": id }, id.slice(0, 8))),
    );
  }

  /** A partitioned limit's busiest partitions, under its row. */
  function partitionList(l) {
    if (!l.partitioned) return null;
    if (!l.partitions || !l.partitions.length) return h("p", { class: "muted small" }, "partitions: none in use");
    return h(
      "ul",
      { class: "partitions", "aria-label": `busiest partitions of ${l.key}`, "data-partitions": l.key },
      l.partitions.map((p) =>
        h(
          "li",
          { "data-partition": p.key },
          h("span", { class: "mono" }, p.key),
          ` ${inFlight({ ...p, concurrency: l.concurrency })} in flight`,
          l.rate ? ` · ${tokensOf(p, l.burst)} tokens` : null,
          ` · ${num(p.waiting)} waiting`,
        ),
      ),
    );
  }

  /** A learned rate in words: `150 per minute`. */
  const learnedRate = (l) => `${num(l.learned_rate)} per ${perWindow(l.learned_per_seconds)}`;

  /** The keys whose receivers refused within the hour, with the rate each learned. */
  function learnedTable(learned) {
    return table(
      [
        { key: "key", title: "Key", cell: (l) => h("span", { class: "mono", "data-learned-key": l.key }, l.key) },
        { key: "learned-rate", title: "Learned rate", cell: learnedRate },
        { key: "refusals", title: "Refusals", cls: "num", cell: (l) => num(l.refusals) },
        { key: "last-refused", title: "Last refusal", cell: (l) => timeCell(l.last_refused_at) },
        { key: "paused-until", title: "Paused until", cell: (l) => (l.paused_until ? timeCell(l.paused_until) : "—") },
      ],
      learned,
      "No learned rates: no receiver refused in the last hour.",
    );
  }

  /** Limits: each limit with what it is using now, and the rates learned from
   * receivers' refusals. Read-only (PUT /limits/{key} sets limits). */
  function limitsView() {
    const body = h("div", {});
    const learnedBody = h("div", {});
    const page = { cursors: [""] };
    const load = async (fresh = () => true) => {
      const after = page.cursors[page.cursors.length - 1];
      const { limits, next_after, learned } = await api(`/limits?limit=${LIMIT_PAGE}&after=${enc(after)}`);
      if (!fresh()) return;
      replace(learnedBody, learnedTable(learned || []));
      replace(
        body,
        table(
          [
            { key: "key", title: "Key", cell: (l) => h("span", { class: "mono", "data-limit-key": l.key }, l.key) },
            { key: "rule", title: "Limit", cell: limitRule },
            { key: "in-flight", title: "In flight", cls: "num", cell: inFlight },
            { key: "tokens", title: "Tokens", cls: "num", cell: (l) => tokensOf(l, l.burst) },
            { key: "waiting", title: "Waiting", cls: "num", cell: (l) => waitingOf(l, l.waiting_capped) },
            { key: "batches", title: "Batches", cell: (l) => batchLinks(l.batches) },
          ],
          limits,
          "No limits. PUT /limits/{key} sets one.",
          partitionList,
        ),
        limits.length || page.cursors.length > 1 ? pager(page, next_after, () => load().catch(report)) : null,
      );
    };
    return {
      nav: "limits",
      root: h(
        "div",
        {},
        h(
          "div",
          { class: "panel-head" },
          h("h1", {}, "Limits"),
          h("span", { class: "muted" }, "items in flight, rate tokens and due items waiting, per key, and the batches they hold"),
        ),
        h("section", { class: "panel", id: "limits" }, body),
        h(
          "div",
          { class: "panel-head" },
          h("h2", {}, "Learned rates"),
          h("span", { class: "muted" }, "what receivers that refused took; the claim keeps each key under it (LEARN_LIMITS)"),
        ),
        h("section", { class: "panel", id: "learned" }, learnedBody),
      ),
      refresh: load,
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
    if (parts[0] === "limits" && features.has("limits")) return limitsView();
    return batchesView();
  }

  function show() {
    view = viewFor(location.hash);
    notice("");
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

  /**
   * Refresh the view now, then every REFRESH_MS while the tab is visible. After
   * an action, `action` is `{batch}`: the batch after it when its answer is one
   * (else null); the view then reads again every list the action may change.
   * Resolves once the view is drawn (or the refresh failed, or a newer one took
   * over), so an action's dialog can close on its result.
   */
  async function refreshNow(action) {
    clearTimeout(timer);
    timer = null;
    if (action && view && view.acted) view.acted();
    if (!view || document.hidden) return;
    const mine = ++generation;
    try {
      // A newer refresh (e.g. right after an action) makes this one's answers
      // stale: they were read before it, and are not drawn.
      await view.refresh(() => mine === generation, action);
      if (mine !== generation) return;
      $("error").hidden = true;
      setLive(`live · updated ${time(new Date().toISOString())}`);
    } catch (e) {
      if (mine !== generation) return;
      report(e);
    }
    if (mine === generation && view && !document.hidden && sessionStorage.getItem(TOKEN_KEY)) {
      timer = setTimeout(() => refreshNow(), REFRESH_MS);
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
    $("notice").hidden = true;
    if ($("confirm").open) $("confirm").close();
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
