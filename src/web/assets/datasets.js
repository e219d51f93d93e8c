// The Datasets page: what a path holds, one row per entry, and the
// stats of everything under it.
'use strict';

(() => {
  const PC = window.PC;
  const { arr, isObj, h, clear, visible, nameNode, fmtInt, fmtBytes, fmtRange, pathOf, joinPath,
    onlyPath, filtersOf, hasFilters, pageHref, apiHref, parseJson, load, settle, setTwin, section,
    loading, drawWarnings } = PC;

  function datasetsPage(v, params, main) {
    const path = pathOf(params);
    const treeUrl = apiHref('explorer/tree', onlyPath(path));
    const statsUrl = apiHref('stats', filtersOf(params));
    setTwin(treeUrl);
    const listing = section('listing', 'Contents', loading());
    const stats = section('stats', 'Stats', loading());
    main.append(
      h('p', { class: 'actions' },
        h('a', { id: 'open-in-runs', class: 'button', href: pageHref('runs', onlyPath(path)), 'data-nav': '' }, 'Open in Runs'),
        h('a', { id: 'open-in-sql', class: 'button', href: pageHref('sql', onlyPath(path)), 'data-nav': '' }, 'Query in SQL')),
      listing, stats);
    v.refresh = async () => {
      const [[tree, st], failed] = await settle([load(v, 'tree', treeUrl), load(v, 'stats', statsUrl)]);
      if (tree) drawListing(listing, parseJson(tree.text), path);
      if (st) drawStats(stats, parseJson(st.text), statsUrl, hasFilters(params));
      if (failed) throw failed;
    };
  }

  function drawListing(box, listing, path) {
    clear(box).append(h('h2', { id: 'listing-h' }, 'Contents'));
    if (listing.kind === 'dataset' || listing.kind === 'file') {
      box.append(h('p', { id: 'leaf-note', class: 'note' }, listing.kind === 'dataset'
        ? 'This path is a dataset (a leaf): it is opened as a whole, its interior is not listed.'
        : 'This path is a file.'));
    }
    const entries = arr(listing.entries);
    const head = ['Name', 'Kind', 'Format', 'Records', 'Failed', 'Time range', 'Size'];
    box.append(h('div', { class: 'table-wrap' }, h('table', { id: 'entries', class: 'grid' },
      h('caption', { class: 'vh' }, 'Entries of ', path ? visible(path) : 'the root'),
      h('thead', null, h('tr', null, head.map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, entries.map((e) => entryRow(e, path))))));
    if (!entries.length) box.append(h('p', { class: 'empty' }, 'Nothing here.'));
    box.append(...drawWarnings(listing.warnings, listing.truncated,
      'The listing stopped at --max-entries: not every child is shown.'));
  }

  function entryRow(entry, path) {
    const name = String(entry.name ?? '');
    // A leaf or file lists itself as `.`: its links point at path itself.
    const target = name === '.' ? path : joinPath(path, name);
    const shown = name === '.' ? (path.split('/').pop() || '.') : name;
    const isDataset = entry.kind === 'dataset';
    let label = nameNode(shown);
    if (entry.kind === 'directory') {
      label = h('a', { href: pageHref('datasets', onlyPath(target)), 'data-nav': '', class: 'dir-link' }, label, '/');
    } else if (isDataset || (entry.kind === 'file' && entry.format)) {
      label = h('a', { href: pageHref('runs', onlyPath(target)), 'data-nav': '', title: 'Open in Runs' }, label);
    }
    const counting = entry.stats_origin === 'counting' && entry.record_count === null;
    const origin = isDataset
      ? h('span', { class: 'origin' + (entry.trusted ? '' : ' untrusted'), title: String(entry.fingerprint ?? '') },
        ' · ', String(entry.stats_origin ?? ''))
      : null;
    const failed = isDataset ? entry.failed_count : null;
    return h('tr', { class: 'entry', 'data-name': name, 'data-kind': String(entry.kind ?? '') },
      h('td', { class: 'name-cell' }, label),
      h('td', { class: 'kind' }, String(entry.kind ?? ''), origin),
      h('td', { class: 'format' }, entry.format ? String(entry.format) : ''),
      h('td', { class: 'records num' }, isDataset ? (counting ? 'counting…' : fmtInt(entry.record_count)) : ''),
      h('td', { class: 'failed num' + (failed > 0 ? ' nonzero' : '') }, isDataset ? fmtInt(failed) : ''),
      h('td', { class: 'range' }, isDataset ? fmtRange(entry.min_timestamp, entry.max_timestamp) : ''),
      h('td', { class: 'size num', title: entry.kind === 'file' ? fmtInt(entry.size) + ' bytes' : null },
        entry.kind === 'file' ? fmtBytes(entry.size) : ''));
  }

  function drawStats(box, st, url, filtered) {
    const row = (label, id, value) => h('div', null, h('dt', null, label), h('dd', { id }, value));
    const formats = Object.entries(isObj(st.formats) ? st.formats : {});
    clear(box).append(
      h('h2', { id: 'stats-h' }, 'Stats', filtered ? ' (filtered)' : ''),
      h('dl', { class: 'stats-grid' },
        row('Records', 'stats-records', fmtInt(st.record_count)),
        row('Failed', 'stats-failed', fmtInt(st.failed_count)),
        row('Sources', 'stats-sources', fmtInt(st.sources) + ' (' + fmtInt(st.datasets) + ' datasets, ' +
          fmtInt(st.files) + ' files)'),
        row('Time range', 'stats-range', fmtRange(st.min_timestamp, st.max_timestamp)),
        st.untrusted_sources > 0 ? row('Untrusted sources', 'stats-untrusted', fmtInt(st.untrusted_sources)) : null,
        st.unreadable_sources > 0 ? row('Unreadable sources', 'stats-unreadable', fmtInt(st.unreadable_sources)) : null));
    if (st.counting_sources > 0) {
      box.append(h('div', { id: 'stats-counting', class: 'note' },
        fmtInt(st.counting_sources), ' sources are still being counted in the background: the totals are partial.',
        arr(st.counting).length ? h('details', null, h('summary', null, 'Which'),
          h('ul', null, arr(st.counting).map((f) => h('li', null, nameNode(f))))) : null));
    }
    if (formats.length) {
      box.append(h('table', { id: 'stats-formats', class: 'grid compact' },
        h('caption', null, 'By format'),
        h('thead', null, h('tr', null, ['Format', 'Sources', 'Records', 'Failed'].map((t) => h('th', { scope: 'col' }, t)))),
        h('tbody', null, formats.map(([format, f]) => h('tr', { 'data-format': format },
          h('th', { scope: 'row' }, nameNode(format)), h('td', { class: 'num' }, fmtInt(f.sources)),
          h('td', { class: 'num' }, fmtInt(f.record_count)), h('td', { class: 'num' }, fmtInt(f.failed_count)))))));
    }
    const indexes = arr(st.indexes);
    if (indexes.length) {
      box.append(h('details', { id: 'stats-indexes' }, h('summary', null, fmtInt(indexes.length), ' sidecar indexes'),
        h('ul', null, indexes.map((ix) => h('li', null, nameNode(ix.file ?? ''), ' by ',
          arr(ix.key).join(', ') || '?', ': ', String(ix.state ?? ''), ', ', fmtInt(ix.rows), ' rows')))));
    }
    box.append(...drawWarnings(st.warnings, st.truncated, 'A traversal bound was hit: the totals cover only what was read.'),
      h('p', { class: 'twin' }, PC.twinLink(url, 'These stats as JSON')));
  }

  PC.datasetsPage = datasetsPage;
})();
