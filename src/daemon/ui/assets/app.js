// mneme's web view: plain DOM, no framework, no build step. Every piece of stored text is put
// in the page with textContent, never as HTML. What a user wrote is laid out in its own
// direction (dir="auto"): a Hebrew or Arabic memory reads right to left.
'use strict';

const $ = (id) => document.getElementById(id);
const PAGE = 50;
const state = {
  csrf: '',
  view: 'memories',
  bank: '',
  tags: '',
  cursor: null,   // the cursor of the page shown (null: the newest)
  next: null,     // the cursor of the next (older) page
  selected: null, // { id, bank }
  seenTags: new Set(),
  rendered: false,
  unseenProblems: 0,
  status: null,
  events: null,     // the notice stream, in the tab that holds it
  channel: null,    // the notices the streaming tab passes on
  releaseStream: null, // lets another tab stream the notices
  lastId: 0,        // the newest notice when the page loaded
  seenNotice: 0,    // the newest notice shown
  unstored: new Set(), // notices the spool could not store yet (id 0), shown once each
  listStale: false, // the backend changed while another tab was showing: the list is the old one's
  loggedOut: false,
  reconnecting: false, // the notice stream dropped and is reconnecting
  version: 0,       // bumped on every render of the list (tests wait on it)
  listAsked: 0,     // the latest list or search asked for: an older answer arriving late is dropped
  detailAsked: 0,   // the same for the detail pane
};

// ---------- helpers ----------

/**
 * Calls the daemon. Changes carry the session's CSRF value; errors carry the API's message. A
 * change refused for its CSRF value (the view was logged into again in another tab, which gave
 * the cookie a new session) fetches the session's value and is tried once more.
 */
async function api(method, path, body, retried) {
  const headers = { Accept: 'application/json' };
  if (method !== 'GET') headers['X-Mneme-CSRF'] = state.csrf;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const r = await fetch(path, {
    method, headers, credentials: 'same-origin', cache: 'no-store',
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let v = null;
  try { v = text ? JSON.parse(text) : null; } catch (_) { v = null; }
  if (!r.ok) {
    const code = v && v.error && v.error.code;
    if (method !== 'GET' && !retried && code === 'forbidden_cross_site' && await refreshCsrf()) {
      return api(method, path, body, true);
    }
    const e = new Error((v && v.error && v.error.message) || `${r.status} ${r.statusText}`);
    e.status = r.status;
    throw e;
  }
  return v;
}

/** Takes the session's current CSRF value; false when there is none or it did not change. */
async function refreshCsrf() {
  try {
    const session = await api('GET', '/ui/session');
    if (!session.logged_in || !session.csrf || session.csrf === state.csrf) return false;
    state.csrf = session.csrf;
    return true;
  } catch (_) {
    return false;
  }
}

/** An element with attributes and children (strings become text nodes). */
/**
 * `text` as a block per line, each laid out in its own direction: a Hebrew line of a
 * conversation's turn reads right to left after its Latin `[role: user]` line (one element's
 * `dir="auto"` gave every line the first one's direction; `unicode-bidi: plaintext` over the
 * whole text drew the brackets of the line after a right-to-left one mirrored). Each line keeps
 * its newline, so the text copies and reads as it was.
 */
function lines(text) {
  const parts = String(text ?? '').split('\n');
  return parts.map((line, i) => h('span', { class: 'line', dir: 'auto' }, i < parts.length - 1 ? `${line}\n` : line));
}

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const kid of kids.flat()) {
    if (kid === undefined || kid === null || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

function when(at) {
  if (!at) return '';
  const d = new Date(at);
  return Number.isNaN(d.getTime()) ? at : d.toLocaleString();
}

function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

let toastTimer = 0;
function toast(message) {
  const t = $('toast');
  t.textContent = message;
  t.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { t.hidden = true; }, 6000);
}

function fail(e) {
  if (e && e.status === 401) { showLogin(); return; }
  toast(e && e.message ? e.message : String(e));
}

/** For background refreshes: silent, except that an ended session shows the login. */
function quiet(e) {
  if (e && e.status === 401) showLogin();
}

/** Asks before deleting; resolves true on "Delete". */
function confirmDelete(text) {
  const d = $('confirm');
  $('confirm-text').textContent = text;
  return new Promise((resolve) => {
    d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true });
    d.returnValue = 'cancel';
    d.showModal();
  });
}

function facts(dl, rows) {
  dl.replaceChildren(...rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', { dir: 'auto' }, v)]));
}

// ---------- views ----------

function showLogin() {
  document.querySelectorAll('.view').forEach((v) => { v.hidden = true; });
  document.querySelector('nav').hidden = true;
  $('logout').hidden = true;
  state.loggedOut = true;
  state.reconnecting = false;
  if (state.events) state.events.close();
  state.events = null;
  // Another tab streams the notices now (it finds it is logged out too, and passes it on).
  if (state.releaseStream) state.releaseStream();
  if (state.channel) state.channel.close();
  state.channel = null;
  // Logged out, nothing read while logged in stays in the page (hidden, it was still there).
  $('list').replaceChildren();
  $('list-info').textContent = '';
  $('detail').hidden = true;
  $('detail').replaceChildren();
  $('notices').replaceChildren();
  document.querySelectorAll('#queue-table tbody').forEach((b) => b.replaceChildren());
  $('health').textContent = 'logged out';
  $('login').hidden = false;
}

function route() {
  const view = (location.hash || '#memories').slice(1);
  state.view = ['memories', 'queue', 'notices', 'backend'].includes(view) ? view : 'memories';
  for (const name of ['memories', 'queue', 'notices', 'backend']) {
    $(`view-${name}`).hidden = name !== state.view;
    const tab = $(`tab-${name}`);
    if (name === state.view) tab.setAttribute('aria-current', 'page'); else tab.removeAttribute('aria-current');
  }
  if (state.view === 'memories' && state.listStale) refreshList();
  if (state.view === 'queue') loadQueue().catch(fail);
  if (state.view === 'backend') loadStatus().catch(fail);
  if (state.view === 'notices') { state.unseenProblems = 0; badge(); }
}

// ---------- memories ----------

async function loadBanks() {
  const select = $('bank');
  const backend = state.status && state.status.backend.backend;
  const all = backend === 'hindsight' ? 'The configured bank' : 'All banks';
  // A backend that cannot list its banks (a Hindsight server down) leaves the choice of all of
  // them, not the banks of the backend before it.
  let banks = [];
  const reachable = !(state.status && state.status.backend.healthy === false);
  // A bank of the backend before is no choice any more.
  const keep = (list) => { if (state.bank && !list.some((b) => b.bank === state.bank)) state.bank = ''; };
  try {
    if (reachable) ({ banks } = await api('GET', '/v1/banks'));
  } catch (e) {
    if (e && e.status === 401) throw e;
  }
  keep(banks);
  select.replaceChildren(h('option', { value: '' }, all),
    ...banks.map((b) => h('option', { value: b.bank, selected: b.bank === state.bank },
      b.memories === null || b.memories === undefined ? b.bank : `${b.bank} (${b.memories})`)));
}

function memoryItem(m, extra) {
  for (const t of m.tags || []) state.seenTags.add(t);
  const pressed = state.selected && state.selected.id === m.id;
  return h('li', {},
    h('button', {
      type: 'button', class: 'item', 'aria-pressed': pressed ? 'true' : 'false', dataset: { id: m.id, bank: m.bank },
      onclick: () => showDetail(m.id, m.bank).catch(fail),
    },
    h('div', { class: 'meta' },
      extra,
      h('span', {}, when(m.at)),
      m.kind ? h('span', { class: 'chip' }, m.kind) : null,
      m.bank ? h('span', {}, m.bank) : null,
      (m.tags || []).map((t) => h('span', { class: 'chip', dir: 'auto' }, t)),
      m.doc ? h('span', { title: 'document' }, 'doc ', h('bdi', {}, m.doc)) : null),
    h('div', { class: 'text' }, lines(m.text))));
}

// The tags typed in the filter, comma-separated: `\,` is a comma inside a tag (and `\\` a
// backslash), as the list's API reads them, and pieces that a tag seen in the list joins with
// their commas are that tag (a project in a folder named `web,app` is tagged `project:web,app`).
function askedTags(text) {
  const pieces = [''];
  for (let i = 0; i < (text || '').length; i += 1) {
    const c = text[i];
    if (c === '\\' && (text[i + 1] === ',' || text[i + 1] === '\\')) {
      pieces[pieces.length - 1] += text[i + 1];
      i += 1;
    } else if (c === ',') {
      pieces.push('');
    } else {
      pieces[pieces.length - 1] += c;
    }
  }
  const tags = [];
  for (let i = 0; i < pieces.length; i += 1) {
    let end = i;
    for (let j = pieces.length - 1; j > i; j -= 1) {
      if (state.seenTags.has(pieces.slice(i, j + 1).join(',').trim())) { end = j; break; }
    }
    tags.push(pieces.slice(i, end + 1).join(',').trim());
    i = end;
  }
  return tags.filter(Boolean);
}

async function loadList(cursor) {
  const p = new URLSearchParams({ limit: String(PAGE), preview: '280' });
  if (state.bank) p.set('bank', state.bank);
  const tags = askedTags(state.tags);
  if (tags.length) p.set('tags', tags.map((t) => t.replace(/[\\,]/g, (c) => `\\${c}`)).join(','));
  if (cursor) p.set('cursor', cursor);
  const asked = (state.listAsked += 1);
  const page = await api('GET', `/v1/memories?${p}`);
  if (asked !== state.listAsked) return; // a later list or search was asked for
  state.cursor = cursor || null;
  state.next = page.next;
  const items = page.memories.map((m) => memoryItem({
    id: m.id, bank: m.bank, text: m.content, kind: m.type, tags: m.tags, at: m.created_at, doc: m.document_id,
  }));
  $('list').replaceChildren(...items);
  $('list').dataset.mode = 'list';
  $('list').dataset.version = String((state.version += 1));
  $('clear-search').hidden = true;
  const count = page.memories.length;
  // A page can be empty and still have older ones after it: a Hindsight server's page of
  // memories its other clients marked wholly private shows nothing.
  $('list-info').textContent = count === 0
    ? (page.next ? 'Nothing to show on this page (private memories are not shown); older ones follow.'
      : (cursor ? 'No older memories.' : 'No memories here yet.'))
    : `${count} ${count === 1 ? 'memory' : 'memories'}, the last stored first${cursor ? ' (an earlier page)' : ''}.`;
  $('older').hidden = !page.next;
  $('newest').hidden = !cursor;
  $('known-tags').replaceChildren(...[...state.seenTags].sort().map((t) => h('option', { value: t })));
  if (!state.rendered) {
    state.rendered = true;
    performance.mark('mneme-list-rendered');
    document.body.dataset.listRendered = String(Math.round(performance.now()));
  }
}

// The banks a search reads: the one chosen, or under "All banks" every bank listed (an agent
// recalls in one bank, so each is asked as an agent of it would be; with per-project banks the
// configured bank alone held none of the projects' memories).
function banksToSearch() {
  if (state.bank) return [state.bank];
  const listed = [...$('bank').options].map((o) => o.value).filter(Boolean);
  const backend = state.status && state.status.backend.backend;
  return backend === 'hindsight' || listed.length === 0 ? [null] : listed;
}

async function search(query) {
  const tags = askedTags(state.tags);
  const asked = (state.listAsked += 1);
  const banks = banksToSearch();
  const settled = await Promise.allSettled(banks.map((bank) => {
    const body = { query, tags };
    if (bank) body.bank = bank;
    return api('POST', '/v1/search', body);
  }));
  if (asked !== state.listAsked) return;
  // A bank that could not answer does not hide the others' answers; it is named.
  const failed = banks.filter((_, i) => settled[i].status === 'rejected');
  if (failed.length === settled.length) throw settled[0].reason;
  if (failed.length) fail(new Error(`the search of ${failed.join(', ')} failed: ${settled.find((r) => r.status === 'rejected').reason.message}`));
  const answers = settled.filter((r) => r.status === 'fulfilled').map((r) => r.value);
  // Each bank's answer best first; banks after one another, the one with the best first.
  answers.sort((a, b) => ((b.results[0] && b.results[0].score) || 0) - ((a.results[0] && a.results[0].score) || 0));
  const found = answers.flatMap((answer) => answer.results.map((r) => ({ r, bank: answer.bank })));
  const items = found.map(({ r, bank }, i) => memoryItem({
    id: r.id, bank, text: r.text, kind: r.type, tags: r.tags, at: r.mentioned_at, doc: r.document_id,
  }, h('span', { class: 'score' }, `#${i + 1}${typeof r.score === 'number' ? ` · score ${r.score.toFixed(3)}` : ''}`)));
  $('list').replaceChildren(...items);
  $('list').dataset.mode = 'search';
  $('list').dataset.version = String((state.version += 1));
  const where = answers.length === 1 ? answers[0].bank : `${answers.length} banks`;
  const took = Math.max(...answers.map((a) => a.took_ms));
  $('list-info').textContent = `${items.length} ${items.length === 1 ? 'passage' : 'passages'} for “${query}” in ${where}`
    + ` (${took} ms${answers.length > 1 ? ' the slowest' : ''}): what an agent would be given, best first`
    + (tags.length ? ' (with the tags: memories with any of them, and untagged ones, as an agent recalls).' : '.');
  $('older').hidden = true;
  $('newest').hidden = true;
  $('clear-search').hidden = false;
}

async function showDetail(id, bank) {
  if (!id) return;
  state.selected = { id, bank };
  document.querySelectorAll('.item').forEach((b) => b.setAttribute('aria-pressed', b.dataset.id === id ? 'true' : 'false'));
  const q = bank ? `?bank=${encodeURIComponent(bank)}` : '';
  const asked = (state.detailAsked += 1);
  const d = await api('GET', `/v1/memories/${encodeURIComponent(id)}${q}`);
  // Another memory was chosen, or the pane closed, meanwhile: this answer is not shown (its
  // delete button would have deleted a memory other than the one highlighted).
  if (asked !== state.detailAsked) return;
  const m = d.memory;
  const dl = h('dl', { class: 'facts' });
  facts(dl, [
    ['id', m.id], ['bank', m.bank], ['type', m.type], ['created', when(m.created_at)],
    ['tags', (m.tags || []).join(', ') || '—'], ['context', m.context || '—'],
    ['document', m.document_id ? `${m.document_id} (${d.document_memories} ${d.document_memories === 1 ? 'memory' : 'memories'})` : '—'],
  ]);
  const passages = d.passages.length > 1
    ? [h('h3', {}, `Passages (${d.passages.length}) — what recall ranks`), h('ol', { class: 'passages' }, d.passages.map((p) => h('li', {}, lines(p))))]
    : [];
  const buttons = h('div', { class: 'row' },
    h('button', { type: 'button', class: 'danger', id: 'forget-memory', onclick: () => forgetMemory(m).catch(fail) }, 'Delete memory'),
    m.document_id ? h('button', { type: 'button', class: 'danger', id: 'forget-document',
      onclick: () => forgetDocument(m, d.document_memories).catch(fail) }, `Delete document (${d.document_memories})`) : null,
    h('button', { type: 'button', onclick: closeDetail }, 'Close'));
  const detail = $('detail');
  detail.replaceChildren(h('h2', {}, 'Memory'), dl, h('h3', {}, 'Content'), h('pre', { id: 'detail-content' }, lines(m.content)), ...passages, buttons);
  detail.dataset.id = m.id;
  detail.hidden = false;
  detail.focus();
}

function closeDetail() {
  state.detailAsked += 1;
  $('detail').hidden = true;
  state.selected = null;
  document.querySelectorAll('.item[aria-pressed="true"]').forEach((b) => b.setAttribute('aria-pressed', 'false'));
}

async function forgetMemory(m) {
  if (!await confirmDelete(`Delete memory ${m.id} from ${m.bank}? Recall will no longer find it.`)) return;
  const done = await api('DELETE', `/v1/memories/${encodeURIComponent(m.id)}?bank=${encodeURIComponent(m.bank)}`);
  toast(done.message);
  closeDetail();
  await refreshList();
}

async function forgetDocument(m, n) {
  if (!await confirmDelete(`Delete document ${m.document_id} and all ${n} of its memories from ${m.bank}?`)) return;
  const done = await api('DELETE', `/v1/documents/${encodeURIComponent(m.document_id)}?bank=${encodeURIComponent(m.bank)}`);
  toast(done.message);
  closeDetail();
  await refreshList();
}

async function refreshList() {
  const query = $('query').value.trim();
  if ($('list').dataset.mode === 'search' && query) await search(query); else await loadList(state.cursor);
  loadBanks().catch(() => {});
}

// ---------- queue ----------

async function loadQueue() {
  const q = await api('GET', '/v1/queue');
  const t = q.totals;
  $('queue-totals').textContent = `${t.pending} pending · ${t.in_flight} in flight · ${t.spooled} spooled · ${t.dead} dead letters`;
  const last = q.last_delivery;
  $('last-delivery').textContent = last
    ? `Last delivery ${when(last.at)}: ${last.items} ${last.items === 1 ? 'item' : 'items'} in ${last.took_ms} ms${last.ok ? '' : ` — failed: ${last.error}`}`
    : 'No delivery since the daemon started.';
  $('retry').disabled = t.dead === 0;
  const rows = q.sessions.map((s) => h('tr', { class: s.dead > 0 ? 'dead' : null },
    h('td', { class: 'session', dir: 'auto' }, s.session_id), h('td', {}, s.pending), h('td', {}, s.in_flight),
    h('td', {}, s.spooled), h('td', {}, s.dead),
    h('td', { class: s.last_delivery && !s.last_delivery.ok ? 'bad' : null }, s.last_delivery
      ? `${when(s.last_delivery.at)} · ${s.last_delivery.items} in ${s.last_delivery.took_ms} ms${s.last_delivery.ok ? '' : ' · failed'}`
      : '—')));
  $('queue-table').tBodies[0].replaceChildren(...(rows.length ? rows
    : [h('tr', {}, h('td', { colspan: '6' }, 'Nothing queued.'))]));
  badgeQueue(t);
}

function badgeQueue(t) {
  const b = $('queue-badge');
  b.hidden = !(t && t.dead > 0);
  b.textContent = t ? String(t.dead) : '';
  b.className = 'badge warn';
}

async function retryDead() {
  const r = await api('POST', '/v1/retry');
  toast(`Re-queued ${r.requeued} dead ${r.requeued === 1 ? 'letter' : 'letters'}.`);
  await loadQueue();
}

// ---------- notices ----------

function badge() {
  const b = $('notice-badge');
  b.hidden = state.unseenProblems === 0;
  b.textContent = String(state.unseenProblems);
}

/**
 * Shows the notices from the last 100 before `lastId` (the newest when the page loaded; newer
 * ones count as unseen problems) and every one after, live.
 *
 * Every tab of the view gets them through one stream: a browser opens at most six connections
 * to one host, and a stream held open by each tab left a sixth tab, and every request of the
 * others, waiting for ever. The tab that holds the lock streams and passes each notice on to the
 * others over a channel; when it closes (or logs out), the next takes the lock and streams from
 * the last notice it saw. A browser without locks or channels streams in each tab.
 */
function startNotices(lastId) {
  state.lastId = lastId || 0;
  state.seenNotice = Math.max(0, state.lastId - 100);
  if (!navigator.locks || typeof BroadcastChannel !== 'function') { streamNotices(); return; }
  const channel = new BroadcastChannel('mneme-notices');
  state.channel = channel;
  // Until the backlog is shown, what the streaming tab passes on waits (it is newer).
  let waiting = [];
  channel.onmessage = (ev) => {
    if (state.events || state.loggedOut) return; // this tab streams: it has them already
    const m = ev.data || {};
    if (m.kind === 'notice' && waiting) waiting.push(m.notice);
    else if (m.kind === 'notice') showNotice(m.notice);
    else if (m.kind === 'reconnecting') reconnecting();
    else if (m.kind === 'open') reconnected();
  };
  api('GET', `/v1/notices?after=${state.seenNotice}&limit=100`)
    .then((v) => { for (const n of v.notices || []) showNotice(n); })
    .catch(quiet)
    .finally(() => { const later = waiting; waiting = null; later.forEach(showNotice); });
  navigator.locks.request('mneme-notices', () => new Promise((release) => {
    state.releaseStream = release;
    if (state.loggedOut) { release(); return; }
    streamNotices();
  })).catch(quiet);
}

/** Streams the notices after the last one shown; passes each on to the other tabs. */
function streamNotices() {
  const es = new EventSource(`/v1/notices/stream?after=${state.seenNotice}`);
  state.events = es;
  const tell = (m) => { if (state.channel) state.channel.postMessage(m); };
  es.addEventListener('notice', (ev) => {
    let n;
    try { n = JSON.parse(ev.data); } catch (_) { return; }
    showNotice(n);
    tell({ kind: 'notice', notice: n });
  });
  es.addEventListener('error', () => {
    reconnecting();
    tell({ kind: 'reconnecting' });
    // A refused stream (the session ended: a daemon restarted forgets its sessions) is not
    // retried by the browser: log in again, or stream again once the daemon is back.
    if (es.readyState !== EventSource.CLOSED) return;
    setTimeout(() => {
      if (state.loggedOut || state.events !== es) return;
      api('GET', '/ui/session')
        .then((session) => { if (!session.logged_in) showLogin(); else streamNotices(); })
        .catch(() => { state.events = null; setTimeout(() => { if (!state.events && !state.loggedOut) streamNotices(); }, 3000); });
    }, 3000);
  });
  // Back after a drop: the health line says so again (the first open needs nothing: boot loaded it).
  es.addEventListener('open', () => { reconnected(); tell({ kind: 'open' }); });
}

/**
 * Puts a notice at the top of the list, once. One the spool could not store (a full disk: the
 * error the view most needs to show) comes with id 0, live and in the backlog: shown once by
 * its time and text, and counted, without moving the newest id seen (review114 #2).
 */
function showNotice(n) {
  if (typeof n.id !== 'number') return;
  if (n.id === 0) {
    const key = `${n.at}|${n.level}|${n.message}`;
    if (state.unstored.has(key)) return;
    state.unstored.add(key);
  } else {
    if (n.id <= state.seenNotice) return;
    state.seenNotice = n.id;
  }
  const li = h('li', { class: `notice ${n.level}`, dataset: { id: n.id, level: n.level } },
    h('div', { class: 'meta' }, h('span', {}, when(n.at)), h('span', { class: 'chip' }, n.level),
      h('span', {}, n.source), n.session_id ? h('span', { dir: 'auto' }, n.session_id) : null),
    h('div', { class: 'text', dir: 'auto' }, n.message));
  $('notices').prepend(li);
  // A backend switched or reopened by a reload: its banks are others, and so are its memories
  // (the list kept the old backend's, shown as current: review114 #3). Listed again now, or
  // when the Memories tab is next shown.
  if (n.id > state.lastId && n.source === 'config' && /backend/.test(n.message || '')) {
    state.listStale = true;
    loadStatus().then(loadBanks).then(() => { if (state.view === 'memories') refreshList(); }).catch(quiet);
  }
  if ((n.id > state.lastId || n.id === 0) && n.level !== 'info' && state.view !== 'notices') {
    state.unseenProblems += 1;
    badge();
  }
}

/**
 * Lists the newest memories again after a backend change: a backend that cannot list them (a
 * Hindsight server down) empties the list and says why, instead of leaving the old one's.
 */
function refreshList() {
  state.listStale = false;
  const cannot = (why) => {
    state.listAsked += 1; // a list still on its way is the old backend's
    $('list').replaceChildren();
    $('older').hidden = true;
    $('newest').hidden = true;
    $('list-info').textContent = `The backend cannot list its memories now: ${why}`;
  };
  // Not asked when the status says it cannot answer (a request bound to fail, logged as one).
  const backend = state.status && state.status.backend;
  if (backend && backend.healthy === false) { cannot(backend.detail || 'it is unhealthy'); return; }
  loadList(null).catch((e) => {
    if (e && e.status === 401) { showLogin(); return; }
    cannot(e && e.message ? e.message : String(e));
  });
}

function reconnecting() {
  state.reconnecting = true;
  $('health').textContent = 'reconnecting to the daemon…';
}

function reconnected() {
  if (state.reconnecting) { state.reconnecting = false; loadStatus().catch(quiet); }
}

// ---------- backend ----------

async function loadStatus() {
  const s = await api('GET', '/v1/status');
  state.status = s;
  const b = s.backend;
  const health = $('health');
  health.textContent = `${b.backend} · ${b.healthy ? 'healthy' : 'unhealthy'}${b.memories !== null && b.memories !== undefined ? ` · ${b.memories} memories` : ''}`;
  health.className = b.healthy ? 'health' : 'health bad';
  badgeQueue(s.queue);
  if (state.view !== 'backend') return s;
  facts($('backend-facts'), [
    ['backend', b.backend], ['health', b.healthy ? 'healthy' : `unhealthy${b.detail ? `: ${b.detail}` : ''}`],
    ['where', b.detail || '—'], ['server version', b.version || '—'],
    ['memories', b.memories === null || b.memories === undefined ? '—' : String(b.memories)],
    ['database size', bytes(b.storage_bytes)],
    ['queue', `${s.queue.pending} pending, ${s.queue.in_flight} in flight, ${s.queue.dead} dead letters`],
    ['sessions', String(s.sessions)], ['mneme', `${s.version} (pid ${s.pid}, up ${s.uptime_seconds} s)`],
    ['config', s.config_path], ['storage', s.storage_dir],
  ]);
  const e = b.embedding;
  $('embedding').hidden = !e;
  if (e) {
    facts($('embedding-facts'), [
      ['model', e.model], ['state', e.state + (e.error ? `: ${e.error}` : '')],
      ['vectors', `${e.embedded} of ${e.passages} passages`],
    ]);
    const p = $('backfill');
    p.max = Math.max(1, e.passages);
    p.value = e.embedded;
    p.textContent = `${e.embedded} / ${e.passages}`;
  }
  return s;
}

// ---------- start ----------

function wire() {
  window.addEventListener('hashchange', route);
  $('filters').addEventListener('submit', (ev) => {
    ev.preventDefault();
    state.bank = $('bank').value;
    state.tags = $('tags').value.trim();
    closeDetail();
    loadList(null).catch(fail);
  });
  $('bank').addEventListener('change', () => $('filters').requestSubmit());
  $('search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const q = $('query').value.trim();
    if (q) search(q).catch(fail); else loadList(null).catch(fail);
  });
  $('clear-search').addEventListener('click', () => { $('query').value = ''; loadList(null).catch(fail); });
  $('older').addEventListener('click', () => loadList(state.next).catch(fail));
  $('newest').addEventListener('click', () => loadList(null).catch(fail));
  $('retry').addEventListener('click', () => retryDead().catch(fail));
  $('logout').hidden = false;
  $('logout').addEventListener('click', () => api('POST', '/ui/logout').then(showLogin).catch(fail));
  document.addEventListener('keydown', (ev) => {
    const typing = ev.target instanceof HTMLInputElement || ev.target instanceof HTMLSelectElement;
    // Shown first: a hidden box takes no focus (from another tab, the hash change shows the
    // Memories view only after this handler; review114 #5).
    if (ev.key === '/' && !typing) { ev.preventDefault(); location.hash = '#memories'; route(); $('query').focus(); }
    if (ev.key === 'Escape' && !$('detail').hidden && !$('confirm').open) closeDetail();
  });
  setInterval(() => {
    if (document.hidden || state.loggedOut) return;
    if (state.view === 'queue') loadQueue().catch(quiet);
    else loadStatus().catch(quiet);
  }, 2000);
}

async function boot() {
  try {
    const session = await api('GET', '/ui/session');
    if (!session.logged_in) { showLogin(); return; }
    state.csrf = session.csrf;
  } catch (e) {
    fail(e);
    return;
  }
  wire();
  route();
  // The list first: it is what the page is for. The rest fills in beside it.
  const list = loadList(null).catch(fail);
  const status = loadStatus().then((s) => { startNotices(s.last_notice_id); return loadBanks(); }).catch(fail);
  await Promise.all([list, status]);
}

boot();
