// The Run page: a run's records read as a conversation. Each record is
// recognised by its shape (OpenAI or Anthropic messages, Claude Code and
// Codex lines, ATIF trajectories, failed records) and drawn as turns;
// whatever matches none is shown as JSON.
'use strict';

(() => {
  const PC = window.PC;
  const { arr, isObj, h, clear, visible, visibleText, nameNode, fmtInt, fmtTs, fmtDuration, tsKey,
    pretty, pathOf, onlyPath, pageHref, apiHref, globLiteral, request, noteFreshness, currentView,
    load, showError, setTwin } = PC;
  const ROLES = new Set(['user', 'assistant', 'system', 'developer', 'tool', 'summary']);
  const RECORDS_PAGE = 200;
  const LONG_LINES = 40;
  const LONG_CHARS = 6000;

  function runPage(v, params, main) {
    const path = pathOf(params);
    const run = params.get('run') || '';
    const file = params.get('file') || (run ? globLiteral(run) : '');
    if (!file) {
      // A link cut short, or typed: it names no run to read.
      main.append(h('p', { id: 'no-run', class: 'empty' }, 'This address names no run (it has neither ',
        h('code', null, 'run='), ' nor ', h('code', null, 'file='), '). ',
        h('a', { href: pageHref('runs', onlyPath(path)), 'data-nav': '' }, 'Pick one from the runs here'), '.'));
      return;
    }
    const base = onlyPath(path);
    if (file) base.set('file', file);
    base.set('annotate', '1');
    base.set('failed', '1');
    base.set('limit', String(RECORDS_PAGE));
    const firstUrl = apiHref('records', base);
    setTwin(firstUrl);
    const summary = h('section', { id: 'run-summary', 'aria-label': 'Run summary' });
    const conversation = h('div', { id: 'conversation', role: 'feed', 'aria-label': 'Records of the run' });
    const more = h('button', { id: 'more', type: 'button', hidden: true }, 'Load more records');
    const bar = h('div', { id: 'run-tools', role: 'toolbar', 'aria-label': 'Reading the run' });
    main.append(summary, bar, conversation, h('p', { class: 'more-box' }, more));
    let convo = newConvo(run || path);
    const aids = PC.readingAids(v, { params, box: conversation, bar, name: run || path, file, more: () => loadMore() });

    const setCursor = (cursor) => { convo.cursor = cursor; more.hidden = !cursor; };
    v.refresh = async () => {
      if (convo.pages > 1) return; // pages the reader appended are left alone
      const page = await load(v, 'records', firstUrl);
      if (!page) return;
      convo = newConvo(run || path);
      clear(conversation);
      aids.reset();
      aids.added(appendRecords(page.text, convo, conversation));
      convo.pages = 1;
      setCursor(page.headers.get('X-Next-Cursor'));
      drawRunSummary(summary, convo, path);
      await aids.follow();
    };
    // The next page, appended; false when there is none (or it failed).
    let loading = null;
    const loadMore = () => {
      if (!loading) loading = nextPage().finally(() => { loading = null; });
      return loading;
    };
    const nextPage = async () => {
      if (!convo.cursor) return false;
      const next = new URLSearchParams(base);
      next.set('after', convo.cursor);
      more.disabled = true;
      more.textContent = 'Loading…';
      try {
        const page = await request(apiHref('records', next));
        if (v !== currentView()) return false;
        noteFreshness(page.headers);
        aids.added(appendRecords(page.text, convo, conversation));
        convo.pages += 1;
        setCursor(page.headers.get('X-Next-Cursor'));
        drawRunSummary(summary, convo, path);
        return true;
      } catch (e) {
        if (v === currentView()) showError(e);
        return false;
      } finally {
        more.disabled = false;
        more.textContent = 'Load more records';
      }
    };
    more.addEventListener('click', () => loadMore());
  }

  function newConvo(name) {
    return { name, calls: new Map(), records: 0, failed: 0, first: null, last: null, tokens: 0,
      pages: 0, cursor: null, seq: 0 };
  }

  function drawRunSummary(box, convo, path) {
    const item = (label, id, value) => h('div', null, h('dt', null, label), h('dd', { id }, value));
    clear(box).append(
      h('h2', null, nameNode(convo.name || 'every record')),
      h('dl', { class: 'stats-grid' },
        item('Records loaded', 'run-records', fmtInt(convo.records) + (convo.cursor ? ' (more follow)' : '')),
        item('Failed', 'run-failed', fmtInt(convo.failed)),
        item('First', 'run-first', fmtTs(convo.first)),
        item('Last', 'run-last', fmtTs(convo.last)),
        item('Duration', 'run-duration', convo.first && convo.last
          ? fmtDuration((tsKey(convo.last) - tsKey(convo.first)) / 1000) : '–'),
        item('Tokens', 'run-tokens', convo.tokens ? fmtInt(convo.tokens) : '–')),
      h('p', null, h('a', { id: 'back-to-runs', href: pageHref('runs', onlyPath(path)), 'data-nav': '' }, '← All runs here')));
  }

  // JSON Lines: each line parsed alone; one that does not parse is shown
  // as the text it is. Each record is numbered in the run (`#L12`); the
  // records drawn are returned.
  function appendRecords(text, convo, box) {
    const drawn = [];
    for (const line of text.split('\n')) {
      if (!line.trim()) continue;
      let node;
      try { node = recordElement(JSON.parse(line), convo); } catch (e) {
        if (!(e instanceof SyntaxError)) throw e;
        convo.records += 1;
        node = h('div', { class: 'turn unparsed', 'data-role': 'record' },
          h('div', { class: 'turn-head' }, h('span', { class: 'role' }, 'unreadable line')), longText('pre', 'text', line));
      }
      node.setAttribute('data-record', String(convo.records));
      node.id = 'L' + convo.records;
      drawn.push(node);
    }
    box.append(...drawn);
    return drawn;
  }

  function noteRecord(item, convo) {
    convo.records += 1;
    const ts = item.timestamp;
    if (tsKey(ts) !== null) {
      if (convo.first === null || tsKey(ts) < tsKey(convo.first)) convo.first = ts;
      if (convo.last === null || tsKey(ts) > tsKey(convo.last)) convo.last = ts;
    }
  }

  function recordElement(item, convo) {
    const annotated = isObj(item) && '_file_' in item;
    const wrapper = annotated ? item : { record: item };
    noteRecord(wrapper, convo);
    const origin = annotated ? visible(item._file_) + ':' + item.line : '';
    if (wrapper.failed) {
      convo.failed += 1;
      return h('div', { class: 'turn failed-record', 'data-role': 'record' },
        h('div', { class: 'turn-head' }, h('span', { class: 'role' }, 'failed record'),
          h('time', null, fmtTs(wrapper.timestamp)), h('span', { class: 'origin' }, origin)),
        h('p', { class: 'note' }, 'This record is not valid JSON; its stored text',
          wrapper.raw_truncated ? ' (cut short: it is longer than the server shows)' : '', ':'),
        longText('pre', 'failed-raw', String(wrapper.raw ?? '')));
    }
    const record = wrapper.record;
    if (isObj(record) && isAtif(record)) return trajectoryElement(record, wrapper, origin, convo);
    const model = interpret(record);
    return turnElement(model, record, wrapper.timestamp ?? model.time, origin, convo, '');
  }

  // ---------------------------------------------- record shapes

  // The shapes are tried in order; whatever matches none is shown as JSON.
  function interpret(rec) {
    if (!isObj(rec)) return fallback(rec);
    if (typeof rec.role === 'string' && ('content' in rec || 'tool_calls' in rec)) return chatMessage(rec);
    if (['user', 'assistant', 'system', 'summary'].includes(rec.type)) return claudeCodeLine(rec);
    if (rec.type === 'response_item' && isObj(rec.payload)) {
      const model = codexItem(rec.payload);
      if (model) return { ...model, time: rec.timestamp };
    }
    return codexItem(rec) || fallback(rec);
  }

  function fallback(rec) {
    const label = isObj(rec) && typeof rec.type === 'string'
      ? rec.type + (isObj(rec.payload) && typeof rec.payload.type === 'string' ? ' · ' + rec.payload.type : '')
      : 'record';
    return { role: 'record', label, blocks: [{ t: 'json', value: rec }], usage: usageOf(rec), time: null };
  }

  // OpenAI chat messages, Anthropic messages and Codex `message` items
  // share role + content; their blocks differ only by type names.
  function chatMessage(m) {
    const blocks = contentBlocks(m.content);
    if (typeof m.reasoning_content === 'string') blocks.unshift({ t: 'reasoning', text: m.reasoning_content });
    for (const c of arr(m.tool_calls)) {
      const fn = isObj(c) && isObj(c.function) ? c.function : c;
      blocks.push({ t: 'call', id: c && c.id, name: fn && fn.name, args: fn && fn.arguments });
    }
    // An OpenAI tool message: its content is the result of one call.
    if ((m.role === 'tool' || m.role === 'function') && !blocks.some((b) => b.t === 'result')) {
      return { role: 'tool', blocks: [{ t: 'result', id: m.tool_call_id, content: resultText(m.content), name: m.name }],
        usage: usageOf(m), time: m.timestamp ?? m.ts };
    }
    return { role: m.role, blocks, usage: usageOf(m), time: m.timestamp ?? m.ts };
  }

  function contentBlocks(content) {
    if (content === null || content === undefined) return [];
    if (typeof content === 'string') return [{ t: 'text', text: content }];
    if (!Array.isArray(content)) return contentBlocks([content]);
    return content.map((part) => {
      if (typeof part === 'string') return { t: 'text', text: part };
      if (!isObj(part)) return { t: 'json', value: part };
      switch (part.type) {
        case 'text': case 'input_text': case 'output_text':
          return { t: 'text', text: String(part.text ?? '') };
        case 'refusal': return { t: 'text', text: String(part.refusal ?? '') };
        case 'tool_use': case 'server_tool_use':
          return { t: 'call', id: part.id, name: part.name, args: part.input };
        case 'tool_result':
          return { t: 'result', id: part.tool_use_id, content: resultText(part.content), error: part.is_error === true };
        case 'thinking': return { t: 'reasoning', text: String(part.thinking ?? '') };
        case 'redacted_thinking': return { t: 'reasoning', text: '(redacted)' };
        case 'reasoning_text': case 'summary_text': return { t: 'reasoning', text: String(part.text ?? '') };
        case 'image': case 'image_url': case 'input_image':
          // Never fetched or drawn: an image is only named.
          return { t: 'note', text: '[image]' };
        default: return { t: 'json', value: part };
      }
    });
  }

  function resultText(content) {
    if (typeof content === 'string') return content;
    if (Array.isArray(content)) {
      return content.map((b) => (isObj(b) && typeof b.text === 'string' ? b.text
        : typeof b === 'string' ? b : pretty(b))).join('\n');
    }
    return content === undefined ? '' : pretty(content);
  }

  function claudeCodeLine(rec) {
    const msg = isObj(rec.message) ? rec.message : null;
    let blocks = msg ? contentBlocks(msg.content) : [];
    if (rec.type === 'summary') blocks = [{ t: 'text', text: String(rec.summary ?? '') }];
    else if (!msg && rec.content !== undefined) blocks = contentBlocks(rec.content);
    const role = msg && typeof msg.role === 'string' ? msg.role : rec.type;
    return { role, label: rec.isSidechain ? role + ' (sidechain)' : role, blocks, usage: usageOf(rec), time: rec.timestamp };
  }

  function codexItem(item) {
    switch (item.type) {
      case 'message': return chatMessage(item);
      case 'function_call': case 'custom_tool_call':
        return { role: 'assistant', blocks: [{ t: 'call', id: item.call_id ?? item.id, name: item.name,
          args: item.arguments ?? item.input }] };
      case 'local_shell_call':
        return { role: 'assistant', blocks: [{ t: 'call', id: item.call_id ?? item.id, name: 'local_shell', args: item.action }] };
      case 'function_call_output': case 'custom_tool_call_output': case 'local_shell_call_output':
        return { role: 'tool', blocks: [{ t: 'result', id: item.call_id, content: codexOutput(item.output) }] };
      case 'reasoning':
        return { role: 'assistant', label: 'reasoning', blocks: [...arr(item.summary), ...arr(item.content)]
          .map((s) => ({ t: 'reasoning', text: isObj(s) ? String(s.text ?? '') : String(s) })) };
      default: return null;
    }
  }

  // Codex often wraps a tool's output as JSON text {"output": …}.
  function codexOutput(output) {
    if (typeof output !== 'string') return resultText(output);
    try {
      const inner = JSON.parse(output);
      if (isObj(inner) && typeof inner.output === 'string') return inner.output;
    } catch (e) { /* plain text */ }
    return output;
  }

  function isAtif(rec) {
    return typeof rec.schema_version === 'string' && rec.schema_version.startsWith('ATIF-v1') && Array.isArray(rec.steps);
  }

  function atifStep(step) {
    const role = { user: 'user', agent: 'assistant', system: 'system' }[step.source] || 'record';
    const blocks = [];
    if (typeof step.reasoning_content === 'string') blocks.push({ t: 'reasoning', text: step.reasoning_content });
    blocks.push(...contentBlocks(step.message));
    for (const c of arr(step.tool_calls)) {
      blocks.push({ t: 'call', id: c && c.tool_call_id, name: c && c.function_name, args: c && c.arguments });
    }
    const observation = isObj(step.observation) ? step.observation : {};
    for (const r of arr(observation.results)) {
      blocks.push({ t: 'result', id: r && r.source_call_id, content: resultText(r && r.content) });
    }
    const label = (step.source ? String(step.source) : role) + (step.step_id !== undefined ? ' · step ' + step.step_id : '');
    return { role, label, blocks, usage: usageOf({ usage: step.metrics }), time: step.timestamp };
  }

  // usage.{input,output,prompt,completion,total}_tokens, top level or
  // under `message`; null when there is none.
  function usageOf(rec) {
    if (!isObj(rec)) return null;
    const u = isObj(rec.usage) ? rec.usage : isObj(rec.message) && isObj(rec.message.usage) ? rec.message.usage : null;
    if (!u) return null;
    const num = (...keys) => keys.map((k) => u[k]).find((x) => typeof x === 'number') ?? null;
    const input = num('input_tokens', 'prompt_tokens');
    const output = num('output_tokens', 'completion_tokens');
    let total = num('total_tokens');
    if (total === null && input !== null && output !== null) total = input + output;
    const cached = num('cache_read_input_tokens', 'cached_tokens');
    if (input === null && output === null && total === null) return null;
    return { input, output, total, cached };
  }

  // ---------------------------------------------- drawing a turn

  function turnElement(model, raw, time, origin, convo, extraClass) {
    const role = ROLES.has(model.role) ? model.role : 'record';
    const turn = h('div', { class: 'turn' + extraClass, 'data-role': role });
    if (model.usage && model.usage.total !== null) convo.tokens += model.usage.total;
    turn.append(h('div', { class: 'turn-head' },
      h('span', { class: 'role' }, visible(model.label || model.role || 'record')),
      h('time', null, fmtTs(typeof time === 'string' ? time : null)),
      origin ? h('span', { class: 'origin' }, origin) : null,
      model.usage ? usageNode(model.usage) : null,
      rawToggle(turn, raw)));
    for (const block of model.blocks) turn.append(blockElement(block, convo));
    if (!model.blocks.length) turn.append(h('p', { class: 'empty' }, '(no content)'));
    return turn;
  }

  function usageNode(u) {
    const parts = [];
    if (u.input !== null) parts.push('in ' + fmtInt(u.input));
    if (u.output !== null) parts.push('out ' + fmtInt(u.output));
    if (u.cached !== null) parts.push('cached ' + fmtInt(u.cached));
    if (u.total !== null) parts.push('total ' + fmtInt(u.total));
    return h('span', { class: 'usage', title: 'token usage' }, parts.join(' · '));
  }

  // The record's JSON, made only when asked for (records can be large).
  function rawToggle(turn, raw) {
    let shown = null;
    const button = h('button', { type: 'button', class: 'raw-toggle', 'aria-expanded': 'false' }, 'Raw JSON');
    button.addEventListener('click', () => {
      if (shown) { shown.remove(); shown = null; } else {
        shown = longText('pre', 'raw', pretty(raw));
        turn.append(shown);
      }
      button.setAttribute('aria-expanded', shown ? 'true' : 'false');
    });
    return button;
  }

  function blockElement(block, convo) {
    switch (block.t) {
      case 'text': return longText('div', 'text', block.text);
      case 'reasoning':
        return h('div', { class: 'reasoning' }, h('details', null, h('summary', null, 'Reasoning'), longText('div', 'text', block.text)));
      case 'call': return toolCall(block, convo);
      case 'result': return toolResult(block, convo);
      case 'note': return h('p', { class: 'note' }, block.text);
      default: return longText('pre', 'json', pretty(block.value));
    }
  }

  // Arguments are often JSON text: pretty-printed when they parse.
  function prettyArgs(args) {
    if (typeof args === 'string') {
      try {
        const parsed = JSON.parse(args);
        if (parsed !== null && typeof parsed === 'object') return pretty(parsed);
      } catch (e) { /* not JSON: shown as given */ }
      return args;
    }
    return args === undefined ? '' : pretty(args);
  }

  function toolCall(block, convo) {
    const name = block.name === undefined || block.name === null ? '?' : String(block.name);
    const head = h('div', { class: 'tool-head' }, h('span', { class: 'label' }, 'Tool call'),
      h('span', { class: 'tool-name' }, nameNode(name)),
      block.id !== undefined && block.id !== null ? h('code', { class: 'call-id' }, visible(block.id)) : null);
    const call = h('div', { class: 'tool-call' }, head, longText('pre', 'tool-args', prettyArgs(block.args)));
    if (block.id !== undefined && block.id !== null) convo.calls.set(String(block.id), { call, head, name });
    return call;
  }

  // A result names the call it answers; both get a button to the other.
  function toolResult(block, convo) {
    const match = block.id !== undefined && block.id !== null ? convo.calls.get(String(block.id)) : null;
    const head = h('div', { class: 'tool-head' }, h('span', { class: 'label' }, block.error ? 'Tool error' : 'Tool result'),
      match ? [' of ', h('span', { class: 'result-of' }, nameNode(match.name))] : null,
      block.id !== undefined && block.id !== null ? h('code', { class: 'call-id' }, visible(block.id)) : null);
    const result = h('div', { class: 'tool-result' + (block.error ? ' tool-error' : '') }, head,
      longText('pre', 'tool-output', String(block.content ?? '')));
    if (match) {
      head.append(jumpButton('↑ call', match.call));
      if (!match.head.querySelector('.jump')) match.head.append(jumpButton('↓ result', result));
    }
    return result;
  }

  function jumpButton(label, target) {
    return h('button', { type: 'button', class: 'jump', onclick: () => {
      target.scrollIntoView({ block: 'center', behavior: 'smooth' });
      target.classList.add('flash');
      setTimeout(() => target.classList.remove('flash'), 1200);
    } }, label);
  }

  // Long text is all there, folded beyond ~40 lines until asked for.
  function longText(tag, cls, text) {
    const node = h(tag, { class: cls, dir: 'auto' }, visibleText(text));
    const lines = text.split('\n').length;
    if (lines <= LONG_LINES && text.length <= LONG_CHARS) return node;
    node.classList.add('collapsed');
    const toggle = h('button', { type: 'button', class: 'show-all', 'aria-expanded': 'false' },
      'Show all (' + fmtInt(lines) + ' lines)');
    toggle.addEventListener('click', () => {
      const open = node.classList.toggle('collapsed') === false;
      toggle.setAttribute('aria-expanded', String(open));
      toggle.textContent = open ? 'Show less' : 'Show all (' + fmtInt(lines) + ' lines)';
    });
    return h('div', { class: 'long' }, node, toggle);
  }

  // An ATIF trajectory is one record holding a whole run: each step is a
  // turn of its own inside it.
  function trajectoryElement(rec, wrapper, origin, convo) {
    const agent = isObj(rec.agent) ? rec.agent : {};
    const agentText = [agent.name, agent.version, agent.model_name].filter((x) => typeof x === 'string').join(' ');
    const box = h('div', { class: 'trajectory', 'data-role': 'trajectory' });
    box.append(h('div', { class: 'turn-head' }, h('span', { class: 'role' }, 'trajectory'),
      h('span', null, nameNode(String(rec.session_id ?? ''))), agentText ? h('span', { class: 'agent' }, visible(agentText)) : null,
      h('time', null, fmtTs(wrapper.timestamp)), origin ? h('span', { class: 'origin' }, origin) : null,
      rawToggle(box, rec)));
    for (const step of rec.steps) {
      const model = isObj(step) ? atifStep(step) : fallback(step);
      box.append(turnElement(model, step, model.time, '', convo, ' atif-step'));
    }
    return box;
  }

  PC.runPage = runPage;
})();
