// intentgate console: one page, hash routes, the gateway's own JSON API.
//
// The API key lives in this tab's sessionStorage only; every call sends it
// as `Authorization: Bearer` and never puts it in a URL. Errors are the
// API's problem+json documents, shown with their title and detail.
'use strict';

(function () {
  const KEY = 'intentgate.apiKey';
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const OPEN_STATES = ['starting', 'unknown'];
  const UNSETTLED_JOB = ['pending', 'running', 'unknown'];

  const $ = (id) => document.getElementById(id);

  /** An element with attributes (`text` sets its text) and children. */
  function el(tag, attrs, ...children) {
    return build(document.createElement(tag), attrs, children);
  }
  function svg(tag, attrs, ...children) {
    return build(document.createElementNS(SVG_NS, tag), attrs, children);
  }
  function build(node, attrs, children) {
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === 'text') node.textContent = String(value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // ---- the API ------------------------------------------------------------

  /** A problem+json answer (or a network failure told the same way). */
  class ApiProblem extends Error {
    constructor(problem) {
      super(problem.detail || problem.title || 'request failed');
      this.problem = problem;
    }
  }

  async function api(path, { method = 'GET', body, key } = {}) {
    const apiKey = key || sessionStorage.getItem(KEY) || '';
    const headers = { Accept: 'application/json, application/problem+json', Authorization: 'Bearer ' + apiKey };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let response;
    try {
      response = await fetch(path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store', credentials: 'omit', redirect: 'error',
      });
    } catch (err) {
      throw new ApiProblem({ title: 'Gateway unreachable', detail: String(err.message || err), status: 0 });
    }
    const type = response.headers.get('content-type') || '';
    const data = type.includes('json') ? await response.json().catch(() => null) : null;
    if (!response.ok) {
      const problem = data && typeof data === 'object'
        ? data : { title: response.statusText || 'Error', status: response.status, detail: '' };
      if (response.status === 401 && !key) signOut(problem);
      throw new ApiProblem(problem);
    }
    return data;
  }

  function slugOf(type) {
    return String(type || '').split('/').pop();
  }

  /** Shows a problem readably: its title, its detail, its status and type. */
  function renderProblem(container, problem) {
    const slug = slugOf(problem.type);
    container.replaceChildren(
      el('div', { class: 'title', text: problem.title || 'Error' }),
      el('div', { class: 'detail', text: problem.detail || '' }),
      el('div', { class: 'slug', text: [problem.status || '', slug].filter(Boolean).join(' · ') }),
    );
    container.dataset.problem = slug;
    container.hidden = false;
  }

  function showProblem(err) {
    if (err instanceof ApiProblem) renderProblem($('problem'), err.problem);
    else renderProblem($('problem'), { title: 'Console error', detail: String(err && err.message || err) });
  }

  function clearProblem() {
    const box = $('problem');
    box.hidden = true;
    box.replaceChildren();
    delete box.dataset.problem;
  }

  // ---- formatting ---------------------------------------------------------

  const pad = (n) => String(n).padStart(2, '0');
  function fmtTime(iso) {
    if (!iso) return '–';
    const t = new Date(iso);
    return `${t.getFullYear()}-${pad(t.getMonth() + 1)}-${pad(t.getDate())} ` +
      `${pad(t.getHours())}:${pad(t.getMinutes())}:${pad(t.getSeconds())}`;
  }
  // An attempt's charge, or its reservation while it is open (budgets).
function fmtCost(usage) {
  if (!usage) return '';
  if (usage.cost === null || usage.cost === undefined) {
    return usage.reserved > 0 ? `${usage.reserved} reserved` : '';
  }
  return String(usage.cost);
}

// An attempt's tokens in and out, with the parts priced at their own
// rates: read from or written to the provider's cache, spent reasoning.
function fmtTokens(counted) {
  if (!counted) return '–';
  const parts = (...named) => {
    const shown = named.filter(([n]) => n > 0).map(([n, what]) => `${n} ${what}`);
    return shown.length ? ` (${shown.join(', ')})` : '';
  };
  return `${counted.input} in${parts([counted.cached_input, 'cached'], [counted.cache_write, 'cache write'])}` +
    ` · ${counted.output} out${parts([counted.reasoning, 'reasoning'])}`;
}

function fmtDuration(ms) {
    if (ms === null || ms === undefined || Number.isNaN(ms)) return '–';
    if (ms < 1000) return `${Math.round(ms)} ms`;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(s < 10 ? 2 : 1)} s`;
    const m = Math.floor(s / 60);
    if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
    const h = Math.floor(m / 60);
    if (h < 48) return `${h} h ${m % 60} min`;
    return `${Math.floor(h / 24)} d ${h % 24} h`;
  }
  const statusBadge = (status, extra) =>
    el('span', { class: `status ${status}`, 'data-status': status, text: extra || status });
  const pretty = (value) => el('pre', { text: JSON.stringify(value, null, 2) });

  // ---- session, polling and routing --------------------------------------

  let me = null;
  let generation = 0; // bumped on every page change: stale polls stop

  /** Runs `load` now and every `ms` while the page that asked is shown. */
  function poll(load, ms) {
    const mine = generation;
    const tick = async () => {
      if (mine !== generation) return;
      try { await load(); } catch (err) { showProblem(err); }
      if (mine === generation) setTimeout(tick, ms);
    };
    return tick();
  }

  function signOut(problem) {
    sessionStorage.removeItem(KEY);
    me = null;
    // Nothing of this session is left for the next one to see.
    jobsState.filters = {};
    jobsState.cursors = [null];
    jobsState.page = 0;
    $('filters').reset();
    $('jobs-body').replaceChildren();
    for (const id of ['count-running', 'count-unknown']) $(id).textContent = '–';
    location.hash = '#/signin';
    route();
    if (problem) renderProblem($('problem'), problem);
  }

  async function refreshCounts() {
    if (!me) return;
    const counts = await api('/v1/jobs/counts');
    $('count-running').textContent = counts.running;
    $('count-unknown').textContent = counts.unknown;
    const badge = $('nav-unknown');
    badge.textContent = counts.unknown;
    badge.classList.toggle('zero', counts.unknown === 0);
  }

  /** Counts poll on their own clock, whatever page is shown. */
  let countsTimer = null;
  function startCounts() {
    if (countsTimer) return;
    const tick = async () => {
      if (!me) { countsTimer = null; return; }
      try { await refreshCounts(); } catch (err) { /* the page shows its own problems */ }
      countsTimer = setTimeout(tick, 2000);
    };
    countsTimer = setTimeout(tick, 0);
  }

  const pages = ['signin', 'jobs', 'job', 'unknown', 'contracts', 'overview', 'keys'];

  function show(name) {
    for (const page of pages) $('page-' + page).hidden = page !== name;
    for (const link of document.querySelectorAll('#nav a')) {
      link.classList.toggle('active', link.dataset.page === name || (name === 'job' && link.dataset.page === 'jobs'));
    }
    document.body.dataset.page = name;
    const signedIn = Boolean(me);
    $('nav').hidden = !signedIn;
    $('counts').hidden = !signedIn;
    $('who').hidden = !signedIn;
  }

  function route() {
    generation += 1;
    clearProblem();
    // A decision belongs to the page it was asked on.
    if ($('resolve-dialog').open) { pending = null; $('resolve-dialog').close(); }
    const hash = location.hash.replace(/^#\/?/, '');
    const [name, arg] = hash.split('/');
    if (!me) { show('signin'); $('api-key').focus(); return; }
    switch (name) {
      case 'job': delete $('page-job').dataset.job; show('job'); poll(() => loadJob(decodeURIComponent(arg || '')), 1500); break;
      case 'unknown': show('unknown'); poll(loadUnknown, 2000); break;
      case 'contracts': show('contracts'); loadContracts().catch(showProblem); break;
      case 'overview': show('overview'); poll(loadOverview, 10000); break;
      case 'keys': show('keys'); loadKeys().catch(showProblem); break;
      default: show('jobs'); loadJobs().catch(showProblem);
    }
  }

  async function signIn(event) {
    event.preventDefault();
    clearProblem();
    const key = $('api-key').value.trim();
    try {
      const who = await api('/v1/whoami', { key });
      sessionStorage.setItem(KEY, key);
      $('api-key').value = '';
      await becomeSignedIn(who);
      if (!location.hash || location.hash === '#/signin') location.hash = '#/jobs';
      else route();
    } catch (err) {
      showProblem(err);
    }
  }

  async function becomeSignedIn(who) {
    me = who;
    $('who-name').textContent = who.name;
    $('who-role').textContent = who.role;
    $('f-owner-label').hidden = who.role !== 'admin';
    $('nav-keys').hidden = !managesKeys();
    startCounts();
    await loadChoices().catch(showProblem);
  }

  // ---- jobs ---------------------------------------------------------------

  const jobsState = { filters: {}, cursors: [null], page: 0 };
  const PAGE_SIZE = 20;

  /** The routes and providers the filters offer, from `GET /v1/routes`. */
  /** Each provider's `max_execution` in ms (from `GET /v1/routes`), if it has one. */
  const maxExecution = new Map();

  async function loadChoices() {
    const { routes } = await api('/v1/routes');
    const providers = new Set();
    const routeSelect = $('f-route');
    const providerSelect = $('f-provider');
    routeSelect.replaceChildren(el('option', { value: '', text: 'any' }));
    providerSelect.replaceChildren(el('option', { value: '', text: 'any' }));
    for (const r of routes) {
      routeSelect.append(el('option', { value: r.name, text: r.name }));
      for (const entry of r.chain) {
        providers.add(entry.provider);
        if (entry.max_execution_ms) maxExecution.set(entry.provider, entry.max_execution_ms);
      }
    }
    for (const p of [...providers].sort()) providerSelect.append(el('option', { value: p, text: p }));
  }

  function readFilters() {
    const local = (id) => {
      const value = $(id).value;
      return value ? new Date(value).toISOString() : '';
    };
    return {
      status: $('f-status').value,
      owner: me && me.role === 'admin' ? $('f-owner').value.trim() : '',
      route: $('f-route').value,
      provider: $('f-provider').value,
      idempotency_key: $('f-key').value,
      created_after: local('f-after'),
      created_before: local('f-before'),
    };
  }

  async function loadJobs() {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(jobsState.filters)) if (value) params.set(name, value);
    const cursor = jobsState.cursors[jobsState.page];
    if (cursor) params.set('cursor', cursor);
    params.set('limit', String(PAGE_SIZE));
    $('jobs-table').dataset.state = 'loading';
    let page;
    try {
      page = await api('/v1/jobs/search?' + params.toString());
    } catch (err) {
      $('jobs-body').replaceChildren();
      $('jobs-table').dataset.state = 'error';
      throw err;
    }
    clearProblem();
    const rows = page.jobs.map((job) => el('tr', { 'data-job': job.id, 'data-key': job.idempotency_key },
      el('td', { text: fmtTime(job.created_at) }),
      el('td', {}, statusBadge(job.status)),
      el('td', {}, el('code', { text: job.idempotency_key })),
      el('td', { text: job.owner }),
      el('td', { text: job.route }),
      el('td', { text: job.attempts }),
      el('td', { text: job.last_provider || '–' }),
      el('td', {}, el('a', { href: '#/job/' + job.id, class: 'job-link', text: job.id.slice(0, 13) + '…' })),
    ));
    $('jobs-body').replaceChildren(...rows);
    $('jobs-empty').hidden = rows.length > 0;
    jobsState.cursors[jobsState.page + 1] = page.next_cursor || null;
    $('page-older').disabled = !page.next_cursor;
    $('page-newer').disabled = jobsState.page === 0;
    $('page-number').textContent = `page ${jobsState.page + 1}`;
    $('jobs-table').dataset.state = 'ready';
  }

  function applyFilters(event) {
    event.preventDefault();
    jobsState.filters = readFilters();
    jobsState.cursors = [null];
    jobsState.page = 0;
    loadJobs().catch(showProblem);
  }

  // ---- one job ------------------------------------------------------------

  async function loadJob(id) {
    const job = await api('/v1/jobs/' + encodeURIComponent(id));
    renderJob(job);
    if (!UNSETTLED_JOB.includes(job.status)) generation += 1; // settled: stop polling
  }

  /** The door a job came through: `entered_through`, or for a job made
   * before doors were recorded the protocol its request is in. */
  function doorName(job) {
    const names = {
      jobs: 'jobs API', 'chat-completions': 'OpenAI chat completions', responses: 'OpenAI Responses',
      messages: 'Anthropic Messages', embeddings: 'OpenAI embeddings',
      'anthropic-messages': 'Anthropic Messages', 'openai-responses': 'OpenAI Responses',
      'openai-embeddings': 'OpenAI embeddings',
    };
    const door = job.entered_through || (job.request && job.request.door);
    return names[door] || 'jobs API or chat completions';
  }

  /** How many times the intent ran, in words: twice is what a hedge may cost. */
  function executionsText(executions) {
    if (!executions) return '–';
    const { answered, may_have_run: possibly } = executions;
    const counted = possibly ? `${answered} answered, ${possibly} may have run without an answer` : `${answered} answered`;
    if (answered > 1) return `${counted} — the intent ran more than once`;
    if (answered + possibly > 1) return `${counted} — the intent may have run more than once`;
    return counted;
  }

  function renderJob(job) {
    $('job-id').textContent = job.id;
    $('job-status').replaceChildren(statusBadge(job.status));
    const winner = job.attempts.find((a) => a.id === job.completed_by);
    const facts = [
      ['Owner', job.owner], ['Idempotency-Key', el('code', { text: job.idempotency_key })],
      ['Route', job.route], ['Door', doorName(job)], ['Version', job.version],
      ['Created', fmtTime(job.created_at)], ['Updated', fmtTime(job.updated_at)],
      ['Completed by', winner ? `attempt ${winner.number} on ${winner.provider}` : '–'],
      ['Executions', executionsText(job.executions)],
    ];
    if (job.team || (job.tags && job.tags.length)) {
      facts.push(['Team, tags', [job.team || '–', ...(job.tags || [])].join(' · ')]);
    }
    $('job-facts').replaceChildren(...facts.flatMap(([name, value]) => [el('dt', { text: name }), el('dd', {}, value)]));
    $('timeline').replaceChildren(timeline(job));
    $('attempts-body').replaceChildren(...job.attempts.map((a) => el('tr', {
      class: a.id === job.completed_by ? 'winner' : null, 'data-attempt': a.number, 'data-state': a.state,
      'data-hedged': a.hedged ? 'true' : null,
    },
      el('td', { text: a.number }),
      el('td', {}, a.provider, a.hedged ? el('span', { class: 'badge hedged', text: 'hedge',
        title: 'started beside an open attempt by the route\'s hedge: the intent may have run twice' }) : ''),
      el('td', {}, statusBadge(a.state)),
      el('td', { text: a.outcome || '–' }),
      el('td', { text: fmtTime(a.started_at) }),
      el('td', { text: a.finished_at ? fmtDuration(Date.parse(a.finished_at) - Date.parse(a.started_at)) : 'open' }),
      el('td', { class: 'tokens', text: fmtTokens(a.usage && a.usage.counted) }),
      el('td', { text: fmtCost(a.usage) }),
      el('td', { text: a.detail || '' }),
      el('td', {}, a.state === 'unknown' ? settleCell(job, a) : (a.resolved_by || '')),
    )));
    $('job-request').replaceChildren(renderRequest(job.request));
    $('job-outcome-title').textContent = job.status === 'failed' ? 'Error' : 'Result';
    $('job-result').replaceChildren(renderOutcome(job));
    $('page-job').dataset.job = job.id;
    $('page-job').dataset.status = job.status;
  }

  /**
   * An unknown attempt on its job's page: when it is given up on by itself
   * (its provider's `max_execution`), and for an admin the settle buttons.
   */
  function settleCell(job, a) {
    const limit = maxExecution.get(a.provider);
    const deadline = limit
      ? `abandoned by itself at ${fmtTime(new Date(Date.parse(a.started_at) + limit).toISOString())}`
      : 'waits for an operator (no max_execution)';
    const buttons = me && me.role === 'admin' ? [' ',
      el('button', { type: 'button', class: 'secondary', 'data-resolve-job': job.id, 'data-number': a.number,
        'data-provider': a.provider, 'data-key': job.idempotency_key, 'data-as': 'abandoned', text: 'Abandon' }), ' ',
      el('button', { type: 'button', class: 'danger', 'data-resolve-job': job.id, 'data-number': a.number,
        'data-provider': a.provider, 'data-key': job.idempotency_key, 'data-as': 'failed', text: 'Fail' })] : [];
    return [el('span', { class: 'deadline', text: deadline }), ...buttons];
  }

  function contentText(content) {
    if (typeof content === 'string') return content;
    if (content === null || content === undefined) return '';
    if (Array.isArray(content)) {
      return content.map((part) => (part && part.type === 'text' ? part.text : JSON.stringify(part))).join('\n');
    }
    return JSON.stringify(content, null, 2);
  }

  function renderToolCalls(calls) {
    return (calls || []).map((call) => {
      const fn = call.function || {};
      let args = fn.arguments;
      try { args = JSON.stringify(JSON.parse(args), null, 2); } catch (err) { /* shown as sent */ }
      return el('div', { class: 'tool-call' },
        el('div', {}, 'tool call ', el('b', { text: fn.name || call.type || '?' }), call.id ? ` (${call.id})` : ''),
        el('pre', { text: args || '' }));
    });
  }

  function renderMessage(message, label) {
    return el('div', { class: 'message' },
      el('div', { class: 'who', text: label || message.role }),
      el('div', { class: 'text', text: contentText(message.content) }),
      renderToolCalls(message.tool_calls));
  }

  function renderRequest(request) {
    if (!request) return el('p', { class: 'empty', text: 'not stored' });
    const messages = (request.input && request.input.messages) || [];
    const params = request.params && Object.keys(request.params).length ? request.params : null;
    return el('div', {},
      messages.map((m) => renderMessage(m)),
      params ? [el('div', { class: 'who', text: 'params' }), pretty(params)] : null);
  }

  function renderOutcome(job) {
    if (job.status === 'failed' && job.error) {
      const error = job.error;
      return el('div', { class: 'error' },
        el('p', {}, el('b', { text: error.reason || 'failed' })),
        // Each attempt's detail is its row's in the attempts table: said once.
        (error.attempts || []).length ? el('ul', { id: 'failed-attempts' }, error.attempts.map((a) =>
          el('li', { text: `attempt ${a.attempt} on ${a.provider}: ${a.state}${a.outcome ? ' (' + a.outcome + ')' : ''}` }))) : null,
        (error.refused || []).length ? [el('p', { text: 'Refused by the contract gate:' }),
          el('ul', {}, error.refused.map((r) => el('li', { text: r })))] : null);
    }
    const result = job.result;
    if (!result) return el('p', { class: 'empty', text: `no result yet: the job is ${job.status}` });
    const facts = el('p', { class: 'note', text: [
      `provider ${result.provider}`, result.model ? `model ${result.model}` : null,
      result.finish_reason ? `finish ${result.finish_reason}` : null,
      result.usage ? `tokens ${result.usage.prompt_tokens ?? '?'} in / ${result.usage.completion_tokens ?? '?'} out` : null,
    ].filter(Boolean).join(' · ') });
    const choices = result.completion && Array.isArray(result.completion.choices) ? result.completion.choices : null;
    const body = choices && choices.length
      ? choices.map((choice) => renderMessage(choice.message || {}, `choice ${choice.index ?? 0}` +
          (choice.finish_reason ? ` · ${choice.finish_reason}` : '')))
      : [renderMessage({ role: 'assistant', content: result.text })];
    return el('div', { id: 'result-body' }, facts, body,
      result.json ? [el('div', { class: 'who', text: 'json' }), pretty(result.json)] : null);
  }

  /**
   * `steps + 1` labels for ticks evenly over `span` ms from 0, each distinct:
   * as many decimals as the step needs (a 2 ms span is not 0, 1, 1, 2, 2 ms).
   */
  function tickLabels(span, steps) {
    const step = span / steps;
    const unit = span < 1000 ? 1 : 1000;
    const digits = Math.max(0, Math.min(3, Math.ceil(-Math.log10(step / unit))));
    return Array.from({ length: steps + 1 }, (_, i) => {
      const at = (span * i) / steps;
      if (span >= 60000) return i === 0 ? '+0' : '+' + fmtDuration(at);
      return `+${(at / unit).toFixed(digits)} ${unit === 1 ? 'ms' : 's'}`;
    });
  }

  /** The attempt timeline: one bar per attempt on a shared time axis. */
  function timeline(job) {
    const attempts = job.attempts;
    const now = Date.now();
    const start = (a) => Date.parse(a.started_at);
    const end = (a) => (a.finished_at ? Date.parse(a.finished_at) : now);
    if (!attempts.length) return el('p', { class: 'empty', text: 'No attempt yet.' });
    const t0 = Math.min(...attempts.map(start));
    const t1 = Math.max(...attempts.map(end), t0 + 1);
    const width = 960; const left = 150; const right = 20; const row = 50; const top = 28;
    const plot = width - left - right;
    const height = top + row * attempts.length + 4;
    const x = (t) => left + ((t - t0) / (t1 - t0)) * plot;
    const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', id: 'timeline-svg',
      'aria-label': `attempt timeline of job ${job.id}` });
    const defs = svg('defs', {}, svg('pattern', { id: 'open-stripes', width: 8, height: 8,
      patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' },
      svg('rect', { width: 8, height: 8, class: 'bar unknown' }),
      svg('rect', { width: 3, height: 8, fill: '#fff', 'fill-opacity': 0.35 })));
    root.append(defs);
    const labels = tickLabels(t1 - t0, 4);
    labels.forEach((label, i) => {
      const t = t0 + ((t1 - t0) * i) / 4;
      root.append(svg('line', { x1: x(t), x2: x(t), y1: top - 6, y2: height - 8, class: 'axis tick' }),
        svg('text', { x: x(t), y: 14, 'text-anchor': ['start', 'middle', 'middle', 'middle', 'end'][i],
          class: 'muted tick-label', text: label }));
    });
    attempts.forEach((a, i) => {
      const y = top + i * row;
      const won = a.id === job.completed_by;
      const open = OPEN_STATES.includes(a.state);
      const barWidth = Math.max(4, x(end(a)) - x(start(a)));
      const words = [a.state, a.outcome ? `outcome ${a.outcome}` : null,
        open ? `open ${fmtDuration(now - start(a))}` : fmtDuration(end(a) - start(a))];
      if (won) words.push('★ won the compare-and-swap');
      if (a.state === 'superseded') words.push('lost: another attempt won first');
      if (a.hedged) words.push('hedged: started beside an open attempt');
      if (a.resolved_by) words.push(`settled by ${a.resolved_by}`);
      const group = svg('g', { class: 'attempt', 'data-attempt': a.number, 'data-state': a.state,
        'data-provider': a.provider, 'data-won': won ? 'true' : null },
        svg('title', { text: `attempt ${a.number} on ${a.provider}: ${words.join(', ')}${a.detail ? '\n' + a.detail : ''}` }),
        svg('text', { x: 8, y: y + 19, text: `#${a.number} ${a.provider}` }),
        svg('rect', { x: x(start(a)), y: y + 6, width: barWidth, height: 18, rx: 3,
          class: `bar ${open ? 'open' : a.state}` }),
        // Under its bar: from the bar's start when it starts in the left
        // half of the axis, else ending at the bar's end, so it stays in view.
        x(start(a)) < left + plot / 2
          ? svg('text', { x: x(start(a)), y: y + 40, class: won ? 'won' : 'muted', text: words.join(' · ') })
          : svg('text', { x: x(start(a)) + barWidth, y: y + 40, 'text-anchor': 'end',
            class: won ? 'won' : 'muted', text: words.join(' · ') }));
      group.append(...markers(a, y, x));
      root.append(group);
    });
    return root;
  }

  /** Marks on an attempt's bar for what the bar alone hides: when it became
   * unknown, and how that ended — a late answer, or a settlement. */
  function markers(a, y, x) {
    if (!a.unknown_at) return [];
    const mark = (t, kind, text) => svg('g', { class: `marker ${kind}`, 'data-marker': kind },
      svg('title', { text: `${text} at ${fmtTime(new Date(t).toISOString())}` }),
      svg('line', { x1: x(t), x2: x(t), y1: y + 2, y2: y + 28 }),
      svg('text', { x: x(t) + 3, y: y + 4, class: 'marker-label', text }));
    const marks = [mark(Date.parse(a.unknown_at), 'unknown', 'became unknown')];
    if (a.finished_at) {
      const late = a.state === 'succeeded' || a.state === 'superseded';
      marks.push(mark(Date.parse(a.finished_at), late ? 'late-answer' : 'resolved',
        late ? 'late answer arrived' : `resolved: ${a.state}`));
    }
    return marks;
  }

  // ---- unknown attempts ---------------------------------------------------

  let queue = null;

  async function loadUnknown() {
    if ($('resolve-dialog').open) return; // do not move rows under a decision
    queue = await api('/v1/attempts/unknown');
    const canResolve = queue.can_resolve;
    $('unknown-readonly').hidden = canResolve;
    $('backlog').replaceChildren(...queue.providers.map((p) => el('div', { class: 'provider', 'data-provider': p.provider },
      el('div', {}, el('b', { text: p.provider }), ` — ${p.count} unknown, the oldest open since ${fmtTime(p.oldest_started_at)}`),
      canResolve ? el('div', { class: 'actions' },
        el('button', { type: 'button', class: 'secondary', 'data-resolve-provider': p.provider, 'data-as': 'abandoned',
          text: `Settle all of ${p.provider} as abandoned` }), ' ',
        el('button', { type: 'button', class: 'danger', 'data-resolve-provider': p.provider, 'data-as': 'failed',
          text: 'as failed' })) : null)));
    $('unknown-body').replaceChildren(...queue.attempts.map((q) => el('tr', {
      'data-job': q.job_id, 'data-attempt': q.attempt.number, 'data-key': q.idempotency_key,
    },
      el('td', { text: fmtDuration(q.open_for_ms) }),
      el('td', { text: q.attempt.provider }),
      el('td', {}, el('a', { href: '#/job/' + q.job_id, text: q.idempotency_key })),
      el('td', { text: q.owner }),
      el('td', { text: q.route }),
      el('td', { text: `#${q.attempt.number}` }),
      el('td', { text: q.then }),
      el('td', {}, canResolve ? [
        el('button', { type: 'button', class: 'secondary', 'data-resolve-job': q.job_id, 'data-number': q.attempt.number,
          'data-as': 'abandoned', text: 'Abandon' }), ' ',
        el('button', { type: 'button', class: 'danger', 'data-resolve-job': q.job_id, 'data-number': q.attempt.number,
          'data-as': 'failed', text: 'Fail' })] : null),
    )));
    $('unknown-empty').hidden = queue.attempts.length > 0;
    $('page-unknown').dataset.state = 'ready';
  }

  const MEANING = {
    abandoned: 'abandoned (given up on; a late answer still counts)',
    failed: 'failed (known not to have been done)',
  };

  let pending = null; // what the open dialog would settle

  function openResolve(target) {
    pending = target;
    const as = target.as;
    if (target.job) {
      const q = queue && queue.attempts.find((item) => item.job_id === target.job && item.attempt.number === target.number);
      $('resolve-title').textContent = `Settle attempt ${target.number} as ${as}`;
      $('resolve-consequence').textContent = `Attempt ${target.number} of job ${q ? q.idempotency_key : target.keyName || target.job} on ` +
        `${q ? q.attempt.provider : target.providerName || '?'} becomes ${MEANING[as]}. ` +
        `Then ${q ? q.then : 'the chain goes on where the job allows it'}.`;
    } else {
      const count = queue.attempts.filter((q) => q.attempt.provider === target.provider).length;
      $('resolve-title').textContent = `Settle every unknown attempt of ${target.provider} as ${as}`;
      $('resolve-consequence').textContent = `${count} attempt(s) on ${target.provider} become ${MEANING[as]}. ` +
        'Then each job\'s chain continues on its next provider, or the job fails where none is left.';
    }
    $('resolve-reason').value = '';
    $('resolve-error').hidden = true;
    $('resolve-dialog').showModal();
    $('resolve-reason').focus();
  }

  async function confirmResolve(event) {
    event.preventDefault();
    if (!pending) return;
    const body = { as: pending.as, reason: $('resolve-reason').value };
    const path = pending.job
      ? `/v1/jobs/${encodeURIComponent(pending.job)}/attempts/${pending.number}/resolve`
      : `/v1/providers/${encodeURIComponent(pending.provider)}/resolve`;
    $('resolve-confirm').disabled = true;
    try {
      await api(path, { method: 'POST', body });
      pending = null;
      $('resolve-dialog').close();
      if (document.body.dataset.page === 'unknown') await loadUnknown();
      else if (document.body.dataset.page === 'job') await loadJob($('page-job').dataset.job);
      refreshCounts().catch(() => {});
    } catch (err) {
      renderProblem($('resolve-error'), err.problem || { title: 'Error', detail: String(err) });
    } finally {
      $('resolve-confirm').disabled = false;
    }
  }

  // ---- contracts ----------------------------------------------------------

  async function loadContracts() {
    const { contracts } = await api('/v1/contracts');
    const cards = contracts.map((c) => {
      const run = c.last_run;
      const verdict = statusBadge(c.eligible ? 'eligible' : 'ineligible');
      return el('div', { class: 'contract', 'data-route': c.route, 'data-provider': c.provider, 'data-eligible': String(c.eligible) },
        el('h3', {}, `${c.route} › ${c.provider} `, el('span', { class: 'note', text: `(${c.role})` }), ' ', verdict,
          c.contract_required ? null : [' ', statusBadge('off', 'gate not required here')]),
        el('p', { text: c.reason }),
        run ? [
          el('p', { class: 'note', text: `last run ${run.passed ? 'passed' : 'failed'}, finished ${fmtTime(run.finished_at)}: ` +
            `${fmtDuration(run.age_ms)} old, contract_max_age ${c.contract_max_age}` + (run.expired ? ' — too old' : '') }),
          run.first_failure ? el('p', { class: 'first-failure' }, 'first failure: ', el('b', { text: run.first_failure.case }),
            ` — ${run.first_failure.reason}`) : null,
          el('ul', {}, run.cases.map((k) => el('li', {
            class: `case ${k.passed ? 'passed' : 'failed'}`, title: k.reasons.join('\n') || null,
          },
            `${k.passed ? '✓' : '✗'} ${k.case} (${fmtDuration(k.duration_ms)})`,
            // The first reason; every one is in the tooltip.
            k.passed ? null : el('span', { class: 'note', text: ` — ${k.reasons[0] || 'failed'}` +
              (k.reasons.length > 1 ? ` (+${k.reasons.length - 1} more)` : '') })))),
        ] : el('p', { class: 'empty', text: 'no recorded run' }));
    });
    $('contracts').replaceChildren(...cards);
    $('page-contracts').dataset.state = 'ready';
  }

  // ---- overview -----------------------------------------------------------

  async function loadOverview() {
    const [data, { routes }] = await Promise.all([api('/v1/overview'), api('/v1/routes')]);
    $('chart-jobs').replaceChildren(chart(data.minutes, data.jobs, 'jobs'));
    $('chart-attempts').replaceChildren(chart(data.minutes, data.attempts, 'attempts'));
    $('providers-body').replaceChildren(...routes.flatMap((r) => r.chain.map((c) => providerRow(r.name, c))));
    $('page-overview').dataset.state = 'ready';
  }

  /** One provider of a route's chain: may it serve, and is it healthy. */
  function providerRow(route, entry) {
    const health = entry.health;
    // What a non-healthy state means and when it clears, in words.
    const clears = health.state === 'cooling_down'
      ? ': passed over, then the next request probes it' : ': the next request probes it; one success clears it';
    const healthText = health.state === 'healthy' ? 'healthy'
      : `${health.state.replace('_', ' ')} after ${health.failures} failure(s) in a row` +
        (health.cooling_until ? ` until ${fmtTime(health.cooling_until)}` : '') + clears;
    return el('tr', { 'data-route': route, 'data-provider': entry.provider, 'data-eligible': String(entry.eligible),
      'data-health': health.state },
      el('td', { text: route }),
      el('td', {}, el('code', { text: entry.provider })),
      el('td', { text: entry.role }),
      el('td', { class: entry.eligible ? null : 'bad', text: entry.eligible ? 'may serve' : `refused: ${entry.reason}` }),
      el('td', { class: health.state === 'healthy' ? null : 'bad', text: healthText }));
  }

  /** Stacked bars, one per minute. */
  function chart(minutes, series, what) {
    const labels = Object.keys(series).filter((label) => series[label].some((n) => n > 0));
    const totals = minutes.map((_, i) => labels.reduce((sum, label) => sum + series[label][i], 0));
    const max = Math.max(1, ...totals);
    const width = 960; const height = 180; const left = 40; const bottom = 24; const top = 10;
    const plotH = height - top - bottom; const slot = (width - left - 10) / minutes.length;
    const y = (n) => top + plotH - (n / max) * plotH;
    const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, role: 'img', 'aria-label': `${what} per minute`, 'data-total': totals.reduce((a, b) => a + b, 0) });
    for (const n of [0, Math.ceil(max / 2), max]) {
      root.append(svg('line', { x1: left, x2: width - 10, y1: y(n), y2: y(n), class: 'axis' }),
        svg('text', { x: left - 6, y: y(n) + 4, 'text-anchor': 'end', class: 'muted', text: n }));
    }
    minutes.forEach((minute, i) => {
      let base = 0;
      const x = left + i * slot + 1;
      for (const label of labels) {
        const n = series[label][i];
        if (!n) continue;
        root.append(svg('rect', { x, y: y(base + n), width: Math.max(1, slot - 2), height: y(base) - y(base + n),
          class: `fill-${label}` }, svg('title', { text: `${fmtTime(minute).slice(11, 16)} — ${label}: ${n}` })));
        base += n;
      }
      if (i % 10 === 0 || i === minutes.length - 1) {
        root.append(svg('text', { x: x + slot / 2, y: height - 6, 'text-anchor': 'middle', class: 'muted',
          text: fmtTime(minute).slice(11, 16) }));
      }
    });
    const legend = el('div', { class: 'legend' }, labels.length
      ? labels.map((label) => el('span', {}, el('span', { class: `swatch fill-${label}` }), label))
      : el('span', { class: 'empty', text: `no ${what} in the last hour` }));
    return el('div', {}, legend, root);
  }

  // ---- keys and spend -----------------------------------------------------

  const managesKeys = () => Boolean(me) && (me.role === 'admin' || me.role === 'team_admin');
  let spendReport = null;

  async function loadKeys() {
    const [{ keys }, spend] = await Promise.all([api('/v1/admin/keys'), api('/v1/usage/spend?group_by=team,tag')]);
    $('keys-body').replaceChildren(...keys.map(keyRow));
    spendReport = spend;
    const teams = [...new Set(spend.rows.map((row) => row.group.team).filter(Boolean))].sort();
    const chosen = $('spend-team').value;
    $('spend-team').replaceChildren(el('option', { value: '', text: 'every team' }),
      ...teams.map((team) => el('option', { value: team, text: team, selected: team === chosen })));
    renderSpend();
    $('page-keys').dataset.state = 'ready';
  }

  function keyRow(key) {
    const revocable = key.status === 'active' || key.status === 'retiring';
    return el('tr', { 'data-key-id': key.id, 'data-status': key.status },
      el('td', {}, el('code', { text: key.prefix })),
      el('td', { text: key.name }),
      el('td', { text: key.owner }),
      el('td', { text: key.team || '–' }),
      el('td', { text: key.role }),
      el('td', { text: key.status }),
      el('td', {}, revocable ? el('button', { type: 'button', class: 'danger', 'data-revoke': key.id, text: 'Revoke' }) : ''));
  }

  async function createKey(event) {
    event.preventDefault();
    clearProblem();
    const body = { name: $('k-name').value.trim(), owner: $('k-owner').value.trim(), role: $('k-role').value };
    if ($('k-team').value.trim()) body.team = $('k-team').value.trim();
    try {
      const made = await api('/v1/admin/keys', { method: 'POST', body });
      $('key-secret-value').textContent = made.secret;
      $('key-secret').hidden = false;
      $('key-form').reset();
      await loadKeys();
    } catch (err) {
      showProblem(err);
    }
  }

  /** Revoke asks once more: the first click arms the button, the second revokes. */
  function onRevoke(event) {
    const button = event.target.closest('button[data-revoke]');
    if (!button) return;
    if (button.dataset.armed !== 'true') {
      button.dataset.armed = 'true';
      button.textContent = 'Confirm revoke';
      return;
    }
    button.disabled = true;
    api(`/v1/admin/keys/${encodeURIComponent(button.dataset.revoke)}/revoke`, { method: 'POST' })
      .then(loadKeys).catch(showProblem);
  }

  /** Horizontal bars: each tag's spend (of the chosen team), largest first. */
  function renderSpend() {
    const team = $('spend-team').value;
    const byTag = new Map();
    for (const row of spendReport ? spendReport.rows : []) {
      if (team && row.group.team !== team) continue;
      const tag = row.group.tag || '(untagged)';
      byTag.set(tag, (byTag.get(tag) || 0) + row.cost_nanos);
    }
    const bars = [...byTag.entries()].sort((a, b) => b[1] - a[1]);
    if (!bars.length) {
      $('spend-chart').replaceChildren(el('p', { class: 'empty', text: 'nothing charged in these 30 days' }));
      return;
    }
    const max = Math.max(1, ...bars.map(([, nanos]) => nanos));
    const width = 720; const row = 24; const left = 180;
    const root = svg('svg', { viewBox: `0 0 ${width} ${bars.length * row + 8}`, role: 'img', id: 'spend-svg',
      'aria-label': `spend by tag${team ? ' of ' + team : ''}` });
    bars.forEach(([tag, nanos], i) => {
      const y = 4 + i * row;
      const cost = `${(nanos / 1e9).toFixed(6)} ${spendReport.currency}`;
      root.append(
        svg('text', { x: left - 8, y: y + 15, 'text-anchor': 'end', text: tag }),
        svg('rect', { x: left, y, height: row - 6, width: Math.max(1, (nanos / max) * (width - left - 140)),
          class: 'bar', 'data-tag': tag, 'data-nanos': nanos }, svg('title', { text: `${tag}: ${cost}` })),
        svg('text', { x: left + (nanos / max) * (width - left - 140) + 6, y: y + 15, class: 'muted', text: cost }));
    });
    $('spend-chart').replaceChildren(root);
  }

  // ---- wiring -------------------------------------------------------------

  function wire() {
    $('signin-form').addEventListener('submit', signIn);
    $('sign-out').addEventListener('click', () => signOut(null));
    $('filters').addEventListener('submit', applyFilters);
    $('f-clear').addEventListener('click', () => {
      $('filters').reset();
      applyFilters(new Event('submit'));
    });
    $('page-older').addEventListener('click', () => { jobsState.page += 1; loadJobs().catch(showProblem); });
    $('page-newer').addEventListener('click', () => {
      jobsState.page = Math.max(0, jobsState.page - 1);
      loadJobs().catch(showProblem);
    });
    const onSettleButton = (event) => {
      const button = event.target.closest('button[data-as]');
      if (!button) return;
      if (button.dataset.resolveJob) {
        openResolve({ job: button.dataset.resolveJob, number: Number(button.dataset.number), as: button.dataset.as,
          providerName: button.dataset.provider, keyName: button.dataset.key });
      } else {
        openResolve({ provider: button.dataset.resolveProvider, as: button.dataset.as });
      }
    };
    $('page-unknown').addEventListener('click', onSettleButton);
    $('page-job').addEventListener('click', onSettleButton);
    $('resolve-form').addEventListener('submit', confirmResolve);
    $('key-form').addEventListener('submit', createKey);
    $('keys-body').addEventListener('click', onRevoke);
    $('spend-team').addEventListener('change', renderSpend);
    $('resolve-cancel').addEventListener('click', () => { pending = null; $('resolve-dialog').close(); });
    window.addEventListener('hashchange', route);
  }

  async function start() {
    wire();
    const key = sessionStorage.getItem(KEY);
    if (key) {
      try {
        await becomeSignedIn(await api('/v1/whoami'));
      } catch (err) {
        sessionStorage.removeItem(KEY);
      }
    }
    route();
    document.body.dataset.ready = 'true';
  }

  document.addEventListener('DOMContentLoaded', start);
}());
