// The pages of `pchronicle serve` are drawn in the browser from
// location.pathname and location.search (the query string is the page's
// whole state, so a URL reproduces a view).
//
// This script, loaded last, only picks the page and moves between pages:
// the pages are drawn by datasets.js, runs.js, conversation.js, compare.js
// and sql.js
// with the helpers of core.js, all of them parts of window.PC.
'use strict';

(() => {
  const PC = window.PC;
  const { $, clear, startView, currentView, refreshNow, hideError, drawHeader, startPolling } = PC;
  const PAGES = { '/datasets': 'datasets', '/runs': 'runs', '/run': 'run', '/compare': 'compare', '/sql': 'sql' };

  // --------------------------------------------------------- navigation

  function navigate(href, scroll) {
    history.pushState(null, '', href);
    render();
    if (scroll) window.scrollTo(0, 0);
  }

  // Our own page links move without reloading; anything with a modifier
  // key (new tab, download) is left to the browser.
  document.addEventListener('click', (event) => {
    const link = event.target.closest && event.target.closest('a[data-nav]');
    if (!link || event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    event.preventDefault();
    navigate(link.getAttribute('href'), true);
  });

  // A fragment (skip link) also fires popstate: redraw only a new URL.
  window.addEventListener('popstate', () => {
    const view = currentView();
    if (!view || view.url !== location.pathname + location.search) render();
  });

  // A new fragment (#L12 on the Run page) is the view's to follow.
  window.addEventListener('hashchange', () => {
    const view = currentView();
    if (view && view.onHash) view.onHash();
  });

  // Keys are the view's (the Run page's j/k, n/p and /), never while the
  // reader types or holds a modifier.
  document.addEventListener('keydown', (event) => {
    const view = currentView();
    if (!view || !view.keys || event.defaultPrevented) return;
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target instanceof Element ? event.target : null;
    if (target && target.closest('input, textarea, select, [contenteditable]')) return;
    view.keys(event);
  });

  function render() {
    const params = new URLSearchParams(location.search);
    const page = PAGES[location.pathname] || 'datasets';
    const v = startView(location.pathname + location.search);
    hideError();
    drawHeader(page, params);
    const main = clear($('#main'));
    ({ datasets: PC.datasetsPage, runs: PC.runsPage, run: PC.runPage, compare: PC.comparePage, sql: PC.sqlPage })[page](v, params, main);
    refreshNow();
  }

  // runs.js's filters, facets and bars move between pages with it too.
  PC.navigate = navigate;

  // ============================================================ startup

  startPolling();
  render();
})();
