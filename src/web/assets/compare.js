// The Compare page: two runs side by side (/compare?path=P&a=RUN&b=RUN),
// their summaries, then their steps aligned one to one, each pair marked
// where the tools called or the results they got differ. Drawn from
// /api/compare, its JSON twin, a window of steps at a time.
'use strict';

(() => {
  const PC = window.PC;
  const { arr, isObj, h, clear, visibleText, nameNode, fmtInt, fmtTs, fmtDuration, pathOf,
    onlyPath, pageHref, apiHref, globLiteral, parseJson, load, setTwin, section, loading } = PC;

  function comparePage(v, params, main) {
    const path = pathOf(params);
    const a = params.get('a') || '';
    const b = params.get('b') || '';
    if (!a || !b) {
      main.append(h('p', { id: 'no-run', class: 'empty' }, 'This address does not name two runs (it needs ',
        h('code', null, 'a='), ' and ', h('code', null, 'b='), '). ',
        h('a', { href: pageHref('runs', onlyPath(path)), 'data-nav': '' }, 'Tick two runs in the list'), '.'));
      return;
    }
    // Two runs are compared whole, as the Run page reads them.
    const api = onlyPath(path);
    api.set('a', a);
    api.set('b', b);
    const from = Number(params.get('from'));
    if (Number.isInteger(from) && from > 1) api.set('from', String(from));
    const url = apiHref('compare', api);
    setTwin(url);
    const sides = section('compare-summary', 'Two runs', loading());
    const steps = section('compare-steps', 'Steps', loading());
    main.append(sides, steps);
    // Drawn once: a comparison reads both runs whole, and is not polled.
    let drawn = false;
    v.refresh = async () => {
      if (drawn) return;
      const answer = await load(v, 'compare', url);
      if (!answer) return;
      drawn = true;
      const data = parseJson(answer.text);
      drawSides(sides, data, params);
      drawSteps(steps, data, params);
    };
  }

  // The Run page of one side, at record n (when given).
  function runHref(params, side, n) {
    const run = isObj(side) && isObj(side.summary) ? side.summary : {};
    const p = onlyPath(pathOf(params));
    p.set('run', String(run.run ?? ''));
    p.set('file', typeof run.file === 'string' ? run.file : globLiteral(String(run.run ?? '')));
    return pageHref('run', p) + (n ? '#L' + n : '');
  }

  const outcomeOf = (o) => !isObj(o) ? '–'
    : typeof o.score === 'number' ? 'score ' + o.score : typeof o.stop === 'string' ? o.stop : '–';

  // Each figure of both runs, in a row; a row whose two values differ is
  // marked.
  const FIGURES = [
    ['Task', (r) => r.task ?? '–'],
    ['Model', (r) => r.model ?? '–'],
    ['Agent', (r) => r.agent ?? '–'],
    ['Outcome', (r) => outcomeOf(r.outcome)],
    ['Cost', (r) => (isObj(r.outcome) && typeof r.outcome.cost_usd === 'number' ? '$' + r.outcome.cost_usd : '–')],
    ['Steps', (r) => fmtInt(r.steps)],
    ['Tool calls', (r) => fmtInt(r.tool_calls)],
    ['Tool errors', (r) => fmtInt(r.tool_errors)],
    ['Tokens', (r) => (isObj(r.tokens) ? fmtInt(r.tokens.total) : '–')],
    ['Records', (r) => fmtInt(r.records)],
    ['Failed', (r) => fmtInt(r.failed)],
    ['First', (r) => fmtTs(r.first)],
    ['Duration', (r) => fmtDuration(r.duration_seconds)],
  ];

  function drawSides(box, data, params) {
    const runA = isObj(data.a) && isObj(data.a.summary) ? data.a.summary : {};
    const runB = isObj(data.b) && isObj(data.b.summary) ? data.b.summary : {};
    const head = (label, side, run) => h('th', { scope: 'col' }, label + ' · ',
      h('a', { href: runHref(params, side), 'data-nav': '', class: 'compare-run' }, nameNode(String(run.run ?? ''))));
    clear(box).append(h('h2', { id: 'compare-summary-h' }, 'Two runs'),
      h('table', { class: 'grid compare-table', id: 'compare-figures' },
        h('thead', null, h('tr', null, h('th', { scope: 'col' }, ''), head('A', data.a, runA), head('B', data.b, runB))),
        h('tbody', null, FIGURES.map(([label, value]) => {
          const [x, y] = [String(value(runA)), String(value(runB))];
          return h('tr', { class: x === y ? null : 'differs', 'data-figure': label },
            h('th', { scope: 'row' }, label), h('td', null, nameNode(x)), h('td', null, nameNode(y)));
        }))));
  }

  function drawSteps(box, data, params) {
    const pairs = arr(data.pairs);
    const stepsOf = (side) => (isObj(side) ? Number(side.steps) || 0 : 0);
    const only = h('input', { type: 'checkbox', id: 'only-differing' });
    const table = h('table', { class: 'grid compare-table', id: 'compare-pairs' },
      h('thead', null, h('tr', null, h('th', { scope: 'col' }, 'Step'), h('th', { scope: 'col' }, 'A'),
        h('th', { scope: 'col' }, 'B'))),
      h('tbody', null, pairs.map((pair) => pairRow(pair, data, params))));
    only.addEventListener('change', () => table.classList.toggle('only-differing', only.checked));
    const from = Number(data.from) || 1;
    const last = from + pairs.length - 1;
    const nav = [];
    if (from > 1) nav.push(h('a', { id: 'compare-prev', 'data-nav': '', href: windowHref(params, Math.max(1, from - WINDOW)) }, '← earlier steps'));
    if (typeof data.next_from === 'number') nav.push(h('a', { id: 'compare-next', 'data-nav': '', href: windowHref(params, data.next_from) }, 'later steps →'));
    clear(box).append(h('h2', { id: 'compare-steps-h' }, 'Steps'),
      h('p', { id: 'compare-count', 'data-differing': String(data.differing) },
        pairs.length ? `Steps ${fmtInt(from)}–${fmtInt(last)} of ${fmtInt(stepsOf(data.a))} (A) and ${fmtInt(stepsOf(data.b))} (B): ` +
          `${fmtInt(data.differing)} differ. ` : 'Neither run has a step here. ',
        h('label', null, only, ' only those that differ')),
      table, nav.length ? h('p', { class: 'more-box' }, nav) : null);
  }

  // Steps the API answers at once when not told (`limit`).
  const WINDOW = 100;

  function windowHref(params, from) {
    const p = new URLSearchParams(params);
    if (from > 1) p.set('from', String(from)); else p.delete('from');
    return pageHref('compare', p);
  }

  function pairRow(pair, data, params) {
    const differs = [pair.calls_differ ? 'calls' : '', pair.results_differ ? 'results' : ''].filter(Boolean);
    return h('tr', { class: 'pair' + (differs.length ? ' differs' : ''), 'data-step': String(pair.step),
      'data-differs': differs.join(' ') || null },
    h('th', { scope: 'row', class: 'num' }, fmtInt(pair.step),
      differs.length ? h('div', { class: 'differs-note' }, differs.join(', ') + ' differ') : null),
    h('td', { class: 'side-a' }, stepCell(pair.a, pair.b, data.a, params)),
    h('td', { class: 'side-b' }, stepCell(pair.b, pair.a, data.b, params)));
  }

  // One run's step; what differs from its twin's is marked.
  function stepCell(step, twin, side, params) {
    if (!isObj(step)) return h('p', { class: 'empty' }, 'no such step');
    const other = isObj(twin) ? twin : { calls: [], results: [] };
    const calls = arr(step.calls);
    const results = arr(step.results);
    const sameCall = (c, i) => isObj(arr(other.calls)[i]) && other.calls[i].name === c.name && other.calls[i].arguments === c.arguments;
    const sameResult = (r, i) => isObj(arr(other.results)[i]) && other.results[i].output === r.output && other.results[i].error === r.error;
    return [
      h('a', { class: 'step-link', href: runHref(params, side, step.record), 'data-nav': '' }, 'record ' + fmtInt(step.record)),
      typeof step.said === 'string' ? h('div', { class: 'text step-said', dir: 'auto' }, visibleText(step.said)) : null,
      calls.map((c, i) => h('div', { class: 'tool-call' + (sameCall(c, i) ? '' : ' differs') },
        h('div', { class: 'tool-head' }, h('span', { class: 'label' }, 'Tool call'), h('span', { class: 'tool-name' }, nameNode(String(c.name ?? '?')))),
        h('pre', { class: 'tool-args', dir: 'auto' }, visibleText(String(c.arguments ?? ''))))),
      results.map((r, i) => h('div', { class: 'tool-result' + (r.error ? ' tool-error' : '') + (sameResult(r, i) ? '' : ' differs') },
        h('div', { class: 'tool-head' }, h('span', { class: 'label' }, r.error ? 'Tool error' : 'Tool result'),
          typeof r.call === 'string' ? [' of ', h('span', { class: 'result-of' }, nameNode(r.call))] : null),
        h('pre', { class: 'tool-output', dir: 'auto' }, visibleText(String(r.output ?? ''))))),
      step.unlisted_calls > 0 || step.unlisted_results > 0 ? h('p', { class: 'note' },
        `${fmtInt(step.unlisted_calls)} more calls and ${fmtInt(step.unlisted_results)} more results (on the Run page)`) : null,
    ];
  }

  PC.comparePage = comparePage;
})();
