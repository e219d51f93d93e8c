// Reading a long run on the Run page: a link to each record (#L12 scrolls
// to it and marks it; a "link" button copies it), keys (j/k next and
// previous record, n/p next and previous run of the list the reader came
// from, / search), the search's marks with next/previous match, and
// Download (the run's /api/records bytes as a JSONL file).
'use strict';

(() => {
  const PC = window.PC;
  const { h, clear, fmtInt, visible, pageHref, apiHref, onlyPath, pathOf, request, showError, currentView } = PC;
  const HASH = /^#L([1-9][0-9]{0,9})$/;
  // The runs of the list last drawn on the Runs page (n/p walk it).
  const LIST_KEY = 'pchronicle-runs-list';
  // Pages followed at most to reach a linked record.
  const PAGES_TO_FOLLOW = 100;
  const MARKS_AT_MOST = 5000;

  // ------------------------------------------------ the list of runs

  // Called by the Runs page as it draws rows: the path it lists, and its
  // runs in order ([run, file] each).
  function keepList(path, runs) {
    try { sessionStorage.setItem(LIST_KEY, JSON.stringify({ path, runs })); } catch (e) { /* full or off */ }
  }

  // The list, when it was drawn for the same path (its run names are
  // relative to it).
  function listed(path) {
    try {
      const list = JSON.parse(sessionStorage.getItem(LIST_KEY) || 'null');
      return list && list.path === path && Array.isArray(list.runs) ? list : null;
    } catch (e) { return null; }
  }

  // ----------------------------------------------------------- a run

  // run: { params, box (the records' feed), bar (where the controls go),
  // more (loads the next page; resolves false when there is none) }.
  function readingAids(v, run) {
    const query = run.params.get('contains') || '';
    const aids = { at: 0, hits: [], hit: -1, cut: false };
    const count = h('span', { id: 'match-count', role: 'status' });
    const prev = h('button', { type: 'button', id: 'match-prev', disabled: true, onclick: () => toHit(aids, -1, count) }, '↑ match');
    const next = h('button', { type: 'button', id: 'match-next', disabled: true, onclick: () => toHit(aids, 1, count) }, '↓ match');
    aids.buttons = [prev, next];
    const input = h('input', { type: 'search', id: 'run-search', name: 'contains', value: query,
      placeholder: 'text in this run (/)', 'aria-label': 'Mark text in this run', spellcheck: 'false', autocomplete: 'off' });
    const form = h('form', { id: 'run-search-form', role: 'search' }, input, h('button', { type: 'submit' }, 'Mark'));
    form.addEventListener('submit', (event) => {
      event.preventDefault();
      const p = new URLSearchParams(run.params);
      if (input.value) p.set('contains', input.value); else p.delete('contains');
      PC.navigate(pageHref('run', p) + location.hash, false);
    });
    const status = h('span', { id: 'download-note', role: 'status' });
    const download = h('button', { type: 'button', id: 'download' }, 'Download JSONL');
    download.addEventListener('click', () => {
      const p = onlyPath(pathOf(run.params));
      p.set('file', run.file);
      const name = (run.name.split('/').pop() || 'run').replace(/[^\w.-]+/g, '_');
      downloadRecords(p, name.endsWith('.jsonl') ? name : name + '.jsonl', download, status);
    });
    clear(run.bar).append(form, ' ', prev, next, ' ', count, ' ', download, ' ', status, neighbours(run));

    // The records were drawn again from the first: their marks went.
    aids.reset = () => {
      aids.hits = [];
      aids.hit = -1;
      aids.cut = false;
    };
    // Each page's records, as they are added.
    aids.added = (nodes) => {
      for (const node of nodes) linkButton(node);
      if (query) {
        for (const node of nodes) markIn(node, query, aids);
        showCount(aids, count);
      }
    };
    // The record the URL's fragment names: pages are read up to it.
    aids.follow = async () => {
      const m = HASH.exec(location.hash);
      if (!m) return;
      const n = Number(m[1]);
      for (let i = 0; i < PAGES_TO_FOLLOW && !recordNode(run.box, n); i += 1) {
        if (!(await run.more()) || v !== currentView()) break;
      }
      const node = recordNode(run.box, n);
      if (node) { aids.at = n; markRecord(run.box, node); }
    };
    v.onHash = () => aids.follow();
    v.keys = (event) => {
      switch (event.key) {
        case 'j': case 'k': {
          const nodes = [...run.box.querySelectorAll(':scope > [data-record]')];
          const at = nodes.findIndex((x) => Number(x.dataset.record) === aids.at);
          const to = nodes[event.key === 'j' ? at + 1 : Math.max(at - 1, 0)];
          if (!to) return;
          aids.at = Number(to.dataset.record);
          history.replaceState(null, '', location.pathname + location.search + '#L' + aids.at);
          markRecord(run.box, to);
          break;
        }
        case 'n': case 'p': {
          const href = neighbourHref(run, event.key === 'n' ? 1 : -1);
          if (href) PC.navigate(href, true);
          break;
        }
        case '/': input.focus(); input.select(); break;
        default: return;
      }
      event.preventDefault();
    };
    return aids;
  }

  const recordNode = (box, n) => box.querySelector(`:scope > [data-record="${n}"]`);

  // The record scrolled to and marked as the one read.
  function markRecord(box, node) {
    for (const x of box.querySelectorAll(':scope > .current')) x.classList.remove('current');
    node.classList.add('current');
    node.scrollIntoView({ block: 'start' });
  }

  // A record's "link" button: copies the address of the record.
  function linkButton(node) {
    const head = node.querySelector(':scope > .turn-head');
    if (!head || !node.dataset.record) return;
    const href = location.pathname + location.search + '#L' + node.dataset.record;
    const button = h('button', { type: 'button', class: 'record-link', title: 'Copy a link to this record',
      'data-href': href }, '#' + node.dataset.record);
    button.addEventListener('click', () => {
      history.replaceState(null, '', href);
      markRecord(node.parentNode, node);
      const url = location.origin + href;
      const done = () => { button.textContent = 'copied'; setTimeout(() => { button.textContent = '#' + node.dataset.record; }, 1500); };
      if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(url).then(done, () => window.prompt('Link to this record:', url));
      else window.prompt('Link to this record:', url);
    });
    const role = head.querySelector(':scope > .role');
    if (role) role.after(button); else head.prepend(button);
  }

  // Every match of query in node's text is marked (not in buttons, or in
  // a raw JSON shown on request).
  function markIn(node, query, aids) {
    const walker = document.createTreeWalker(node, NodeFilter.SHOW_TEXT, {
      acceptNode: (t) => (t.parentElement.closest('button, .raw, mark') ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT),
    });
    const texts = [];
    for (let t = walker.nextNode(); t; t = walker.nextNode()) if (t.data.includes(query)) texts.push(t);
    for (const text of texts) {
      const parts = text.data.split(query);
      const pieces = [];
      parts.forEach((part, i) => {
        if (part) pieces.push(document.createTextNode(part));
        if (i === parts.length - 1) return;
        if (aids.hits.length >= MARKS_AT_MOST) { aids.cut = true; pieces.push(document.createTextNode(query)); return; }
        const mark = h('mark', { class: 'hit' }, query);
        aids.hits.push(mark);
        pieces.push(mark);
      });
      text.replaceWith(...pieces);
    }
  }

  function showCount(aids, count) {
    const n = aids.hits.length;
    for (const b of aids.buttons) b.disabled = n === 0;
    count.setAttribute('data-matches', String(n));
    clear(count).append(n === 0 ? 'no match in the records read'
      : (aids.hit >= 0 ? `match ${fmtInt(aids.hit + 1)} of ` : '') + fmtInt(n) + (aids.cut ? '+' : '') + ' matches in the records read');
  }

  // The next (or previous) match, unfolded and scrolled to.
  function toHit(aids, step, count) {
    if (!aids.hits.length) return;
    if (aids.hit >= 0) aids.hits[aids.hit].classList.remove('at');
    aids.hit = (aids.hit + step + aids.hits.length) % aids.hits.length;
    const mark = aids.hits[aids.hit];
    const folded = mark.closest('.collapsed');
    if (folded) { const toggle = folded.parentNode.querySelector(':scope > .show-all'); if (toggle) toggle.click(); }
    for (let d = mark.closest('details'); d; d = d.parentElement.closest('details')) d.open = true;
    mark.classList.add('at');
    mark.scrollIntoView({ block: 'center' });
    showCount(aids, count);
  }

  // ------------------------------------------------ runs around this one

  function neighbourHref(run, step) {
    const list = listed(pathOf(run.params));
    if (!list) return null;
    const at = list.runs.findIndex((r) => Array.isArray(r) && r[0] === run.name);
    const to = at < 0 ? null : list.runs[at + step];
    if (!Array.isArray(to)) return null;
    const p = onlyPath(pathOf(run.params));
    p.set('run', String(to[0]));
    p.set('file', String(to[1]));
    return pageHref('run', p);
  }

  function neighbours(run) {
    const [before, after] = [neighbourHref(run, -1), neighbourHref(run, 1)];
    if (!before && !after) return null;
    return h('span', { id: 'run-neighbours' }, ' ',
      before ? h('a', { id: 'run-prev', href: before, 'data-nav': '', title: 'previous run of the list (p)' }, '← previous run') : null,
      before && after ? ' · ' : null,
      after ? h('a', { id: 'run-next', href: after, 'data-nav': '', title: 'next run of the list (n)' }, 'next run →') : null);
  }

  // ---------------------------------------------------------- download

  // Every record `params` selects, a page of /api/records at a time, saved
  // as one file (a link would carry the token; the pages are fetched with
  // it in a header instead).
  async function downloadRecords(params, filename, button, status) {
    const v = currentView();
    const parts = [];
    let after = null;
    let bytes = 0;
    button.disabled = true;
    try {
      do {
        const p = new URLSearchParams(params);
        p.set('limit', '10000');
        if (after) p.set('after', after);
        const page = await request(apiHref('records', p));
        parts.push(page.text);
        bytes += page.text.length;
        after = page.headers.get('X-Next-Cursor');
        status.textContent = `${fmtInt(bytes)} characters read…`;
      } while (after && v === currentView());
      if (v !== currentView()) return;
      const url = URL.createObjectURL(new Blob(parts, { type: 'application/x-ndjson' }));
      const link = document.createElement('a');
      link.href = url;
      link.download = filename;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
      status.textContent = `saved ${visible(filename)}`;
    } catch (e) {
      if (v === currentView()) { status.textContent = 'not saved'; showError(e); }
    } finally {
      button.disabled = false;
    }
  }

  Object.assign(PC, { readingAids, keepList, downloadRecords });
})();
