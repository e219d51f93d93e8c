// The SQL page: a query over the tables records and sources of a path,
// posted to /api/query; its rows are drawn as a table.
'use strict';

(() => {
  const PC = window.PC;
  const { $, isObj, h, clear, visible, visibleText, nameNode, fmtInt, fmtDuration, pathOf,
    filtersOf, pageHref, ApiError, request, noteFreshness, currentView, setTwin } = PC;
  const DEFAULT_SQL =
    'SELECT _file_, count(*) AS records FROM records GROUP BY _file_ ORDER BY 2 DESC LIMIT 20';

  function sqlPage(v, params, main) {
    const path = pathOf(params);
    setTwin(null); // a POST has no URL to open
    const box = h('textarea', { id: 'sql', name: 'sql', rows: '6', spellcheck: 'false', autocomplete: 'off' });
    box.value = params.get('sql') || DEFAULT_SQL;
    const run = h('button', { id: 'run-sql', type: 'submit' }, 'Run');
    const filters = filtersOf(params);
    filters.delete('path');
    const form = h('form', { id: 'sql-form', 'aria-label': 'Query' },
      h('label', { for: 'sql' }, 'SQL over the tables ', h('code', null, 'records'), ' and ', h('code', null, 'sources'),
        ' of ', h('code', null, path ? visible(path) : '/')),
      box,
      h('div', { class: 'actions' }, run, h('span', { class: 'hint' }, 'Ctrl+Enter runs. Only SELECT, WITH and EXPLAIN.'),
        filters.toString() ? h('span', { id: 'sql-filters', class: 'note' }, 'Filters from the URL apply: ',
          h('bdi', null, visible([...filters].map(([k, x]) => k + '=' + x).join(' & ')))) : null));
    const out = {
      error: h('div', { id: 'sql-error', class: 'error', role: 'alert', hidden: true }),
      note: h('p', { id: 'sql-note', class: 'note', hidden: true }),
      count: h('p', { id: 'sql-count', 'aria-live': 'polite' }),
      table: h('div', { class: 'table-wrap' }),
      run,
    };
    main.append(form, out.error, out.note, out.count, out.table);
    $('#freshness').textContent = params.get('sql') ? 'running…' : 'no query run yet';
    box.addEventListener('keydown', (event) => {
      if (event.key === 'Enter' && (event.ctrlKey || event.metaKey)) { event.preventDefault(); form.requestSubmit(); }
    });
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const p = new URLSearchParams(location.search);
      p.set('path', path);
      p.set('sql', box.value);
      const href = pageHref('sql', p);
      if (location.pathname + location.search !== href) {
        history.pushState(null, '', href);
        v.url = location.pathname + location.search;
      }
      runQuery(v, params, box.value, out);
    });
    if (params.get('sql')) runQuery(v, params, box.value, out);
  }

  // The filters as the query body takes them: where as an array.
  function queryBody(params, sql) {
    const body = { path: pathOf(params), sql };
    const where = params.getAll('where').filter((w) => w !== '');
    if (where.length) body.where = where;
    for (const key of ['since', 'until', 'file', 'contains']) if (params.get(key)) body[key] = params.get(key);
    return body;
  }

  async function runQuery(v, params, sql, out) {
    if (v.abort) v.abort.abort();
    const abort = new AbortController();
    v.abort = abort;
    out.error.hidden = true;
    out.note.hidden = true;
    out.run.disabled = true;
    out.count.textContent = 'Running…';
    const started = performance.now();
    try {
      const answer = await request('/api/query', { method: 'POST', cache: 'no-store', signal: abort.signal,
        headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(queryBody(params, sql)) });
      if (v !== currentView() || abort.signal.aborted) return;
      noteFreshness(answer.headers);
      const rows = drawSqlResult(out.table, answer.text);
      const ms = Math.round(performance.now() - started);
      out.count.textContent = fmtInt(rows) + (rows === 1 ? ' row' : ' rows') + ' in ' + fmtDuration(ms / 1000);
      const cut = [];
      const cap = answer.headers.get('X-Row-Cap');
      const late = answer.headers.get('X-Time-Limit');
      if (cap) cut.push('The result was cut at ' + cap + ' rows (serve --query-rows).');
      if (late) cut.push('The query was stopped after ' + late + ' s (serve --query-seconds): these are the rows made by then.');
      out.note.textContent = cut.join(' ');
      out.note.hidden = !cut.length;
    } catch (e) {
      if (v !== currentView() || abort.signal.aborted) return;
      clear(out.table);
      out.count.textContent = '';
      showSqlError(out.error, e);
    } finally {
      if (v.abort === abort) out.run.disabled = false;
    }
  }

  // The message may hold a caret line under the SQL: whitespace is kept.
  function showSqlError(box, err) {
    clear(box).hidden = false;
    box.append(h('strong', { class: 'error-code' }, err instanceof ApiError ? err.code : 'CLIENT_ERROR'),
      h('pre', { class: 'error-message' }, err.message),
      err.fix ? h('p', { class: 'error-fix' }, 'Fix: ', err.fix) : null);
  }

  // One row per line; columns in the order of the first row's keys (then
  // any key a later row adds).
  function drawSqlResult(box, text) {
    const rows = [];
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      try { rows.push(JSON.parse(line)); } catch (e) { rows.push({ '(unreadable line)': line }); }
    }
    const columns = [];
    const known = new Set();
    for (const row of rows) {
      for (const key of Object.keys(isObj(row) ? row : { value: row })) {
        if (!known.has(key)) { known.add(key); columns.push(key); }
      }
    }
    const cell = (value) => {
      if (value === null || value === undefined) return h('td', { class: 'null' }, 'NULL');
      const text = typeof value === 'object' ? JSON.stringify(value) : String(value);
      const cls = (typeof value === 'number' ? 'num' : '') + (text.length > 300 ? ' long' : '');
      return h('td', { class: cls.trim() || null }, h('span', { class: 'value', dir: 'auto' }, visibleText(text)));
    };
    clear(box).append(h('table', { id: 'sql-result', class: 'grid' },
      h('thead', null, h('tr', null, columns.map((c) => h('th', { scope: 'col' }, nameNode(c))))),
      h('tbody', null, rows.map((row) => {
        const r = isObj(row) ? row : { value: row };
        return h('tr', null, columns.map((c) => cell(Object.prototype.hasOwnProperty.call(r, c) ? r[c] : undefined)));
      }))));
    return rows.length;
  }

  PC.sqlPage = sqlPage;
})();
