// The Runs page: the filters (kept in the URL), the hive attributes as
// facets, records per day as a histogram, and the runs in the server's
// order, a page at a time as the reader scrolls.
'use strict';

(() => {
  const PC = window.PC;
  const { arr, isObj, h, svg, clear, visible, nameNode, fmtInt, fmtTs, fmtDuration, tsKey, pathOf,
    onlyPath, filtersOf, pageHref, apiHref, globLiteral, parseJson, load, settle, setTwin,
    section, loading, drawWarnings } = PC;
  // app.js, loaded last, defines it: looked up when a link is followed.
  const navigate = (href, scroll) => PC.navigate(href, scroll);

  // The server's orders (`sort=`); by name when none is given.
  const SORTS = [['', 'by name'], ['newest', 'newest'], ['longest', 'longest'], ['failed', 'most failed'],
    ['tokens', 'most tokens'], ['records', 'most records'], ['steps', 'most steps'],
    ['calls', 'most tool calls'], ['errors', 'most tool errors'], ['score', 'highest score']];

  // Filters on what a run's records say, applied to the runs (and their
  // summary), not to the records (the histogram counts the selection's).
  const RUN_FILTERS = [['model', 'Model'], ['agent', 'Agent'], ['stop', 'Stop reason']];

  // params' run filters added to the API parameters p.
  function withRunFilters(p, params) {
    for (const [key] of RUN_FILTERS) {
      const value = params.get(key);
      if (value) p.set(key, value);
    }
    return p;
  }

  function runsPage(v, params, main) {
    const sort = SORTS.some(([value]) => value && value === params.get('sort')) ? params.get('sort') : '';
    const api = filtersOf(params);
    const first = withRunFilters(new URLSearchParams(api), params);
    if (sort) first.set('sort', sort);
    // By name, the directories below the first level are groups, folded.
    if (grouped(params, sort)) first.set('ungrouped', '1');
    first.set('limit', String(PAGE));
    const runsUrl = apiHref('runs', first);
    const summaryUrl = apiHref('runs/summary', withRunFilters(new URLSearchParams(api), params));
    const hist = new URLSearchParams(api);
    hist.set('bucket', 'day');
    const histUrl = apiHref('histogram', hist);
    setTwin(runsUrl);
    const facets = section('facets', 'Facets', loading());
    const chart = section('activity', 'Records per day', loading());
    const runs = section('runs-section', 'Runs', loading());
    main.append(filterForm(params, sort),
      h('div', { class: 'runs-layout' }, h('aside', null, facets), h('div', null, chart, runs)));
    let summary = null;
    let shown = null; // the runs drawn: their paging state
    // Each answer is drawn as it arrives (the first rows do not wait for
    // the histogram); a poll redraws only what changed: an unchanged
    // answer is a 304.
    v.refresh = async () => {
      const [, failed] = await settle([
        load(v, 'summary', summaryUrl).then((s) => {
          if (!s) return;
          summary = parseJson(s.text);
          drawFacets(facets, summary, params);
          drawTotals(runs, summary);
        }),
        load(v, 'runs', runsUrl).then((r) => {
          if (!r) return;
          // A reader who scrolled past the first page, unfolded a group or
          // ticked a run keeps the rows read; the change is offered, not
          // forced on them.
          if (shown && !shown.gone && (shown.drawn > PAGE || shown.open > 0 || shown.picked.length)) {
            changed(shown);
            return;
          }
          if (shown) stop(shown);
          shown = drawRuns(runs, parseJson(r.text), params, sort);
          drawTotals(runs, summary);
        }),
        load(v, 'hist', histUrl).then((hg) => { if (hg) drawHistogram(chart, parseJson(hg.text), params); }),
      ]);
      if (failed) throw failed;
    };
  }

  const grouped = (params, sort) => !sort && params.get('flat') !== '1';

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
        h('select', { id: 'sort', name: 'sort' }, SORTS.map(([value, text]) =>
          h('option', { value, selected: value === sort }, text)))),
      h('div', { class: 'field buttons' }, h('button', { type: 'submit' }, 'Apply'),
        h('button', { type: 'button', id: 'clear-filters', onclick: () => navigate(pageHref('runs', onlyPath(pathOf(params)))) }, 'Clear')),
      h('div', { id: 'chips', role: 'group', 'aria-label': 'Attribute filters' }, params.getAll('where').map((w) =>
        h('span', { class: 'chip', 'data-where': w }, h('bdi', null, visible(w)),
          h('button', { type: 'button', class: 'chip-remove', 'aria-label': 'Remove filter ' + visible(w),
            onclick: () => navigate(pageHref('runs', withWhere(params, w, false))) }, '×'))),
      RUN_FILTERS.filter(([key]) => params.get(key)).map(([key, label]) =>
        h('span', { class: 'chip', 'data-run-filter': key }, label + ': ', h('bdi', null, visible(params.get(key))),
          h('button', { type: 'button', class: 'chip-remove', 'aria-label': 'Remove filter ' + label,
            onclick: () => navigate(pageHref('runs', withRunFilter(params, key, null))) }, '×')))));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      navigate(pageHref('runs', fromForm(form, params)));
    });
    form.querySelector('#sort').addEventListener('change', () => navigate(pageHref('runs', fromForm(form, params))));
    return form;
  }

  // The runs URL of the form's fields, keeping the URL's where chips.
  function fromForm(form, params) {
    const p = withRunFilters(onlyPath(pathOf(params)), params);
    for (const w of params.getAll('where')) p.append('where', w);
    for (const key of ['contains', 'file', 'since', 'until', 'sort']) {
      const value = form.querySelector('#' + key).value.trim();
      if (value) p.set(key, value);
    }
    if (params.get('flat') === '1') p.set('flat', '1');
    return p;
  }

  // params with the run filter key set to value (or removed: null).
  function withRunFilter(params, key, value) {
    const p = new URLSearchParams(params);
    if (value === null) p.delete(key); else p.set(key, value);
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
    // (The runs' models, agents and stop reasons follow, when any says one.)
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
    // What the runs' records say: each value filters the runs.
    const reviewed = isObj(data.reviewed) ? data.reviewed : {};
    const reviewedOther = isObj(other.reviewed) ? other.reviewed : {};
    for (const [key, label] of RUN_FILTERS) {
      const values = Object.entries(isObj(reviewed[key]) ? reviewed[key] : {}).sort(byCount);
      if (!values.length) continue;
      const item = ([value, count]) => {
        const on = params.get(key) === value;
        return h('li', null, h('button', { type: 'button', class: 'facet-value', 'data-key': key, 'data-value': value,
          'aria-pressed': on ? 'true' : 'false', title: 'runs',
          onclick: () => navigate(pageHref('runs', withRunFilter(params, key, on ? null : value))) },
        nameNode(value), h('span', { class: 'count' }, fmtInt(count))));
      };
      const rest = isOther(reviewedOther[key]) ? otherItem(reviewedOther[key], 'facet-value', 'values') : null;
      box.append(h('div', { class: 'facet reviewed', 'data-key': key }, h('h3', null, label, ' (runs)'),
        h('ul', null, values.slice(0, 20).map(item), values.length > 20 ? null : rest),
        values.length > 20 ? h('details', null, h('summary', null, fmtInt(values.length - 20), ' more'),
          h('ul', null, values.slice(20).map(item), rest)) : null));
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

  // Rows drawn at most: past them the reader moves on to the next runs
  // (the rows drawn so far go), so a page of 100,000 runs stays light.
  const ROWS_AT_MOST = 5000;
  const PAGE = 200;

  // The runs come a page at a time, in the server's order; more are asked
  // for as the end of the table comes into view.
  function drawRuns(box, first, params, sort) {
    const runs = arr(first.runs);
    const total = Number(first.total) || 0;
    const state = { params, sort, next: typeof first.next === 'string' ? first.next : null, drawn: 0, loading: false,
      picked: [], grouped: grouped(params, sort), groupAt: 0, open: 0,
      groups: Object.entries(isObj(first.groups) && isObj(first.groups.runs) ? first.groups.runs : {})
        .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)) };
    const tbody = h('tbody');
    const more = h('p', { id: 'runs-more', class: 'note' });
    state.compare = h('button', { type: 'button', id: 'compare-picked', disabled: true, onclick: () => {
      // Two runs are compared whole: the filters stay here.
      const p = onlyPath(pathOf(params));
      p.set('a', state.picked[0]);
      p.set('b', state.picked[1]);
      navigate(pageHref('compare', p), true);
    } }, 'Compare');
    state.pickedNote = h('span', { id: 'picked-note' }, 'Tick two runs to compare them.');
    // The selection's records (its filters; the run filters choose runs,
    // not records, and are left out) as one JSONL file.
    const saved = h('span', { id: 'download-note', role: 'status' });
    const download = h('button', { type: 'button', id: 'download-selection', title: 'the records of this selection, as /api/records gives them',
      onclick: () => PC.downloadRecords(filtersOf(params), 'selection.jsonl', download, saved) }, 'Download JSONL');
    const flat = new URLSearchParams(params);
    if (state.grouped) flat.set('flat', '1'); else flat.delete('flat');
    const grouping = sort ? null : h('p', { id: 'runs-grouping', class: 'note' },
      state.grouped ? 'Directories below the first level are folded. ' : 'Every run, without groups. ',
      h('a', { href: pageHref('runs', flat), 'data-nav': '' }, state.grouped ? 'Show every run' : 'Group by directory'),
      state.grouped && isObj(first.groups) && isObj(first.groups.other)
        ? ` (${fmtInt(first.groups.other.groups)} more groups, ${fmtInt(first.groups.other.runs)} runs, are not shown: only the ${fmtInt(state.groups.length)} largest are)` : null);
    clear(box).append(h('h2', { id: 'runs-section-h' }, 'Runs'), h('p', { id: 'runs-summary' }), grouping,
      h('p', { id: 'compare-bar' }, state.compare, ' ', state.pickedNote, ' ', download, ' ', saved),
      h('div', { id: 'runs' }, runsTable(tbody, state)), more);
    if (!runs.length && !state.groups.length) box.append(h('p', { class: 'empty' }, 'No runs match.'));
    box.append(...drawWarnings(first.warnings, first.truncated, 'A traversal bound was hit: not every run is shown.'));
    appendRows(tbody, runs, state);
    const observer = new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting)) loadMore(tbody, more, state, observer);
    }, { rootMargin: '800px' });
    state.observer = observer;
    state.more = more;
    showMore(tbody, more, state, total);
    observer.observe(more);
    return state;
  }

  // Rows drawn over: their paging stops (a page on its way is dropped).
  function stop(state) {
    state.gone = true;
    state.observer.disconnect();
  }

  // The first runs changed under rows the reader scrolled to: paging
  // stops, and a button draws the runs again from the first.
  function changed(state) {
    if (state.changedNote) return;
    stop(state);
    state.changedNote = h('p', { id: 'runs-changed', class: 'note' }, 'The runs here changed. ',
      h('button', { type: 'button', onclick: () => navigate(location.pathname + location.search, true) }, 'Show them again'));
    state.more.before(state.changedNote);
  }

  // The selection's totals, from its summary (which lists no run).
  function drawTotals(box, summary) {
    const line = box.querySelector('#runs-summary');
    if (!line || !isObj(summary)) return;
    line.setAttribute('data-runs', String(summary.runs));
    clear(line).append(fmtInt(summary.runs), ' runs · ', fmtInt(summary.records), ' records · ',
      fmtInt(summary.failed), ' failed');
  }

  // A page's rows, each group folded in before the first run it sorts
  // before (the remaining groups after the last page).
  function appendRows(tbody, runs, state) {
    const rows = [];
    for (const run of runs) {
      rows.push(...groupsBefore(state, String(run.run ?? '')));
      rows.push(runRow(run, state));
    }
    if (!state.next) rows.push(...groupsBefore(state, null));
    tbody.append(...rows);
    state.drawn += runs.length;
    keepRuns(tbody, state);
  }

  // The Run page's n/p walk the runs drawn, in this order (an unfolded
  // group's too).
  function keepRuns(tbody, state) {
    const list = [...tbody.rows].filter((row) => row.dataset.run !== undefined)
      .map((row) => [row.dataset.run, row.dataset.file]);
    PC.keepList(pathOf(state.params), list);
  }

  // The group rows due before the run `name` (all left: null).
  function groupsBefore(state, name) {
    const rows = [];
    while (state.groupAt < state.groups.length && (name === null || state.groups[state.groupAt][0] < name)) {
      const [dir, count] = state.groups[state.groupAt];
      rows.push(groupRow(state, dir, count));
      state.groupAt += 1;
    }
    return rows;
  }

  // A folded group: its directory and count; unfolding reads its runs a
  // page at a time.
  function groupRow(state, dir, count) {
    const members = [];
    let after = null;
    // Each unfolding is a reading of its own: a page that arrives after a
    // fold (or a fold and unfold) is dropped, and one page is read at once.
    let reading = 0;
    let busy = false;
    const toggle = h('button', { type: 'button', class: 'group-toggle', 'aria-expanded': 'false' },
      h('span', { class: 'fold' }, '▸'), ' ', nameNode(dir), h('span', { class: 'count' }, ` · ${fmtInt(count)} runs`));
    const row = h('tr', { class: 'group', 'data-group': dir, 'data-runs': String(count) },
      h('td', { colspan: String(COLUMNS.length) }, toggle));
    const nextButton = h('button', { type: 'button', class: 'group-next', onclick: () => read() }, 'More runs of this group');
    const more = h('tr', { class: 'group-more' }, h('td', { colspan: String(COLUMNS.length) }, nextButton));
    const note = more.querySelector('td');
    const read = async () => {
      if (busy) return;
      const tbody = row.parentNode;
      // Unfolded groups count toward the rows the page holds.
      if (!tbody || tbody.rows.length >= ROWS_AT_MOST) {
        row.after(more);
        clear(note).append(`The page holds ${fmtInt(ROWS_AT_MOST)} rows: fold a group to read this one.`);
        return;
      }
      busy = true;
      const mine = reading;
      const p = withRunFilters(new URLSearchParams(filtersOf(state.params)), state.params);
      p.set('group', dir);
      p.set('limit', String(PAGE));
      if (after) p.set('after', after);
      const v = PC.currentView();
      try {
        const answer = parseJson((await PC.request(apiHref('runs', p))).text);
        if (v !== PC.currentView() || mine !== reading) return;
        const rows = arr(answer.runs).map((run) => runRow(run, state));
        for (const r of rows) r.setAttribute('data-in-group', dir);
        (members.length ? members[members.length - 1] : row).after(...rows);
        members.push(...rows);
        after = typeof answer.next === 'string' ? answer.next : null;
        clear(note).append(nextButton);
        if (after) (members.length ? members[members.length - 1] : row).after(more); else more.remove();
        keepRuns(tbody, state);
      } catch (e) {
        if (v !== PC.currentView() || mine !== reading) return;
        PC.showError(e);
        clear(note).append('These runs could not be read. ', nextButton);
        (members.length ? members[members.length - 1] : row).after(more);
      } finally {
        if (mine === reading) busy = false;
      }
    };
    toggle.addEventListener('click', () => {
      reading += 1;
      busy = false;
      const open = toggle.getAttribute('aria-expanded') !== 'true';
      toggle.setAttribute('aria-expanded', String(open));
      toggle.querySelector('.fold').textContent = open ? '▾' : '▸';
      state.open += open ? 1 : -1;
      if (open) { read(); return; }
      const tbody = row.parentNode;
      for (const r of members.splice(0)) r.remove();
      more.remove();
      after = null;
      if (tbody) keepRuns(tbody, state);
    });
    return row;
  }

  // What follows the rows: how many are drawn, and what comes next.
  function showMore(tbody, more, state, total) {
    state.total = total === undefined ? state.total : total;
    const shown = tbody.rows.length;
    // Rows of the list itself (not groups, nor an unfolded group's runs).
    const listed = tbody.querySelectorAll('tr.run:not([data-in-group])').length;
    clear(more).setAttribute('data-drawn', String(shown));
    more.setAttribute('data-read', String(state.drawn));
    more.setAttribute('data-state', !state.next ? 'end' : shown >= ROWS_AT_MOST ? 'bound' : 'scroll');
    if (!state.next) {
      if (state.drawn > listed) more.append(`the last ${fmtInt(listed)} of ${fmtInt(state.total)} runs`);
      return;
    }
    if (shown >= ROWS_AT_MOST) {
      more.append(`${fmtInt(state.drawn)} of ${fmtInt(state.total)} runs read. `,
        h('button', { type: 'button', id: 'runs-next', onclick: () => {
          clear(tbody);
          window.scrollTo(0, tbody.closest('section').offsetTop);
          loadMore(tbody, more, state, state.observer);
        } }, `Next ${fmtInt(ROWS_AT_MOST)} runs`));
      return;
    }
    more.append(`${fmtInt(state.drawn)} of ${fmtInt(state.total)} runs${state.grouped ? ' outside the groups' : ''} · more as you scroll`);
  }

  async function loadMore(tbody, more, state, observer) {
    if (state.loading || state.gone || state.failed || !state.next || tbody.rows.length >= ROWS_AT_MOST) return;
    state.loading = true;
    const v = PC.currentView();
    try {
      // The cursor is bound to every filter of the first page, the run
      // filters too.
      const p = withRunFilters(new URLSearchParams(filtersOf(state.params)), state.params);
      if (state.sort) p.set('sort', state.sort);
      if (state.grouped) p.set('ungrouped', '1');
      p.set('limit', String(PAGE));
      p.set('after', state.next);
      const answer = parseJson((await PC.request(apiHref('runs', p))).text);
      if (v !== PC.currentView() || state.gone) return;
      state.next = typeof answer.next === 'string' ? answer.next : null;
      appendRows(tbody, arr(answer.runs), state);
      showMore(tbody, more, state);
    } catch (e) {
      if (v !== PC.currentView() || state.gone) return;
      // Not asked again by itself (a server restarted since refuses the
      // cursor every time): the reader retries, or starts over.
      state.failed = true;
      PC.showError(e);
      clear(more).setAttribute('data-state', 'failed');
      more.append('The next runs could not be read. ', h('button', { type: 'button', id: 'runs-retry', onclick: () => {
        state.failed = false;
        showMore(tbody, more, state);
        loadMore(tbody, more, state, observer);
      } }, 'Try again'));
      return;
    } finally {
      state.loading = false;
    }
    // Observed afresh, the end of the table is reported at the next frame
    // whether or not it left the view meanwhile: a tall window, or a
    // reader who scrolled to the end while this page was on its way (an
    // observer reports only crossings, and there was none to report).
    if (!more.isConnected || v !== PC.currentView() || !state.next) return;
    observer.unobserve(more);
    observer.observe(more);
  }

  // A run ticked (on) or not: the last two ticked are compared.
  function pick(state, name, on) {
    state.picked = state.picked.filter((x) => x !== name);
    if (on) state.picked.push(name);
    for (const dropped of state.picked.splice(0, Math.max(0, state.picked.length - 2))) {
      const box = [...document.querySelectorAll('#runs input.pick')].find((x) => x.value === dropped);
      if (box) box.checked = false;
    }
    state.compare.disabled = state.picked.length !== 2;
    clear(state.pickedNote).append(state.picked.length === 2 ? 'Compare the two ticked runs.'
      : state.picked.length === 1 ? 'Tick one more run to compare.' : 'Tick two runs to compare them.');
  }

  // Columns: heading, and the order a click on it asks for.
  const COLUMNS = [['Run · task', ''], ['Model', null], ['Outcome', 'score'], ['Steps', 'steps'],
    ['Calls', 'calls'], ['Errors', 'errors'], ['Tokens', 'tokens'], ['Records', 'records'],
    ['Failed', 'failed'], ['Last', 'newest'], ['Duration', 'longest']];

  function runsTable(tbody, state) {
    const heading = ([text, sort]) => {
      if (sort === null) return h('th', { scope: 'col' }, text);
      const p = new URLSearchParams(state.params);
      if (sort) p.set('sort', sort); else p.delete('sort');
      const on = (state.sort || '') === sort;
      return h('th', { scope: 'col', 'aria-sort': on ? (sort ? 'descending' : 'ascending') : null },
        h('a', { href: pageHref('runs', p), 'data-nav': '', 'data-sort': sort || 'name', class: on ? 'sorted' : null }, text));
    };
    return h('table', { class: 'grid runs-table' },
      h('thead', null, h('tr', null, COLUMNS.map(heading))), tbody);
  }

  // A run's outcome: its score, else why its model stopped.
  function outcomeText(o) {
    if (!isObj(o)) return '–';
    if (typeof o.score === 'number') return 'score ' + String(o.score);
    if (typeof o.stop === 'string') return o.stop;
    return '–';
  }

  function runRow(run, state) {
    const name = String(run.run ?? '');
    // The run page gets the path and this run only, never the filters.
    const p = onlyPath(pathOf(state.params));
    p.set('run', name);
    p.set('file', typeof run.file === 'string' ? run.file : globLiteral(name));
    const tokens = isObj(run.tokens) ? run.tokens : null;
    const cut = name.lastIndexOf('/');
    const task = typeof run.task === 'string' ? run.task : null;
    const model = typeof run.model === 'string' ? run.model : null;
    const outcome = isObj(run.outcome) ? run.outcome : {};
    const cost = typeof outcome.cost_usd === 'number' ? ` · $${outcome.cost_usd}` : '';
    const box = h('input', { type: 'checkbox', class: 'pick', value: name, 'aria-label': 'Pick ' + visible(name) + ' to compare',
      checked: state.picked.includes(name), onchange: (event) => pick(state, name, event.target.checked) });
    return h('tr', { class: 'run', 'data-run': name, 'data-file': p.get('file') },
      h('td', { class: 'run-name' }, box, h('a', { href: pageHref('run', p), 'data-nav': '', title: visible(name) },
        cut >= 0 ? h('span', { class: 'run-dir' }, nameNode(name.slice(0, cut + 1))) : null,
        nameNode(name.slice(cut + 1))),
      task !== null ? h('div', { class: 'run-task', title: visible(task) }, nameNode(task)) : null),
      h('td', { class: 'model', title: typeof run.agent === 'string' ? 'agent ' + visible(run.agent) : null },
        model !== null ? nameNode(model) : '–'),
      h('td', { class: 'outcome' }, nameNode(outcomeText(outcome) + cost)),
      h('td', { class: 'num steps' }, fmtInt(run.steps)),
      h('td', { class: 'num calls' }, fmtInt(run.tool_calls)),
      h('td', { class: 'num errors' + (run.tool_errors > 0 ? ' nonzero' : '') }, fmtInt(run.tool_errors)),
      h('td', { class: 'num tokens', title: tokens ? `input ${fmtInt(tokens.input)} · output ${fmtInt(tokens.output)}` : null },
        tokens ? fmtInt(tokens.total) : '–'),
      h('td', { class: 'num records' }, fmtInt(run.records)),
      h('td', { class: 'num failed' + (run.failed > 0 ? ' nonzero' : '') }, fmtInt(run.failed)),
      h('td', { class: 'time', title: 'first ' + fmtTs(run.first) }, fmtTs(run.last)),
      h('td', { class: 'num duration' }, fmtDuration(run.duration_seconds)));
  }

  PC.runsPage = runsPage;
})();
