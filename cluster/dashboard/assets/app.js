// ordo dashboard: reads Frames from dashboard/events (Server-Sent Events)
// and renders them. No dependencies, no build step.
'use strict';

const PALETTE = ['#3b6fd8', '#e0813a', '#2e9e6b', '#9b59b6', '#d64577', '#1aa3b8', '#b59a1a', '#6a7b8f',
  '#7a4bd6', '#c0504d', '#4f9d2d', '#d35fb7'];
const MAX_SAMPLES = 330;
const MAX_EVENTS = 500;

const S = {
  self: '', prefix: '', interval: 1000, time: 0,
  members: [], shards: [], nodes: {}, events: [],
  colors: new Map(), windowSec: 120, selected: null, kinds: new Set(), inspected: null,
};

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));

function color(id) {
  if (!id) return '#c5cad3';
  if (!S.colors.has(id)) S.colors.set(id, PALETTE[S.colors.size % PALETTE.length]);
  return S.colors.get(id);
}

// ---- connection ----

function connect() {
  const es = new EventSource('dashboard/events');
  es.onmessage = (m) => {
    setConn(true);
    try {
      apply(JSON.parse(m.data));
      $('page-error').hidden = true;
    } catch (e) {
      $('page-error').hidden = false;
      $('page-error').textContent = `cannot show an update: ${e.message}`;
      console.error(e);
    }
  };
  es.onerror = () => {
    setConn(false);
    if (es.readyState === EventSource.CLOSED) { es.close(); setTimeout(connect, 3000); }
  };
}

function setConn(on) {
  $('conn').className = 'conn ' + (on ? 'on' : 'off');
  $('conn-text').textContent = on ? 'live' : 'reconnecting';
}

// ---- state ----

function apply(f) {
  if (f.reset) { S.nodes = {}; S.events = []; }
  S.self = f.self; S.prefix = f.prefix; S.interval = f.interval_ms || 1000; S.time = f.t;
  S.members = f.members || [];
  for (const m of [...S.members].sort((a, b) => a.id.localeCompare(b.id))) color(m.id);
  for (const [id, nf] of Object.entries(f.nodes || {})) {
    let nd = S.nodes[id];
    if (!nd || nf.reset) nd = S.nodes[id] = { samples: [] };
    if (nf.samples) nd.samples.push(...nf.samples);
    if (nd.samples.length > MAX_SAMPLES) nd.samples.splice(0, nd.samples.length - MAX_SAMPLES);
    Object.assign(nd, { reachable: nf.reachable, error: nf.error, totals: nf.totals, active: nf.active,
      activePerShard: nf.active_per_shard || {} });
  }
  const newEvents = (f.events || []).length > 0 || f.reset;
  if (f.events) {
    S.events.push(...f.events);
    S.events.sort((a, b) => a.t - b.t);
    if (S.events.length > MAX_EVENTS) S.events.splice(0, S.events.length - MAX_EVENTS);
  }
  $('self').textContent = S.self;
  $('prefix').textContent = S.prefix || 'cluster';
  document.title = `ordo · ${S.self}`;
  renderMembers();
  renderShards(f.shards || []);
  refreshInspected(f.shards || []);
  renderKinds();
  renderNodes();
  if (newEvents) renderTimeline();
  renderKindOptions();
}

// ---- formatting ----

function fmtNum(v, unit = '') {
  if (v === undefined || v === null || Number.isNaN(v)) return '–';
  const a = Math.abs(v);
  const s = a >= 1000 ? (v / 1000).toFixed(a >= 10000 ? 0 : 1) + 'k' : a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  return s.replace(/\.0+$|(\.\d*?)0+$/, '$1') + unit;
}
function fmtTime(ms) {
  const d = new Date(ms);
  return d.toLocaleTimeString([], { hour12: false });
}
function fmtSecs(s) {
  if (s === undefined || s === null) return '–';
  if (s < 0) return 'ended';
  return s.toFixed(s < 10 ? 1 : 0) + ' s';
}
function fmtTTL(s) {
  if (s === undefined || s === null) return '–';
  return s < 0 ? 'ended' : `${Math.round(s)} s`;
}

// ---- members ----

function renderMembers() {
  const rows = S.members.map((m) => {
    const gone = m.state === 'down' || m.state === 'dead';
    const validFor = m.deadline ? (m.deadline - S.time) / 1000 : null;
    const valid = m.lease_valid === undefined ? '–' : m.lease_valid ? fmtSecs(Math.max(0, validFor)) : '<span class="error">not valid</span>';
    const admin = m.admin_addr ? `<a href="http://${esc(m.admin_addr)}/" target="_blank" title="this node's dashboard">admin ${esc(m.admin_addr)}</a>` : 'admin –';
    const note = m.not_ready ? `<div class="note">not ready: ${esc(m.not_ready)}</div>` : m.error && !m.self && !gone ? `<div class="note">${esc(m.error)}</div>` : '';
    return `<tr data-member="${esc(m.id)}" data-state="${esc(m.state)}" class="${gone ? 'gone' : ''}">
      <td><span class="swatch" style="background:${color(m.id)}"></span><b>${esc(m.id)}</b>${m.self ? '<span class="tag">this node</span>' : ''}${note}</td>
      <td><span class="badge ${esc(m.state)}">${esc(m.state.replace('-', ' '))}</span>${m.gossip && m.gossip !== 'alive' ? `<div class="note">gossip: ${esc(m.gossip)}</div>` : ''}</td>
      <td class="mono">${m.registered ? esc(m.lease) : '<span class="note">not registered</span>'}</td>
      <td class="num" title="as etcd reports it, in whole seconds">${m.registered ? fmtTTL(m.lease_ttl) : '–'}</td>
      <td class="num">${valid}</td>
      <td class="num">${m.shards}</td>
      <td class="num">${m.reachable || m.self ? m.active : '–'}</td>
      <td class="addr"><span title="remote (calls)">${esc(m.remote_addr || '–')}</span> · <span title="gossip">${esc(m.gossip_addr || '–')}</span><br>${admin}</td>
    </tr>`;
  });
  $('members').tBodies[0].innerHTML = rows.join('');
  const up = S.members.filter((m) => m.state === 'alive').length;
  $('members-summary').textContent = `${up} of ${S.members.length} alive`;
}

// ---- shards ----

let cells = [];

function renderShards(shards) {
  const grid = $('shards');
  if (cells.length !== shards.length) {
    grid.innerHTML = '';
    cells = shards.map((_, i) => {
      const c = document.createElement('div');
      c.className = 'cell';
      c.dataset.shard = i;
      c.innerHTML = `<span class="n">${i}</span><span class="e"></span>`;
      c.addEventListener('click', () => selectShard(i));
      c.addEventListener('animationend', () => c.classList.remove('flash'));
      grid.appendChild(c);
      return { el: c, owner: null, epoch: null };
    });
  }
  let free = 0;
  const activeOf = (s, owner) => (S.nodes[owner]?.activePerShard || {})[s];
  shards.forEach((sh, i) => {
    const c = cells[i];
    const owner = sh.o || '';
    const epoch = sh.e || 0;
    if (!owner) free++;
    if (c.owner !== owner || c.epoch !== epoch) {
      if (c.owner !== null) {
        c.el.classList.remove('flash');
        void c.el.offsetWidth; // restart the animation
        c.el.classList.add('flash');
      }
      c.owner = owner; c.epoch = epoch;
      c.el.dataset.owner = owner;
      c.el.dataset.epoch = epoch;
      c.el.classList.toggle('free', !owner);
      c.el.style.background = owner ? color(owner) : '';
      c.el.querySelector('.e').textContent = owner ? epoch : '—';
    }
    const n = activeOf(i, owner);
    c.el.title = owner ? `shard ${i} · ${owner} · epoch ${epoch}${n !== undefined ? ` · ${n} active` : ''}` : `shard ${i} · free (moving)`;
    c.el.classList.toggle('sel', S.selected === i);
  });
  const owners = {};
  shards.forEach((sh) => { if (sh.o) owners[sh.o] = (owners[sh.o] || 0) + 1; });
  $('legend').innerHTML = Object.keys(owners).sort().map((o) =>
    `<span><span class="swatch" style="background:${color(o)}"></span>${esc(o)}: ${owners[o]}</span>`).join('') +
    (free ? `<span><span class="swatch" style="background:#dde0e6"></span>free: ${free}</span>` : '') +
    '<span class="muted">number in a cell: fencing epoch; click a shard for its entities</span>';
  $('shards-summary').textContent = `${shards.length} shards · ${shards.length - free} owned`;
  if (S.selected !== null && shards[S.selected]) {
    const sh = shards[S.selected];
    const p = $('shard-panel');
    if (p.dataset.owner !== (sh.o || '') || p.dataset.epoch !== String(sh.e || 0)) selectShard(S.selected);
  }
}

async function selectShard(i) {
  S.selected = i;
  cells.forEach((c, j) => c.el.classList.toggle('sel', j === i));
  const p = $('shard-panel');
  p.hidden = false;
  const c = cells[i];
  p.dataset.owner = c.owner; p.dataset.epoch = String(c.epoch);
  p.innerHTML = `<b>Shard ${i}</b> <span class="muted">loading…</span>`;
  try {
    const r = await fetch(`dashboard/api/shards/${i}`);
    const d = await r.json();
    if (!r.ok) throw new Error(d.error || r.statusText);
    if (S.selected !== i) return;
    const kinds = Object.keys(d.kinds || {}).sort();
    const body = kinds.length === 0 ? '<div class="muted">no active entities</div>' : kinds.map((k) =>
      `<div><b>${esc(k)}</b> <span class="muted">${d.kinds[k].length}</span></div><div class="ids">${
        d.kinds[k].map((id) => `<a data-kind="${esc(k)}" data-id="${esc(id)}">${esc(id)}</a>`).join('')}</div>`).join('');
    p.innerHTML = `<b>Shard ${i}</b> <span class="muted">· owner</span> ${d.owner ? `<span class="swatch" style="background:${color(d.owner)}"></span>${esc(d.owner)}` : 'none (moving)'}
      <span class="muted">· epoch</span> ${d.epoch || '–'} <span class="muted">· ${d.count} active on ${esc(d.node)}${d.truncated ? ' (list truncated)' : ''}</span>
      ${d.error ? `<div class="note error">${esc(d.error)}</div>` : ''}<div style="margin-top:6px">${body}</div>`;
    p.dataset.owner = d.owner || ''; p.dataset.epoch = String(d.epoch || 0);
    p.querySelectorAll('a[data-kind]').forEach((a) => a.addEventListener('click', () => inspect(a.dataset.kind, a.dataset.id)));
  } catch (e) {
    p.innerHTML = `<b>Shard ${i}</b> <span class="error">${esc(e.message)}</span>`;
  }
}

// ---- sparklines ----

// spark draws series (arrays of [t, v]) over the chosen window; the first
// series is filled.
function spark(series, { w = 120, h = 24, colors = ['#3b6fd8'], min0 = true } = {}) {
  const [start, end] = chartSpan();
  let hi = 0;
  let lo = min0 ? 0 : Infinity;
  for (const s of series) for (const [t, v] of s) if (t >= start) { hi = Math.max(hi, v); lo = Math.min(lo, v); }
  if (!Number.isFinite(lo)) lo = 0;
  if (hi <= lo) hi = lo + 1;
  const x = (t) => ((t - start) / (end - start)) * (w - 2) + 1;
  const y = (v) => h - 2 - ((v - lo) / (hi - lo)) * (h - 4);
  const gap = S.interval * 2.5;
  let out = `<svg width="${w}" height="${h}" viewBox="0 0 ${w} ${h}"><rect x="0" y="0" width="${w}" height="${h}" fill="#f7f8fa" rx="2"/>`;
  series.forEach((s, k) => {
    const col = colors[k % colors.length];
    // Split where samples are missing (a node down), so no line bridges the gap.
    let runs = [];
    let run = [];
    let lastT = null;
    for (const [t, v] of s) {
      if (t < start) continue;
      if (lastT !== null && t - lastT > gap) { runs.push(run); run = []; }
      run.push([x(t), y(v)]);
      lastT = t;
    }
    runs.push(run);
    for (const r of runs) {
      if (r.length === 0) continue;
      const pts = r.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' ');
      if (k === 0 && r.length > 1) {
        out += `<polygon points="${r[0][0].toFixed(1)},${h - 1} ${pts} ${r[r.length - 1][0].toFixed(1)},${h - 1}" fill="${col}" fill-opacity="0.15"/>`;
      }
      out += r.length === 1 ? `<circle cx="${r[0][0].toFixed(1)}" cy="${r[0][1].toFixed(1)}" r="1.5" fill="${col}"/>`
        : `<polyline points="${pts}" fill="none" stroke="${col}" stroke-width="1.4"/>`;
    }
  });
  return out + '</svg>';
}

// chartSpan is the time range the charts show: the chosen window, or
// less while there are not yet samples that old.
function chartSpan() {
  const end = S.time || Date.now();
  let first = end;
  for (const nd of Object.values(S.nodes)) if (nd.samples.length) first = Math.min(first, nd.samples[0].t);
  const start = Math.max(end - S.windowSec * 1000, first - S.interval);
  return [start, Math.max(end, start + 10 * S.interval)];
}

function sumRates(m) { let s = 0; for (const v of Object.values(m || {})) s += v; return s; }
function errRates(m) { let s = 0; for (const [o, v] of Object.entries(m || {})) if (o !== 'ok') s += v; return s; }
// Over every kind (kind → outcome → rate).
function sumAll(m) { let s = 0; for (const k of Object.values(m || {})) s += sumRates(k); return s; }
function errAll(m) { let s = 0; for (const k of Object.values(m || {})) s += errRates(k); return s; }

// clusterSeries sums (or takes the max of) a per-sample value over nodes,
// aligned on the sampling interval.
function clusterSeries(get, agg = 'sum') {
  const byT = new Map();
  for (const nd of Object.values(S.nodes)) {
    for (const s of nd.samples) {
      const v = get(s);
      if (v === undefined) continue;
      const t = Math.round(s.t / S.interval) * S.interval;
      const cur = byT.get(t);
      byT.set(t, cur === undefined ? v : agg === 'sum' ? cur + v : Math.max(cur, v));
    }
  }
  return [...byT.entries()].sort((a, b) => a[0] - b[0]);
}

const last = (s) => (s.length ? s[s.length - 1][1] : undefined);

// ---- calls by kind ----

function renderKinds() {
  const kinds = new Set();
  for (const nd of Object.values(S.nodes)) for (const s of nd.samples) {
    Object.keys(s.calls || {}).forEach((k) => kinds.add(k));
    Object.keys(s.served || {}).forEach((k) => kinds.add(k));
  }
  for (const m of S.members) (m.kinds || []).forEach((k) => S.kinds.add(k));
  const rows = [...kinds].sort().map((k) => {
    const calls = clusterSeries((s) => sumRates(s.calls?.[k]));
    const served = clusterSeries((s) => sumRates(s.served?.[k]));
    const p50 = clusterSeries((s) => s.p50?.[k], 'max');
    const p99 = clusterSeries((s) => s.p99?.[k], 'max');
    const errs = clusterSeries((s) => errRates(s.calls?.[k]) + errRates(s.served?.[k]));
    // Outcomes over the window.
    const [start] = chartSpan();
    const outcomes = {};
    for (const nd of Object.values(S.nodes)) for (const s of nd.samples) {
      if (s.t < start) continue;
      for (const src of [s.calls?.[k], s.served?.[k]]) for (const [o, v] of Object.entries(src || {})) {
        outcomes[o] = (outcomes[o] || 0) + v * (S.interval / 1000);
      }
    }
    const chips = Object.keys(outcomes).sort().map((o) =>
      `<span class="chip ${o === 'ok' ? 'ok' : ''}">${esc(o.replace(/^CODE_/, '').toLowerCase())} ${fmtNum(outcomes[o])}</span>`).join('');
    return `<tr data-kind="${esc(k)}">
      <td><b>${esc(k)}</b></td>
      <td><span class="spark">${spark([calls])}<span class="v">${fmtNum(last(calls))}</span></span></td>
      <td><span class="spark">${spark([served], { colors: ['#2e9e6b'] })}<span class="v">${fmtNum(last(served))}</span></span></td>
      <td><span class="spark">${spark([p99, p50], { colors: ['#d9822b', '#3b6fd8'] })}<span class="v">${p50.length ? `${fmtNum(last(p50))} · ${fmtNum(last(p99))}` : '–'}</span></span></td>
      <td class="errs"><span class="spark">${spark([errs], { colors: ['#d64545'] })}<span class="v">${fmtNum(last(errs))}</span></span>
        <div class="chips" title="outcomes over the window, caller and owner side">${chips}</div></td>
    </tr>`;
  });
  $('kinds').tBodies[0].innerHTML = rows.length ? rows.join('') : '<tr><td colspan="5" class="muted">no calls yet</td></tr>';
}

// ---- per node ----

function renderNodes() {
  const members = new Map(S.members.map((m) => [m.id, m]));
  const ids = [...new Set([...Object.keys(S.nodes), ...members.keys()])].sort();
  const cards = ids.map((id) => {
    const nd = S.nodes[id] || { samples: [] };
    const m = members.get(id) || { state: 'down' };
    const ser = (get) => nd.samples.filter((s) => get(s) !== undefined).map((s) => [s.t, get(s)]);
    // A node whose samples stopped (down, unreachable) has no current value.
    const gone = m.state === 'down' || m.state === 'dead';
    const fresh = !gone && nd.samples.length > 0 && S.time - nd.samples[nd.samples.length - 1].t < 3 * S.interval;
    const now = (series, f = fmtNum) => (fresh ? f(last(series)) : '–');
    const row = (label, series, value, colors) =>
      `<div class="row"><span class="k">${label}</span><span class="spark">${spark(series, { w: 140, colors })}<span class="v">${value}</span></span></div>`;
    const calls = ser((s) => sumAll(s.calls));
    const served = ser((s) => sumAll(s.served));
    const p99 = ser((s) => (s.p99 ? Math.max(...Object.values(s.p99)) : undefined));
    const errs = ser((s) => errAll(s.calls) + errAll(s.served));
    const wps = ser((s) => (s.saves > 0 ? s.writes_per_save : undefined));
    const saves = ser((s) => s.saves);
    const fenced = ser((s) => s.fenced);
    const moves = ser((s) => s.handoffs);
    const revokes = ser((s) => s.failovers);
    const active = ser((s) => s.active);
    const t = nd.totals || {};
    return `<div class="node-card ${gone ? 'gone' : ''}" data-node="${esc(id)}">
      <h3><span class="swatch" style="background:${color(id)}"></span>${esc(id)}<span class="badge ${esc(m.state)}">${esc(m.state.replace('-', ' '))}</span></h3>
      ${row('calls/s', [calls], now(calls))}
      ${row('served/s', [served], now(served), ['#2e9e6b'])}
      ${row('p99 ms', [p99], now(p99), ['#d9822b'])}
      ${row('errors/s', [errs], now(errs), ['#d64545'])}
      ${row('saves/s', [saves], now(saves), ['#6a7b8f'])}
      ${row('writes/Save', [wps], now(wps), ['#9b59b6'])}
      ${row('fenced', [fenced], `${fmtNum(t.fenced ?? 0)} total`, ['#d64545'])}
      ${row('handoffs', [moves], `${fmtNum(t.handoffs ?? 0)} total`, ['#1aa3b8'])}
      ${row('revocations', [revokes], `${fmtNum(t.failovers ?? 0)} total`, ['#b59a1a'])}
      ${row('active', [active], now(active), ['#2e9e6b'])}
      ${nd.error && !gone ? `<div class="err">${esc(nd.error)}</div>` : ''}
      ${gone ? '<div class="note">no numbers: the node is down</div>' : ''}
    </div>`;
  });
  $('nodes').innerHTML = cards.join('');
}

// ---- timeline ----

const BAD = new Set(['dead', 'fenced', 'failed', 'lease-lost', 'unregister']);
const WARN = new Set(['suspect', 'reregister', 'new-lease', 'revoke']);

function renderTimeline() {
  const evs = S.events.slice(-200).reverse();
  $('timeline').innerHTML = evs.map((e) => {
    const cls = BAD.has(e.type) ? 'bad' : WARN.has(e.type) ? 'warn' : '';
    const moves = e.moves && e.moves.length > 1 ? `<details><summary>${e.moves.length} shards</summary><div>${
      e.moves.map((m) => `${m.shard}: ${esc(m.from || '–')}${m.from_epoch ? ' e' + m.from_epoch : ''} → ${esc(m.to)} e${m.to_epoch}`).join('<br>')}</div></details>` : '';
    return `<li class="${cls}" data-type="${esc(e.type)}"><span class="t">${fmtTime(e.t)}</span>
      <span class="text"><span class="who" style="background:${color(e.node)}" title="observed by ${esc(e.node)}">${esc(e.node)}</span>${esc(e.text)}</span>${moves}</li>`;
  }).join('');
  $('timeline-summary').textContent = S.events.length ? `${S.events.length} events` : '';
}

// ---- entity inspector ----

function renderKindOptions() {
  const sel = $('inspect-kind');
  const kinds = [...S.kinds].sort();
  if (sel.dataset.kinds === kinds.join(',')) return;
  const cur = sel.value;
  sel.dataset.kinds = kinds.join(',');
  sel.innerHTML = kinds.map((k) => `<option>${esc(k)}</option>`).join('');
  if (kinds.includes(cur)) sel.value = cur;
}

// S.inspected is the entity the inspector shows, with the owner and epoch
// of its shard then; it is read again when they change.
function refreshInspected(shards) {
  const i = S.inspected;
  if (!i || i.loading || i.shard === undefined || !shards[i.shard]) return;
  const sh = shards[i.shard];
  if ((sh.o || '') !== i.owner || (sh.e || 0) !== i.epoch) inspect(i.kind, i.id, true);
}

async function inspect(kind, id, quiet) {
  $('inspect-kind').value = kind;
  $('inspect-id').value = id;
  const out = $('inspect-out');
  if (!quiet) out.innerHTML = '<span class="muted">loading…</span>';
  S.inspected = { kind, id, loading: true };
  try {
    const r = await fetch(`dashboard/api/entities/${encodeURIComponent(kind)}/${encodeURIComponent(id)}`);
    const e = await r.json();
    if (!r.ok) throw new Error(e.error || r.statusText);
    if (S.inspected.kind !== kind || S.inspected.id !== id) return;
    S.inspected = { kind, id, shard: e.shard, owner: e.owner || '', epoch: e.epoch || 0 };
    const rec = e.record || {};
    out.innerHTML = `<div class="kv">
      <span class="k">entity</span><span class="mono">${esc(e.kind)}/${esc(e.id)}</span>
      <span class="k">shard</span><span>${e.shard}</span>
      <span class="k">owner</span><span>${e.owner ? `<span class="swatch" style="background:${color(e.owner)}"></span>${esc(e.owner)} · epoch ${e.epoch}` : 'none (moving)'}</span>
      <span class="k">active</span><span>${e.active ? 'yes' : 'no'}, on ${esc(e.node)}</span>
      <span class="k">record</span><span>${rec.found ? `seq ${rec.seq} · ${rec.size} bytes (state ${rec.state_size}) · written at epoch ${rec.epoch || '–'} · ${rec.recent_requests} recent requests` : 'never saved'}</span>
      <span class="k">state type</span><span class="mono">${esc(rec.state_type)}</span>
      ${runtimeRows(e.runtime)}
    </div>${e.error ? `<div class="note error">${esc(e.error)}</div>` : ''}<pre class="state">${esc(JSON.stringify(rec.state, null, 2))}</pre>`;
  } catch (err) {
    S.inspected = null;
    out.innerHTML = `<span class="error">${esc(err.message)}</span>`;
  }
}

// runtimeRows shows what an active entity waits for (actors.Runtime): its
// writes not yet durable, the replies and messages held behind them, its
// messages not yet answered and its writes queued in the batcher.
function runtimeRows(rt) {
  if (!rt) return '';
  const ref = (r) => `${esc(r.Kind)}/${esc(r.ID)}`; // actors.Ref has no JSON tags
  const rows = [];
  const a = rt.actor;
  if (a) {
    const behind = a.seq - a.durable;
    const flags = [a.passivating && 'passivating', a.stopping && 'stopping', rt.closing && 'closing'].filter(Boolean);
    rows.push(['in memory', `write ${a.seq}, durable ${a.durable}${behind > 0 ? ` <span class="warn">(${behind} not durable)</span>` : ''}` +
      ` · mailbox ${rt.mailbox}${rt.parked ? ` · ${rt.parked} parked` : ''}${flags.length ? ` · ${flags.join(', ')}` : ''}`]);
    if (a.held || a.deferred) {
      rows.push(['waiting', [a.held && `${a.held} held until write ${a.held_for} is durable`, a.deferred && `${a.deferred} deferred replies`].filter(Boolean).join(' · ')]);
    }
    if (a.outs && a.outs.length) {
      rows.push(['messages out', a.outs.map((o) => `<div>→ <span class="mono">${ref(o.to)}</span> after write ${o.dep}, ` +
        `attempt ${o.attempts}${o.colocated ? ', co-located' : ''}${o.scheduled ? ', backing off' : ''}</div>`).join('')]);
    }
  } else {
    rows.push(['in memory', `<span class="warn">${esc(rt.actor_error || 'no answer')}</span> · mailbox ${rt.mailbox}`]);
  }
  const w = rt.writes;
  if (w) {
    const head = `durable ${w.durable}${w.sending ? ' · a Save in flight' : ''}${w.poisoned ? ` · <span class="error">${esc(w.poisoned)}</span>` : ''}`;
    const queued = (w.queued || []).map((q) => `<div>write ${q.seq} (covers ${q.covers}, epoch ${q.epoch})` +
      `${q.expect ? `, expects ${q.expect} co-located` : ''}` +
      `${(q.after || []).map((d) => `, after <span class="mono">${ref(d.ref)}</span> write ${d.seq}`).join('')}</div>`).join('');
    rows.push(['batcher', head + queued]);
  } else {
    rows.push(['batcher', `<span class="warn">${esc(rt.writes_error || 'no answer')}</span>`]);
  }
  return rows.map(([k, v]) => `<span class="k">${k}</span><span>${v}</span>`).join('');
}

$('inspect-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const id = $('inspect-id').value.trim();
  if (id) inspect($('inspect-kind').value, id);
});

document.querySelectorAll('.window button').forEach((b) => b.addEventListener('click', () => {
  S.windowSec = Number(b.dataset.window);
  document.querySelectorAll('.window button').forEach((x) => x.classList.toggle('on', x === b));
  renderKinds();
  renderNodes();
}));

connect();
