// What every page of `pchronicle serve` shares: building the DOM, formats,
// URLs, fetching, the view being drawn and its polling, and the chrome
// around every page (nav, breadcrumbs, #where, #freshness, #json-twin).
// The scripts are classic ones sharing one namespace, window.PC: this one
// is loaded first, each page's script adds its page, app.js (last) picks
// the page the URL names.
//
// Everything shown comes from a warehouse whose writer may be hostile, so
// no markup is ever parsed: every node is made with createElement and
// every text set with textContent; links only ever point at our own pages
// or API, their parameters encoded by URLSearchParams.
'use strict';

(() => {
  const PC = (window.PC = window.PC || {});
  const POLL_MS = 5000;
  const FILTER_KEYS = ['where', 'since', 'until', 'file', 'contains'];
  const TITLES = { datasets: 'Datasets', runs: 'Runs', run: 'Run', compare: 'Compare', sql: 'SQL' };
  // Pages reached from the Runs page, shown under it.
  const UNDER_RUNS = new Set(['run', 'compare']);
  const SVG_NS = 'http://www.w3.org/2000/svg';

  // The token comes once, in the fragment of the URL the server printed
  // (`#token=…`, never sent to any server), and is kept in this origin's
  // localStorage: unlike a cookie, it is not sent to other servers of the
  // same host, and only this origin's scripts (ours: the CSP allows no
  // other) can read it. Every API call sends it as a Bearer header.
  const TOKEN_KEY = 'pchronicle-token';
  (function takeToken() {
    const found = /(?:^#|&)token=([^&]*)/.exec(location.hash);
    if (!found) return;
    try { localStorage.setItem(TOKEN_KEY, decodeURIComponent(found[1])); } catch (e) { /* kept nowhere */ }
    history.replaceState(history.state, '', location.pathname + location.search);
  })();
  const token = () => { try { return localStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; } };

  // ---------------------------------------------------------------- DOM

  const $ = (sel) => document.querySelector(sel);
  const arr = (x) => (Array.isArray(x) ? x : []);
  const isObj = (x) => x !== null && typeof x === 'object' && !Array.isArray(x);

  // Attributes go through setAttribute only; `text` sets textContent and
  // `on*` adds a listener. An href must be a path of this origin, so a
  // slip can never make a warehouse value into a link elsewhere.
  function setProps(node, props) {
    for (const [key, value] of Object.entries(props || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === 'text') node.textContent = String(value);
      else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
      else {
        if (key === 'href' && !/^\/(?!\/)/.test(value)) throw new Error('refused href ' + value);
        node.setAttribute(key, value === true ? '' : String(value));
      }
    }
  }

  function append(node, kids) {
    for (const kid of kids.flat(Infinity)) {
      if (kid === null || kid === undefined || kid === false) continue;
      node.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return node;
  }

  function h(tag, props, ...kids) {
    const node = document.createElement(tag);
    setProps(node, props);
    return append(node, kids);
  }

  function svg(tag, props, ...kids) {
    const node = document.createElementNS(SVG_NS, tag);
    setProps(node, props);
    return append(node, kids);
  }

  function clear(node) {
    while (node.firstChild) node.firstChild.remove();
    return node;
  }

  // ----------------------------------------------------------- formats

  // Characters a name may use to disguise itself (controls, bidirectional
  // overrides) are shown escaped, as the CLI does on a terminal.
  const DISGUISE = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
  const escape = (c) => '\\u{' + c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0') + '}';
  function visible(text) {
    return String(text).replace(DISGUISE, escape);
  }

  // Record text keeps its tabs and line breaks; the other controls and
  // bidirectional overrides are shown escaped, so a record cannot make
  // its own text (a URL, a command) read as something else.
  const TEXT_DISGUISE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
  const visibleText = (text) => String(text).replace(TEXT_DISGUISE, escape);

  // A name from the warehouse: isolated so its direction cannot leak,
  // clamped by CSS, whole in the tooltip.
  function nameNode(text, cls) {
    const shown = visible(text);
    return h('bdi', { class: 'name' + (cls ? ' ' + cls : ''), title: shown.length > 60 ? shown : null }, shown);
  }

  // Thousands separated by commas whatever the locale, so numbers read
  // (and compare in tests) the same everywhere.
  function fmtInt(n) {
    if (typeof n !== 'number' || !isFinite(n)) return '–';
    if (!Number.isInteger(n)) return String(n);
    return String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  }

  function fmtBytes(n) {
    if (typeof n !== 'number') return '';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i === 0 ? String(n) : n.toFixed(n < 10 ? 1 : 0)) + ' ' + units[i];
  }

  function fmtTs(ts) {
    return typeof ts === 'string' ? ts.replace('T', ' ') : '–';
  }

  function fmtRange(min, max) {
    if (typeof min !== 'string' && typeof max !== 'string') return '–';
    return min === max ? fmtTs(min) : fmtTs(min) + ' → ' + fmtTs(max);
  }

  function fmtDuration(s) {
    if (typeof s !== 'number' || !isFinite(s)) return '–';
    if (s < 1) return Math.round(s * 1000) + 'ms';
    if (s < 60) return Math.round(s) + 's';
    const parts = [[86400, 'd'], [3600, 'h'], [60, 'm'], [1, 's']];
    const out = [];
    let rest = Math.round(s);
    for (const [size, unit] of parts) {
      if (rest >= size || out.length) { out.push(Math.floor(rest / size) + unit); rest %= size; }
    }
    return out.slice(0, 2).join(' ');
  }

  // RFC 3339 with microseconds: Date.parse only promises milliseconds.
  function tsKey(ts) {
    if (typeof ts !== 'string') return null;
    const ms = Date.parse(ts.replace(/(\.\d{3})\d+/, '$1'));
    return isNaN(ms) ? null : ms;
  }

  function clockTime(date) {
    return [date.getHours(), date.getMinutes(), date.getSeconds()]
      .map((n) => String(n).padStart(2, '0')).join(':');
  }

  function pretty(value) {
    try { return JSON.stringify(value, null, 2) ?? String(value); } catch (e) { return String(value); }
  }

  // ------------------------------------------------------------ URLs

  function pathOf(params) {
    return (params.get('path') || '').replace(/^\/+|\/+$/g, '');
  }

  const joinPath = (base, name) => (base ? base + '/' + name : name);

  function onlyPath(path) {
    const p = new URLSearchParams();
    p.set('path', path);
    return p;
  }

  // The path and the non-empty filters of params: exactly what the API
  // takes (it refuses any parameter it does not know).
  function filtersOf(params) {
    const p = onlyPath(pathOf(params));
    for (const key of FILTER_KEYS) {
      for (const value of params.getAll(key)) if (value !== '') p.append(key, value);
    }
    return p;
  }

  const hasFilters = (params) => FILTER_KEYS.some((k) => params.getAll(k).some((v) => v !== ''));
  const pageHref = (page, params) => '/' + page + '?' + params.toString();
  const apiHref = (endpoint, params) => '/api/' + endpoint + '?' + params.toString();

  // A `--file` glob matching `text` literally (as the server's own).
  const globLiteral = (text) => text.replace(/[*?[\]\\]/g, '\\$&');

  // ---------------------------------------------------------- fetching

  class ApiError extends Error {
    constructor(status, code, message, fix) {
      super(message);
      this.status = status;
      this.code = code;
      this.fix = fix;
    }
  }

  function errorOf(response, text) {
    let body = null;
    try { body = JSON.parse(text); } catch (e) { /* not the API's error shape */ }
    const field = (k) => (isObj(body) && typeof body[k] === 'string' ? body[k] : null);
    const code = field('code') || 'HTTP ' + response.status;
    const message = field('message') || text.slice(0, 500) || response.statusText;
    let fix = field('fix') || '';
    if (response.status === 401) {
      fix = 'Open the URL `pchronicle serve` printed when it started (the one with #token=…): ' +
        'it lets this browser in.';
    }
    return new ApiError(response.status, code, message, fix);
  }

  // cache: 'no-cache' makes the browser revalidate with If-None-Match, so
  // an unchanged answer costs the server a 304 and us the cached body.
  async function request(url, init) {
    let response;
    try {
      const headers = { ...((init && init.headers) || {}), Authorization: 'Bearer ' + token() };
      response = await fetch(url, { credentials: 'omit', cache: 'no-cache', ...init, headers });
    } catch (e) {
      throw new ApiError(0, 'NETWORK', 'the server did not answer (' + e.message + ')',
        'Is `pchronicle serve` still running? Reload the page once it is.');
    }
    const text = await response.text();
    if (!response.ok) throw errorOf(response, text);
    return { text, headers: response.headers };
  }

  function parseJson(text) {
    try { return JSON.parse(text); } catch (e) {
      throw new ApiError(200, 'BAD_ANSWER', 'the answer is not JSON: ' + e.message, '');
    }
  }

  function noteFreshness(headers) {
    const date = new Date(headers.get('Date') || Date.now());
    const when = isNaN(date) ? new Date() : date;
    const node = $('#freshness');
    node.textContent = 'as of ' + clockTime(when);
    node.setAttribute('title', 'data fetched ' + when.toString());
  }

  // ---------------------------------------------------- views and polling

  // One view per URL drawn; answers arriving for an older view are dropped.
  let view = null;

  function startView(url) {
    view = { url, seen: new Map(), refresh: null, busy: false };
    return view;
  }

  const currentView = () => view;

  // The answer of url when it differs from the last one drawn in this
  // slot, else null (nothing to redraw: polling costs no DOM work).
  async function load(v, slot, url) {
    const answer = await request(url);
    if (v !== view) return null;
    noteFreshness(answer.headers);
    if (v.seen.get(slot) === answer.text) return null;
    v.seen.set(slot, answer.text);
    return answer;
  }

  // Waits for every promise; the first failure is returned, not thrown,
  // so the answers that did arrive are still drawn.
  async function settle(promises) {
    const results = await Promise.allSettled(promises);
    const failed = results.find((r) => r.status === 'rejected');
    return [results.map((r) => (r.status === 'fulfilled' ? r.value : null)), failed ? failed.reason : null];
  }

  async function refreshNow() {
    const v = view;
    if (!v || !v.refresh || v.busy) return;
    v.busy = true;
    try {
      await v.refresh();
      if (v === view) hideError();
    } catch (e) {
      if (v === view) showError(e);
    } finally {
      v.busy = false;
    }
  }

  function showError(err, target) {
    const box = clear(target || $('#error'));
    const code = err instanceof ApiError ? err.code : 'CLIENT_ERROR';
    box.hidden = false;
    append(box, [
      h('strong', { class: 'error-code' }, code), ' ',
      h('span', { class: 'error-message' }, err.message),
      err.fix ? h('p', { class: 'error-fix' }, 'Fix: ', err.fix) : null,
    ]);
  }

  function hideError() {
    const box = $('#error');
    if (!box.hidden) { clear(box); box.hidden = true; }
  }

  // ------------------------------------------------------------- header

  function drawHeader(page, params) {
    const path = pathOf(params);
    for (const target of ['datasets', 'runs', 'sql']) {
      const link = $('#nav-' + target);
      link.setAttribute('href', pageHref(target, onlyPath(path)));
      if (target === page || (UNDER_RUNS.has(page) && target === 'runs')) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    $('#page-title').textContent = TITLES[page];
    const where = $('#where');
    where.textContent = path ? visible(path) : '/';
    where.setAttribute('data-path', path);
    where.setAttribute('title', path ? visible(path) : 'the served root');
    drawCrumbs(UNDER_RUNS.has(page) ? 'runs' : page, path);
    document.title = TITLES[page] + ' · ' + (path ? visible(path) : '/') + ' · pchronicle';
    $('#freshness').textContent = 'loading…';
  }

  // Each ancestor of path links to the same page there; the last is
  // where we are (not a link).
  function drawCrumbs(page, path) {
    const list = h('ol');
    const parts = path ? path.split('/') : [];
    const crumb = (label, at, last) => h('li', null, last
      ? h('span', { 'aria-current': 'location' }, label)
      : h('a', { href: pageHref(page, onlyPath(at)), 'data-nav': '' }, label));
    list.append(crumb('root', '', parts.length === 0));
    parts.forEach((part, i) => list.append(
      crumb(nameNode(part), parts.slice(0, i + 1).join('/'), i === parts.length - 1)));
    clear($('#crumbs')).append(list);
  }

  // The JSON twin of a view is its API URL, shown without the token: a
  // link that carried it would leave it in the browser's history and in
  // every copied link. A click fetches the answer with the token in a
  // header and shows it as a document of its own, in a new tab.
  function setTwin(url) {
    const twin = $('#json-twin');
    twin.hidden = !url;
    if (url) {
      twin.setAttribute('href', url);
      twin.setAttribute('data-twin', '');
    }
  }
  PC.twinLink = (url, label) => h('a', { href: url, 'data-twin': '' }, label);
  document.addEventListener('click', (event) => {
    const link = event.target instanceof Element ? event.target.closest('a[data-twin]') : null;
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    event.preventDefault();
    const shown = window.open('', '_blank');
    request(link.getAttribute('href')).then(({ text, headers }) => {
      const type = headers.get('Content-Type') || 'application/json';
      const blob = URL.createObjectURL(new Blob([text], { type }));
      if (shown) shown.location.href = blob; else location.href = blob;
    }, (e) => {
      if (shown) shown.document.body.textContent = e.code + ': ' + e.message;
    });
  });

  function section(id, title, ...kids) {
    return h('section', { id, 'aria-labelledby': id + '-h' }, h('h2', { id: id + '-h' }, title), kids);
  }

  const loading = () => h('p', { class: 'loading' }, 'Loading…');

  function drawWarnings(warnings, truncated, truncatedText) {
    const out = [];
    if (truncated) out.push(h('p', { class: 'note truncated' }, truncatedText));
    const list = arr(warnings);
    if (list.length) {
      out.push(h('ul', { class: 'warnings' }, list.map((w) => h('li', { class: 'warning' },
        h('code', null, String(w.code ?? '')), ' ', nameNode(w.path ?? ''), ': ', String(w.message ?? '')))));
    }
    return out;
  }

  // ------------------------------------------------------------ polling

  // Called once, by app.js when it starts.
  function startPolling() {
    setInterval(() => { if (document.visibilityState === 'visible') refreshNow(); }, POLL_MS);
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') refreshNow();
    });
  }

  Object.assign(PC, {
    $, arr, isObj, h, svg, clear, visible, visibleText, nameNode, fmtInt, fmtBytes, fmtTs, fmtRange,
    fmtDuration, tsKey, pretty, pathOf, joinPath, onlyPath, filtersOf, hasFilters, pageHref,
    apiHref, globLiteral, ApiError, request, parseJson, noteFreshness, startView, currentView, load,
    settle, refreshNow, showError, hideError, drawHeader, setTwin, section, loading, drawWarnings,
    startPolling,
  });
})();
