// The Runs page: the filters (kept in the URL), the hive attributes as
// facets, records per day as a histogram, and the runs as a tree of their
// directories, sorted as asked.
'use strict';

(() => {
  const PC = window.PC;
  const { arr, isObj, h, svg, clear, visible, nameNode, fmtInt, fmtTs, fmtDuration, tsKey, pathOf,
    joinPath, onlyPath, filtersOf, pageHref, apiHref, globLiteral, parseJson, load, settle, setTwin,
    section, loading, drawWarnings } = PC;
  // app.js, loaded last, defines it: looked up when a link is followed.
  const navigate = (href, scroll) => PC.navigate(href, scroll);

  const SORTS = {
    newest: (r) => tsKey(r.last),
    longest: (r) => (typeof r.duration_seconds === 'number' ? r.duration_seconds : null),
    failed: (r) => (typeof r.failed === 'number' ? r.failed : null),
    tokens: (r) => (isObj(r.tokens) && typeof r.tokens.total === 'number' ? r.tokens.total : null),
  };

  // Descending; runs without the value go last.
  function byKey(key) {
    return (a, b) => {
      const x = key(a);
      const y = key(b);
      if (x === null || y === null) return (x === null) - (y === null);
      return y - x;
    };
  }

  function runsPage(v, params, main) {
    const sort = SORTS[params.get('sort')] ? params.get('sort') : '';
    const api = filtersOf(params);
    const runsUrl = apiHref('runs', api);
    const hist = new URLSearchParams(api);
    hist.set('bucket', 'day');
    const histUrl = apiHref('histogram', hist);
    setTwin(runsUrl);
    const facets = section('facets', 'Facets', loading());
    const chart = section('activity', 'Records per day', loading());
    const runs = section('runs-section', 'Runs', loading());
    const closed = new Set(); // directories folded by the user survive a redraw
    main.append(filterForm(params, sort),
      h('div', { class: 'runs-layout' }, h('aside', null, facets), h('div', null, chart, runs)));
    v.refresh = async () => {
      const [[r, hg], failed] = await settle([load(v, 'runs', runsUrl), load(v, 'hist', histUrl)]);
      if (r) {
        const data = parseJson(r.text);
        drawFacets(facets, data, params);
        drawRuns(runs, data, params, sort, closed);
      }
      if (hg) drawHistogram(chart, parseJson(hg.text), params);
      if (failed) throw failed;
    };
  }

  function field(id, label, value, placeholder, type) {
    return h('div', { class: 'field' }, h('label', { for: id }, label),
      h('input', { id, name: id, type: type || 'text', value: value || '', placeholder, spellcheck: 'false', autocomplete: 'off' }));
  }

  function filterForm(params, sort) {
    const form = h('form', { id: 'filters', role: 'search', 'aria-label': 'Filters' },
      field('contains', 'Text', params.get('contains'), 'literal text in a record', 'search'),
      field('file', 'File glob', params.get('file'), 'team/**/*.jsonl'),
      field('since', 'Since', params.get('since'), '2026-01-02T00:00:00Z'),
      field('until', 'Until', params.get('until'), '2026-01-03T00:00:00Z'),
      h('div', { class: 'field' }, h('label', { for: 'sort' }, 'Sort'),
        h('select', { id: 'sort', name: 'sort' }, [['', 'by name'], ['newest', 'newest'], ['longest', 'longest'],
          ['failed', 'most failed'], ['tokens', 'most tokens']].map(([value, text]) =>
          h('option', { value, selected: value === sort }, text)))),
      h('div', { class: 'field buttons' }, h('button', { type: 'submit' }, 'Apply'),
        h('button', { type: 'button', id: 'clear-filters', onclick: () => navigate(pageHref('runs', onlyPath(pathOf(params)))) }, 'Clear')),
      h('div', { id: 'chips', role: 'group', 'aria-label': 'Attribute filters' }, params.getAll('where').map((w) =>
        h('span', { class: 'chip', 'data-where': w }, h('bdi', null, visible(w)),
          h('button', { type: 'button', class: 'chip-remove', 'aria-label': 'Remove filter ' + visible(w),
            onclick: () => navigate(pageHref('runs', withWhere(params, w, false))) }, '×')))));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      navigate(pageHref('runs', fromForm(form, params)));
    });
    form.querySelector('#sort').addEventListener('change', () => navigate(pageHref('runs', fromForm(form, params))));
    return form;
  }

  // The runs URL of the form's fields, keeping the URL's where chips.
  function fromForm(form, params) {
    const p = onlyPath(pathOf(params));
    for (const w of params.getAll('where')) p.append('where', w);
    for (const key of ['contains', 'file', 'since', 'until', 'sort']) {
      const value = form.querySelector('#' + key).value.trim();
      if (value) p.set(key, value);
    }
    return p;
  }

  // params with `where=w` added (on) or removed, other state kept.
  function withWhere(params, w, on) {
    const p = new URLSearchParams(params);
    const rest = p.getAll('where').filter((x) => x !== w);
    p.delete('where');
    for (const x of on ? [...rest, w] : rest) p.append('where', x);
    return p;
  }

  // The API cuts each list a writer decides the length of and sums the
  // rest beside it (`other`), never inside it: a role may be named "other".
  const otherOf = (data) => (isObj(data.other) ? data.other : {});
  const isOther = (o) => isObj(o) && typeof o.values === 'number' && o.values > 0;

  // The line standing for what a list left out: "other (N values)".
  function otherItem(o, cls, noun) {
    return h('li', { class: cls + ' other', 'data-values': o.values, 'data-records': o.records },
      h('span', { class: 'name' }, `other (${fmtInt(o.values)} ${noun})`),
      h('span', { class: 'count' }, fmtInt(o.records)));
  }

  // The API cuts a long value to its first characters and a mark; such a
  // value names no directory, so it is shown but not filtered on.
  const CUT_CHARS = 200;
  const isCut = (value) => [...value].length === CUT_CHARS + 1 && value.endsWith('\u2026');

  // Largest first; ties by name, as the API kept them.
  const byCount = (a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);

  function drawFacets(box, data, params) {
    clear(box).append(h('h2', { id: 'facets-h' }, 'Facets'));
    const active = new Set(params.getAll('where'));
    const facets = isObj(data.facets) ? data.facets : {};
    const other = otherOf(data);
    const otherValues = isObj(other.facets) ? other.facets : {};
    const keys = Object.keys(facets).sort();
    if (!keys.length) box.append(h('p', { class: 'empty' }, 'No hive attributes (key=value directories) here.'));
    for (const key of keys) {
      const values = Object.entries(isObj(facets[key]) ? facets[key] : {}).sort(byCount);
      const item = ([value, count]) => {
        const w = key + '=' + value;
        const on = active.has(w);
        if (isCut(value)) {
          return h('li', { class: 'facet-value cut', title: 'cut: too long to filter on' }, nameNode(value),
            h('span', { class: 'count' }, fmtInt(count)));
        }
        return h('li', null, h('button', { type: 'button', class: 'facet-value', 'data-key': key, 'data-value': value,
          'aria-pressed': on ? 'true' : 'false', onclick: () => navigate(pageHref('runs', withWhere(params, w, !on))) },
        nameNode(value), h('span', { class: 'count' }, fmtInt(count))));
      };
      const rest = isOther(otherValues[key]) ? otherItem(otherValues[key], 'facet-value', 'values') : null;
      box.append(h('div', { class: 'facet', 'data-key': key }, h('h3', null, nameNode(key)),
        h('ul', null, values.slice(0, 20).map(item), values.length > 20 ? null : rest),
        values.length > 20 ? h('details', null, h('summary', null, fmtInt(values.length - 20), ' more'),
          h('ul', null, values.slice(20).map(item), rest)) : null));
    }
    if (isOther(other.facet_keys)) {
      box.append(h('ul', { id: 'facet-keys-other' }, otherItem(other.facet_keys, 'facet-key', 'keys')));
    }
    // Roles are shown, not filtered on: the API has no role filter.
    const roles = Object.entries(isObj(data.roles) ? data.roles : {}).sort(byCount);
    if (roles.length || isOther(other.roles)) {
      box.append(h('div', { class: 'facet roles' }, h('h3', null, 'Roles'), h('ul', { id: 'roles' },
        roles.map(([role, count]) => h('li', { class: 'role', 'data-name': role }, nameNode(role),
          h('span', { class: 'count' }, fmtInt(count)))),
        isOther(other.roles) ? otherItem(other.roles, 'role', 'values') : null)));
    }
  }

  const BUCKET_MS = { hour: 3600e3, day: 86400e3, week: 7 * 86400e3 };

  function bucketLabel(start, bucket) {
    const text = String(start);
    if (bucket === 'hour') return text.slice(0, 13).replace('T', ' ') + ':00';
    return (bucket === 'week' ? 'week of ' : '') + text.slice(0, 10);
  }

  // Bars stand at their time: empty buckets between them are gaps.
  function drawHistogram(box, data, params) {
    const W = 800, H = 170, TOP = 18, BOTTOM = 22, PLOT = H - TOP - BOTTOM;
    const bucket = BUCKET_MS[data.bucket] ? data.bucket : 'day';
    const step = BUCKET_MS[bucket];
    const buckets = arr(data.buckets).filter((b) => tsKey(b.start) !== null);
    const chart = svg('svg', { id: 'histogram', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Records per ' + bucket });
    const t0 = buckets.length ? tsKey(buckets[0].start) : 0;
    const slots = buckets.length ? Math.round((tsKey(buckets[buckets.length - 1].start) - t0) / step) + 1 : 1;
    const slotW = W / slots;
    const barW = Math.max(Math.min(slotW * 0.8, 48), 0.5);
    const max = buckets.reduce((m, b) => Math.max(m, Number(b.records) || 0), 1);
    const scale = (n) => (Math.max(0, Number(n) || 0) / max) * PLOT;
    for (const b of buckets) {
      const x = Math.round((tsKey(b.start) - t0) / step) * slotW + (slotW - barW) / 2;
      const height = Math.max(scale(b.records), b.records > 0 ? 1 : 0);
      const tip = `${bucketLabel(b.start, bucket)}: ${fmtInt(b.records)} records, ${fmtInt(b.failed)} failed (click: only these)`;
      const pick = () => {
        const p = new URLSearchParams(params);
        const iso = (ms) => new Date(ms).toISOString().replace('.000Z', 'Z');
        p.set('since', iso(tsKey(b.start)));
        p.set('until', iso(tsKey(b.start) + step));
        navigate(pageHref('runs', p));
      };
      chart.append(svg('rect', { class: 'bar', x, y: TOP + PLOT - height, width: barW, height,
        'data-start': b.start, 'data-records': b.records, 'data-failed': b.failed, onclick: pick }, svg('title', null, tip)));
      if (b.failed > 0) {
        chart.append(svg('rect', { class: 'bar-failed', x, y: TOP + PLOT - height, width: barW,
          height: Math.max(scale(b.failed), 1), onclick: pick }, svg('title', null, tip)));
      }
    }
    chart.append(svg('line', { class: 'axis', x1: 0, y1: TOP + PLOT + 0.5, x2: W, y2: TOP + PLOT + 0.5 }),
      svg('text', { class: 'axis-label', x: 0, y: 12 }, 'max ' + fmtInt(max) + ' records'));
    if (buckets.length) {
      chart.append(svg('text', { class: 'axis-label', x: 0, y: H - 6 }, bucketLabel(buckets[0].start, bucket)));
      if (buckets.length > 1) {
        chart.append(svg('text', { class: 'axis-label', x: W, y: H - 6, 'text-anchor': 'end' },
          bucketLabel(buckets[buckets.length - 1].start, bucket)));
      }
    }
    clear(box).append(h('h2', { id: 'activity-h' }, 'Records per ' + bucket), chart);
    const notes = [];
    if (!buckets.length) notes.push('No record here has a timestamp.');
    if (data.untimed > 0) notes.push(fmtInt(data.untimed) + ' records have no timestamp and are not drawn.');
    if (isOther(data.other)) {
      notes.push(`${fmtInt(data.other.records)} records in ${fmtInt(data.other.values)} more ${bucket}s are not drawn:` +
        ` only the ${fmtInt(buckets.length)} ${bucket}s with the most records are.`);
    }
    if (notes.length) box.append(h('p', { id: 'histogram-note', class: 'note' }, notes.join(' ')));
    box.append(...drawWarnings(data.warnings, data.truncated, 'A traversal bound was hit: not every source is counted.'));
  }

  // Runs grouped by the directories of their names.
  function runTree(runs) {
    const root = { name: '', path: '', dirs: new Map(), runs: [] };
    for (const run of runs) {
      const parts = String(run.run ?? '').split('/');
      let node = root;
      for (const part of parts.slice(0, -1)) {
        if (!node.dirs.has(part)) node.dirs.set(part, { name: part, path: joinPath(node.path, part), dirs: new Map(), runs: [] });
        node = node.dirs.get(part);
      }
      node.runs.push(run);
    }
    return root;
  }

  // Sums each directory's runs, and keeps its best sort value so whole
  // directories can be ordered like the runs in them.
  function summarize(node, key) {
    node.count = node.runs.length;
    node.records = node.runs.reduce((s, r) => s + (Number(r.records) || 0), 0);
    node.failed = node.runs.reduce((s, r) => s + (Number(r.failed) || 0), 0);
    node.best = null;
    for (const run of node.runs) node.best = maxKey(node.best, key(run));
    for (const child of node.dirs.values()) {
      summarize(child, key);
      node.count += child.count;
      node.records += child.records;
      node.failed += child.failed;
      node.best = maxKey(node.best, child.best);
    }
  }

  const maxKey = (a, b) => (a === null ? b : b === null ? a : Math.max(a, b));

  function drawRuns(box, data, params, sort, closed) {
    const runs = arr(data.runs);
    const key = SORTS[sort] || (() => null);
    const tree = runTree(runs);
    summarize(tree, key);
    const ctx = { path: pathOf(params), sort, key, closed };
    // Runs left out still count in the totals.
    const rest = otherOf(data).runs;
    const left = isOther(rest) ? rest : { values: 0, records: 0, failed: 0 };
    clear(box).append(h('h2', { id: 'runs-section-h' }, 'Runs'),
      h('p', { id: 'runs-summary' }, fmtInt(runs.length + left.values), ' runs · ',
        fmtInt(tree.records + (Number(left.records) || 0)), ' records · ',
        fmtInt(tree.failed + (Number(left.failed) || 0)), ' failed'),
      h('div', { id: 'runs' }, dirContents(tree, ctx)));
    if (isOther(rest)) {
      box.append(h('p', { id: 'runs-other', class: 'note', 'data-values': rest.values, 'data-records': rest.records },
        `other (${fmtInt(rest.values)} runs, ${fmtInt(rest.records)} records) not shown: only the `,
        `${fmtInt(runs.length)} runs with the most records are. Open a directory or filter to see the rest.`));
    }
    if (!runs.length && !isOther(rest)) box.append(h('p', { class: 'empty' }, 'No runs match.'));
    box.append(...drawWarnings(data.warnings, data.truncated, 'A traversal bound was hit: not every run is shown.'));
  }

  function dirContents(node, ctx) {
    const runs = [...node.runs];
    const dirs = [...node.dirs.values()];
    if (ctx.sort) {
      runs.sort(byKey(ctx.key));
      dirs.sort(byKey((d) => d.best));
    }
    return [runs.length ? runsTable(runs, ctx) : null, dirs.map((d) => dirElement(d, ctx))];
  }

  // A chain of directories with nothing else in them shows as one
  // (date=…/agent=…), so deep hive layouts stay shallow on screen.
  function dirElement(node, ctx) {
    let label = node.name;
    while (node.runs.length === 0 && node.dirs.size === 1) {
      node = node.dirs.values().next().value;
      label += '/' + node.name;
    }
    const path = node.path;
    const details = h('details', { class: 'dir', 'data-dir': path, open: !ctx.closed.has(path) },
      h('summary', null, nameNode(label + '/'), h('span', { class: 'dir-counts' },
        fmtInt(node.count), ' runs · ', fmtInt(node.records), ' records',
        node.failed ? ' · ' + fmtInt(node.failed) + ' failed' : '')),
      dirContents(node, ctx));
    details.addEventListener('toggle', () => {
      if (details.open) ctx.closed.delete(path); else ctx.closed.add(path);
    });
    return details;
  }

  function runsTable(runs, ctx) {
    const head = ['Run', 'Records', 'Failed', 'First', 'Last', 'Duration', 'Steps', 'Tokens'];
    return h('table', { class: 'grid runs-table' },
      h('thead', null, h('tr', null, head.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, runs.map((run) => runRow(run, ctx))));
  }

  function runRow(run, ctx) {
    const name = String(run.run ?? '');
    // The run page gets the path and this run only, never the filters.
    const p = onlyPath(ctx.path);
    p.set('run', name);
    p.set('file', typeof run.file === 'string' ? run.file : globLiteral(name));
    const tokens = isObj(run.tokens) ? run.tokens : null;
    return h('tr', { class: 'run', 'data-run': name },
      h('td', { class: 'run-name' }, h('a', { href: pageHref('run', p), 'data-nav': '', title: visible(name) },
        nameNode(name.split('/').pop()))),
      h('td', { class: 'num records' }, fmtInt(run.records)),
      h('td', { class: 'num failed' + (run.failed > 0 ? ' nonzero' : '') }, fmtInt(run.failed)),
      h('td', { class: 'time' }, fmtTs(run.first)),
      h('td', { class: 'time' }, fmtTs(run.last)),
      h('td', { class: 'num duration' }, fmtDuration(run.duration_seconds)),
      h('td', { class: 'num steps' }, fmtInt(run.steps)),
      h('td', { class: 'num tokens', title: tokens ? `input ${fmtInt(tokens.input)} · output ${fmtInt(tokens.output)}` : null },
        tokens ? fmtInt(tokens.total) : '–'));
  }

  PC.runsPage = runsPage;
})();
