// Steward console: a small single-page app over steward-sched's API, or one stewardd's
// (docs/console.md). Hand-written, no dependencies: every view is drawn with DOM calls (never
// parsed HTML, so text from workloads stays text) and its bars and charts are inline SVG. Each
// view draws its frame once and then only fills it, every 2 s (the events page as its stream
// speaks), so nothing moves as data arrives. Routes are real paths under /ui/ (History API):
// deep links and Back work.
'use strict';

(() => {
  const TOKEN_KEY = 'steward.token';
  const REFRESH_MS = 2000;
  const main = document.getElementById('main');
  // server: `steward-sched` (a cluster) or `stewardd` (one host's remote listener); host: the
  // host's name there.
  const state = { role: null, server: null, host: null, gen: 0, abort: null, timer: null };
  const isHost = () => state.server === 'stewardd';

  // ---- DOM ------------------------------------------------------------------------------

  function add(el, kids) {
    for (const k of [kids].flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      el.append(k instanceof Node ? k : document.createTextNode(String(k)));
    }
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else if (k === 'text') el.textContent = v;
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    return el;
  }

  const h = (tag, attrs, ...kids) => add(setAttrs(document.createElement(tag), attrs), kids);
  const SVG = 'http://www.w3.org/2000/svg';
  const s = (tag, attrs, ...kids) => add(setAttrs(document.createElementNS(SVG, tag), attrs), kids);
  const fill = (el, ...kids) => { el.replaceChildren(); return add(el, kids); };

  // A table whose rows are kept by key: a row whose cells read the same is left alone (so a
  // focused button stays focused); only changed cells are redrawn. With `widths` (percentages
  // of its columns) its layout is fixed: text arriving in a cell never moves the others.
  function table(headers, emptyText, widths) {
    const tbody = h('tbody');
    const cols = widths ? h('colgroup', {}, widths.map((w) => { const c = h('col'); c.style.width = w + '%'; return c; })) : null;
    const el = h('div', { class: 'scroll' },
      h('table', { class: widths ? 'fixed' : null }, cols, h('thead', {}, h('tr', {}, headers.map((t) => {
        const [text, cls] = Array.isArray(t) ? t : [t, null];
        return h('th', { scope: 'col', class: cls }, text);
      }))), tbody));
    const rows = new Map();
    const empty = h('tr', { class: 'empty' }, h('td', { colspan: headers.length }, 'Loading…'));
    tbody.append(empty);
    return {
      el,
      set(items, key, cells) {
        const seen = new Set();
        let prev = null;
        for (const item of items) {
          const k = key(item);
          seen.add(k);
          let tr = rows.get(k);
          if (!tr) { tr = h('tr', { 'data-key': k }); rows.set(k, tr); }
          const content = cells(item);
          content.forEach((c, i) => {
            const [kids, cls] = c && typeof c === 'object' && !(c instanceof Node) && 'cell' in c ? [c.cell, c.cls] : [c, null];
            const td = h('td', { class: cls }, kids);
            const sig = td.outerHTML;
            let old = tr.children[i];
            if (!old) tr.append(td);
            else if (old.dataset.sig !== sig) old.replaceWith(td);
            td.dataset.sig = sig;
          });
          while (tr.children.length > content.length) tr.lastChild.remove();
          const where = prev ? prev.nextSibling : tbody.firstChild;
          if (where !== tr) tbody.insertBefore(tr, where);
          prev = tr;
        }
        for (const [k, tr] of rows) if (!seen.has(k)) { tr.remove(); rows.delete(k); }
        empty.firstChild.textContent = emptyText;
        if (items.length) empty.remove(); else tbody.append(empty);
      },
    };
  }

  const cell = (kids, cls) => ({ cell: kids, cls });

  // A bar of `value` of `max`, drawn as SVG, its numbers beside it and read out as a meter.
  function meter(value, max, label, text, capacity) {
    const frac = max > 0 ? Math.min(value / max, 1) : 0;
    const width = (frac * 100).toFixed(1);
    const full = capacity && max > 0 && value >= max ? ' full' : '';
    return h('div', { class: 'meter', role: 'meter', 'aria-label': label, 'aria-valuemin': 0,
      'aria-valuemax': max, 'aria-valuenow': value, 'aria-valuetext': text, 'data-value': value, 'data-max': max },
    s('svg', { viewBox: '0 0 100 10', preserveAspectRatio: 'none', 'aria-hidden': 'true', focusable: 'false' },
      s('rect', { class: 'bg', width: 100, height: 10, rx: 2 }),
      s('rect', { class: 'fg' + full, width, height: 10, rx: 2 })),
    h('span', {}, text));
  }

  const PHASE_CLASS = {
    Running: 'ok', Successful: 'ok', up: 'ok', complete: 'ok', yes: 'ok',
    progressing: 'info', Pending: 'info', Starting: 'info', Staging: 'info',
    paused: 'warn', waiting: 'muted', Inconclusive: 'warn', Stopped: 'warn', Backoff: 'warn', Stopping: 'warn', cordoned: 'warn',
    failed: 'bad', Failed: 'bad', Error: 'bad', lost: 'bad', unreachable: 'bad', missing: 'bad', Exited: 'bad', no: 'bad',
  };
  const badge = (text, attrs) => h('span', Object.assign({ class: 'badge ' + (PHASE_CLASS[text] || 'muted') }, attrs), text);

  // ---- formatting ------------------------------------------------------------------------

  const utc = (ms) => (ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + 'Z' : '—');
  function ago(ms) {
    if (!ms) return '';
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    if (s < 90) return s + ' s ago';
    if (s < 5400) return Math.round(s / 60) + ' min ago';
    if (s < 129600) return Math.round(s / 3600) + ' h ago';
    return Math.round(s / 86400) + ' d ago';
  }
  const cores = (m) => (m / 1000).toFixed(m % 1000 === 0 ? 0 : 2);
  function bytes(n) {
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
    return (i ? n.toFixed(1) : n) + ' ' + units[i];
  }
  const appOf = (instance) => instance.split('/').slice(0, 2).join('/');
  const enc = (key) => key.split('/').map(encodeURIComponent).join('/');
  const labels = (obj) => Object.entries(obj || {}).map(([k, v]) => h('span', { class: 'label' }, `${k}=${v}`));

  // ---- the API ---------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, code, message) { super(message); this.status = status; this.code = code; }
  }

  const token = () => sessionStorage.getItem(TOKEN_KEY);

  async function api(path, opts = {}) {
    const headers = Object.assign({ Authorization: 'Bearer ' + token() }, opts.body ? { 'Content-Type': 'application/json' } : {});
    const res = await fetch(path, { method: opts.method || 'GET', headers, body: opts.body, signal: opts.signal, cache: 'no-store' });
    const text = await res.text();
    let body = null;
    try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
    if (!res.ok) {
      const err = (body && body.error) || {};
      if (res.status === 401) signOut('The token is not accepted: ' + (err.message || 'unauthorized'));
      throw new ApiError(res.status, err.code || String(res.status), err.message || res.statusText);
    }
    return body;
  }

  function toast(text, bad) {
    const box = document.getElementById('toast');
    const el = h('div', { class: bad ? 'bad' : '' }, text);
    box.append(el);
    setTimeout(() => el.remove(), bad ? 8000 : 4000);
  }

  // A button that makes one API call, as the CLI would (only drawn for write tokens).
  function action(label, method, path, opts = {}) {
    const b = h('button', { type: 'button', class: opts.secondary ? 'secondary' : null, 'data-action': opts.name || label.toLowerCase() }, label);
    b.addEventListener('click', async () => {
      if (opts.confirm && !window.confirm(opts.confirm)) return;
      b.disabled = true;
      try {
        await api(path, { method, body: opts.body ? JSON.stringify(opts.body) : undefined });
        toast(`${label}: done`);
      } catch (e) {
        toast(`${label}: ${e.message}`, true);
      } finally {
        b.disabled = false;
        kick();
      }
    });
    return b;
  }
  const canWrite = () => state.role === 'write';

  // The rollout's buttons: Undo, then Pause while the rollout progresses or Resume while it is
  // paused (neither once it has ended: the API refuses both then). They come last in their row
  // of fixed height, so nothing moves as they come and go; a focused one hands focus to the
  // one that replaces it.
  function rolloutActions(base, undo) {
    const slot = h('span', { class: 'toggle' });
    const el = h('div', { class: 'actions', role: 'group', 'aria-label': 'Rollout actions' }, undo, slot);
    let shown = null;
    return {
      el,
      phase(phase) {
        const want = phase === 'progressing' ? 'pause' : phase === 'paused' ? 'resume' : null;
        if (want === shown) return;
        shown = want;
        const focused = slot.contains(document.activeElement);
        fill(slot, want === 'pause' ? action('Pause', 'POST', base + 'pause', { name: 'pause' })
          : want === 'resume' ? action('Resume', 'POST', base + 'resume', { name: 'resume' }) : null);
        if (focused && slot.firstChild) slot.firstChild.focus();
      },
    };
  }

  // ---- routing ---------------------------------------------------------------------------

  // What both consoles have: the landing redirect (to `home`), sign-in, hook runs and events.
  const sharedRoutes = (home) => [
    [/^\/ui\/?$/, () => { navigate(home, true); return null; }],
    [/^\/ui\/login$/, loginPage],
    [/^\/ui\/hookruns$/, runsPage],
    [/^\/ui\/hookruns\/([^/]+)\/([^/]+)$/, runPage],
    [/^\/ui\/events$/, eventsPage],
  ];

  const hostRoutes = [
    ...sharedRoutes('/ui/instances'),
    [/^\/ui\/instances$/, instancesPage],
    [/^\/ui\/node$/, nodePage],
    [/^\/ui\/apps\/([^/]+)\/([^/]+)$/, hostAppPage],
    [/^\/ui\/apps\/([^/]+)\/([^/]+)\/revisions\/(\d+)$/, hostAppPage],
  ];
  const HOST_NAV = [['/ui/instances', 'Instances'], ['/ui/node', 'Node'], ['/ui/hookruns', 'Hook runs'], ['/ui/events', 'Events']];

  const routes = [
    ...sharedRoutes('/ui/cluster'),
    [/^\/ui\/cluster$/, clusterPage],
    [/^\/ui\/apps$/, appsPage],
    [/^\/ui\/apps\/([^/]+)\/([^/]+)$/, appPage],
    [/^\/ui\/apps\/([^/]+)\/([^/]+)\/revisions\/(\d+)$/, appPage],
    [/^\/ui\/apps\/([^/]+)\/([^/]+)\/rollout$/, rolloutPage],
    [/^\/ui\/engine$/, enginePage],
  ];

  function navigate(path, replace) {
    history[replace ? 'replaceState' : 'pushState'](null, '', path);
    route(true);
  }

  document.addEventListener('click', (e) => {
    const a = e.target.closest('a[href]');
    if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    if (a.getAttribute('href').startsWith('#')) return; // in-page (the skip link)
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin || !url.pathname.startsWith('/ui/') || url.pathname.startsWith('/ui/static/')) return;
    e.preventDefault();
    if (url.pathname + url.search !== location.pathname + location.search) navigate(url.pathname + url.search);
  });
  window.addEventListener('popstate', () => route(true));

  function stopView() {
    state.gen += 1;
    if (state.abort) state.abort.abort();
    clearTimeout(state.timer);
    state.abort = null;
    state.refresh = null;
  }

  // Runs the view's refresh now and again every REFRESH_MS after each one ends.
  function kick() {
    const gen = state.gen;
    const refresh = state.refresh;
    if (!refresh) return;
    clearTimeout(state.timer);
    Promise.resolve()
      .then(refresh)
      .catch((e) => { if (gen === state.gen && e.name !== 'AbortError') toast(e.message, true); })
      .finally(() => {
        if (gen === state.gen) state.timer = setTimeout(kick, REFRESH_MS);
      });
  }

  async function route(moved) {
    stopView();
    const path = location.pathname;
    if (!token() && path !== '/ui/login') {
      navigate('/ui/login?next=' + encodeURIComponent(path + location.search), true);
      return;
    }
    if (token() && !state.role) {
      try {
        await whoami();
      } catch (e) {
        if (e.status !== 401) toast('Cannot reach the API: ' + e.message, true);
        return;
      }
    }
    drawWho();
    if (isHost() && !document.querySelector('#nav a[href="/ui/instances"]')) {
      fill(document.getElementById('nav'), HOST_NAV.map(([href, text]) => h('li', {}, h('a', { href }, text))));
      document.querySelector('.brand').setAttribute('href', '/ui/instances');
      document.querySelector('.brand').textContent = `Steward · ${state.host}`;
    }
    for (const a of document.querySelectorAll('#nav a')) {
      const here = path === a.pathname || path.startsWith(a.pathname + '/');
      if (here) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    const found = (isHost() ? hostRoutes : routes).find(([re]) => re.test(path));
    main.replaceChildren();
    if (!found) {
      add(main, [h('h1', {}, 'Not found'), h('p', {}, 'No console page at ', h('code', {}, path), '. ', h('a', { href: '/ui/cluster' }, 'The cluster'))]);
      return;
    }
    const params = path.match(found[0]).slice(1).map(decodeURIComponent);
    const refresh = found[1](params, new URLSearchParams(location.search));
    if (!refresh) return;
    const title = main.querySelector('h1');
    document.title = (title ? title.textContent + ' · ' : '') + 'Steward console';
    if (moved) main.focus({ preventScroll: true });
    state.refresh = refresh;
    kick();
  }

  // The token's rights and the server's kind (and, on one host, its name).
  async function whoami() {
    const who = await api('/v1/whoami');
    state.server = who.server;
    state.host = who.server === 'stewardd' ? (await api('/v1/node')).hostname : null;
    state.role = who.role;
  }

  function drawWho() {
    const who = document.getElementById('who');
    if (!token() || !state.role) { who.replaceChildren(); return; }
    fill(who,
      h('span', { id: 'role', 'data-role': state.role }, state.role === 'write' ? 'write token' : 'read-only token'),
      h('button', { type: 'button', class: 'secondary', onclick: () => signOut('Signed out.') }, 'Sign out'));
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.role = null;
    stopView();
    if (location.pathname !== '/ui/login') {
      const next = location.pathname + location.search;
      history.pushState(null, '', '/ui/login?next=' + encodeURIComponent(next));
    }
    route(false).then(() => {
      const err = document.getElementById('login-error');
      if (err) err.textContent = message;
    });
  }

  // ---- pages -----------------------------------------------------------------------------

  function loginPage(_, query) {
    document.title = 'Sign in · Steward console';
    drawWho();
    const input = h('input', { id: 'token', name: 'token', type: 'password', autocomplete: 'off', required: true, spellcheck: 'false' });
    const error = h('p', { id: 'login-error', class: 'error', role: 'alert' });
    const form = h('form', { class: 'login' },
      h('h1', {}, 'Sign in'),
      h('p', { class: 'muted' }, 'A token from steward-sched serve\'s tokens file. A read token shows the fleet; a write token also shows the buttons that change it. It is kept in this tab only (sessionStorage).'),
      h('label', { for: 'token' }, 'API token'), input,
      h('button', { type: 'submit', id: 'sign-in' }, 'Sign in'), error);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      state.role = null;
      try {
        await whoami();
      } catch (err) {
        state.role = null;
        sessionStorage.removeItem(TOKEN_KEY);
        error.textContent = err.status === 401 ? 'That token is not accepted.' : 'Cannot reach the API: ' + err.message;
        return;
      }
      const next = query.get('next');
      navigate(next && next.startsWith('/ui/') && !next.startsWith('/ui/login') ? next : '/ui/', true);
    });
    fill(main, form);
    input.focus();
    return null;
  }

  function header(title, sub) {
    const subEl = h('p', { class: 'sub' }, sub || '');
    add(main, [h('h1', {}, title), subEl]);
    return subEl;
  }

  function clusterPage() {
    const sub = header('Cluster');
    const cards = h('div', { class: 'cards' });
    const cols = ['Node', 'State', 'CPU admitted', 'Memory admitted', ['Instances', 'num'], 'Cordon', ['Labels', 'hide-narrow']];
    if (canWrite()) cols.push('Actions');
    const nodes = table(cols, 'No nodes in the cluster file.');
    add(main, [cards, h('h2', {}, 'Nodes'), nodes.el]);
    return async () => {
      const [list, engine] = await Promise.all([api('/v1/nodes'), api('/v1/engine')]);
      let up = 0; let instances = 0; const cpu = [0, 0]; const mem = [0, 0];
      for (const n of list) {
        const live = n.live;
        if (live) {
          instances += live.instances;
          cpu[0] += live.resources.allocated.milliCpu; cpu[1] += live.resources.allocatable.milliCpu;
          mem[0] += live.resources.allocated.memoryBytes; mem[1] += live.resources.allocatable.memoryBytes;
        }
        if ((n.record ? n.record.state : live ? 'up' : '') === 'up' && !n.unreachable) up += 1;
      }
      sub.textContent = `${list.length} nodes · leader ${engine.leader || 'none'} · store ${engine.store}` +
        (engine.maintenance ? ' · maintenance mode on' : '');
      fill(cards,
        h('div', { class: 'card' }, h('small', {}, 'Nodes up'), h('b', { id: 'nodes-up' }, `${up} of ${list.length}`)),
        h('div', { class: 'card' }, h('small', {}, 'Instances'), h('b', {}, instances)),
        h('div', { class: 'card' }, h('small', {}, 'CPU admitted'), meter(cpu[0], cpu[1], 'CPU admitted, cluster', `${cores(cpu[0])} of ${cores(cpu[1])} cores`, true)),
        h('div', { class: 'card' }, h('small', {}, 'Memory admitted'), meter(mem[0], mem[1], 'Memory admitted, cluster', `${bytes(mem[0])} of ${bytes(mem[1])}`, true)));
      nodes.set(list, (n) => n.name, (n) => {
        const live = n.live;
        const st = n.unreachable ? 'unreachable' : (n.record ? n.record.state : live ? 'up' : 'unknown');
        const r = live && live.resources;
        const row = [
          h('span', {}, h('b', {}, n.name), live ? h('div', { class: 'muted mono' }, live.hostIp) : null),
          h('span', {}, badge(st, { title: n.unreachable || null })),
          r ? meter(r.allocated.milliCpu, r.allocatable.milliCpu, `CPU admitted on ${n.name}`, `${cores(r.allocated.milliCpu)} / ${cores(r.allocatable.milliCpu)} cores`, true) : '—',
          r ? meter(r.allocated.memoryBytes, r.allocatable.memoryBytes, `Memory admitted on ${n.name}`, `${bytes(r.allocated.memoryBytes)} / ${bytes(r.allocatable.memoryBytes)}`, true) : '—',
          cell(live ? live.instances : '—', 'num'),
          n.cordon ? h('span', {}, badge('cordoned'), ' ', n.cordon.preferred ? 'preferred' : 'required', n.cordon.reason ? `: ${n.cordon.reason}` : '') : '—',
          cell(labels(Object.assign({}, live ? live.labels : {}, n.record ? n.record.labels : {})), 'hide-narrow'),
        ];
        if (canWrite()) {
          const p = `/v1/nodes/${encodeURIComponent(n.name)}/cordon`;
          row.push(n.cordon
            ? action('Uncordon', 'DELETE', p, { secondary: true, name: 'uncordon' })
            : action('Cordon', 'POST', p, { secondary: true, name: 'cordon', body: { reason: 'cordoned from the console' } }));
        }
        return row;
      });
    };
  }

  function appsPage() {
    const sub = header('Apps');
    const apps = table(['App', 'Ready', 'By node', 'States', ['Revision', 'num'], 'Rollout', ['Restarts', 'num']], 'No apps.', [18, 16, 20, 20, 8, 10, 8]);
    add(main, [apps.el]);
    return async () => {
      const list = await api('/v1/apps');
      const by = new Map();
      for (const p of list) {
        const key = appOf(p.instance);
        if (!by.has(key)) by.set(key, []);
        by.get(key).push(p);
      }
      const keys = [...by.keys()].sort();
      // Each app's revision and rollout phase (a few apps: one call each, at once).
      const rollouts = await Promise.all(keys.slice(0, 50).map((k) => api(`/v1/apps/${enc(k)}/rollout`).catch(() => null)));
      sub.textContent = `${keys.length} apps · ${list.length} instances`;
      apps.set(keys.map((k, i) => [k, by.get(k), rollouts[i]]), (a) => a[0], ([key, ps, ro]) => {
        const ready = ps.filter((p) => p.ready).length;
        const nodes = {}; const states = {};
        for (const p of ps) { nodes[p.node] = (nodes[p.node] || 0) + 1; states[p.state] = (states[p.state] || 0) + 1; }
        const revs = ro ? Object.values(ro.nodes).map((n) => n.revision).filter((r) => r !== undefined) : [];
        const phase = ro && ro.rollout ? ro.rollout.phase : null;
        return [
          h('a', { href: `/ui/apps/${enc(key)}` }, key),
          meter(ready, ps.length, `${key} ready`, `${ready} of ${ps.length}`),
          Object.entries(nodes).sort().map(([n, c]) => h('span', { class: 'label' }, `${n}: ${c}`)),
          Object.entries(states).sort().map(([st, c]) => h('span', {}, badge(st), ` ${c} `)),
          cell(revs.length ? Math.max(...revs) : '—', 'num'),
          phase ? h('a', { href: `/ui/apps/${enc(key)}/rollout` }, badge(phase)) : h('a', { href: `/ui/apps/${enc(key)}/rollout` }, 'none'),
          cell(ps.reduce((n, p) => n + (p.restarts || 0), 0), 'num'),
        ];
      });
    };
  }

  // Lines of `a` and `b` with what was removed and added (a longest common subsequence).
  function diffLines(a, b) {
    const x = a.split('\n'); const y = b.split('\n');
    if (x.length * y.length > 250000) return [['=', 'the specs are too long to compare here']];
    const m = x.map(() => new Uint16Array(y.length + 1));
    m.push(new Uint16Array(y.length + 1));
    for (let i = x.length - 1; i >= 0; i -= 1) {
      for (let j = y.length - 1; j >= 0; j -= 1) m[i][j] = x[i] === y[j] ? m[i + 1][j + 1] + 1 : Math.max(m[i + 1][j], m[i][j + 1]);
    }
    const out = []; let i = 0; let j = 0;
    while (i < x.length || j < y.length) {
      if (i < x.length && j < y.length && x[i] === y[j]) { out.push(['=', x[i]]); i += 1; j += 1; }
      else if (i < x.length && (j >= y.length || m[i + 1][j] >= m[i][j + 1])) { out.push(['-', x[i]]); i += 1; }
      else { out.push(['+', y[j]]); j += 1; }
    }
    return out;
  }

  // A line diff of two specs' JSON, with two lines of context around each change; `before`
  // null: the spec alone (no predecessor is kept).
  function drawDiff(box, before, after) {
    if (before === null) { fill(box, after.split('\n').map((line) => h('span', {}, `  ${line}`))); return; }
    if (before === after) { box.textContent = 'The same spec as the revision before it.'; return; }
    fill(box, diffLines(before, after)
      .filter(([op], i, all) => op !== '=' || all.slice(Math.max(0, i - 2), i + 3).some(([o]) => o !== '='))
      .map(([op, line]) => h('span', { class: op === '+' ? 'add' : op === '-' ? 'del' : '' }, `${op === '=' ? ' ' : op} ${line}`)));
  }

  // What each revision changed: its spec against its predecessor's (the newest older revision
  // the same node keeps: each node numbers its own), both read with `GET …/revisions/{n}` (the
  // specs the nodes keep for undo; a revision's spec never changes, so each is read once). One
  // box of fixed height below the revisions: a revision's link (mouse or keyboard) redraws only
  // the box and puts the revision in the address (`…/revisions/N`, a deep link); without one,
  // the current revision's changes show. `wanted`: the deep link's {n, node}, or null.
  function revisionDiffs(key, wanted) {
    const caption = h('p', { id: 'diff-caption', class: 'sub', 'aria-live': 'polite' }, 'Loading…');
    const box = h('pre', { id: 'diff', class: 'diff', tabindex: 0, 'aria-labelledby': 'diff-caption' }, '');
    const specs = new Map();
    let lists = {};
    let chosen = wanted;
    let drawn = null;
    const query = (node) => (isHost() ? '' : `?node=${encodeURIComponent(node)}`);
    const href = (n, node) => `/ui/apps/${enc(key)}/revisions/${n}${query(node)}`;
    const specOf = (node, n) => {
      const k = `${node}/${n}`;
      if (!specs.has(k)) {
        specs.set(k, api(`/v1/apps/${enc(key)}/revisions/${n}${query(node)}`)
          .then((r) => JSON.stringify(r.spec, null, 2))
          .catch((e) => { specs.delete(k); throw e; }));
      }
      return specs.get(k);
    };
    const before = (node, n) => (lists[node] || []).map((r) => r.revision).filter((r) => r < n).reduce((a, b) => Math.max(a, b), 0) || null;
    const keeps = (node, n) => (lists[node] || []).some((r) => r.revision === n);
    // The revision to show: the one chosen (on its node, or the first that keeps it), else the
    // current one.
    const pick = () => {
      const nodes = Object.keys(lists).sort();
      if (chosen) return { n: chosen.n, node: chosen.node || nodes.find((nd) => keeps(nd, chosen.n)) };
      const current = nodes.flatMap((nd) => lists[nd].filter((r) => r.current).map((r) => ({ n: r.revision, node: nd })));
      return current.sort((a, b) => b.n - a.n)[0] || null;
    };
    function mark(at) {
      for (const a of main.querySelectorAll('a[data-rev]')) {
        const on = !!at && Number(a.dataset.rev) === at.n && a.dataset.nodes.split(',').includes(at.node);
        if (on) a.setAttribute('aria-current', 'true'); else a.removeAttribute('aria-current');
        a.closest('tr').classList.toggle('chosen', on);
      }
    }
    async function show() {
      const at = pick();
      mark(at);
      if (!at || !keeps(at.node, at.n)) {
        drawn = null;
        caption.textContent = !at ? 'No revision is kept.' : `Revision ${at.n} is not kept` + (at.node && !isHost() ? ` on ${at.node}.` : '.');
        box.textContent = '';
        return;
      }
      const prev = before(at.node, at.n);
      const sig = `${at.node}/${at.n}/${prev}`;
      if (sig === drawn) return;
      drawn = sig;
      caption.textContent = (prev ? `What revision ${at.n} changed from revision ${prev}` : `Revision ${at.n}, the oldest kept: its spec`) +
        (isHost() ? '' : ` (as ${at.node} keeps them)`);
      try {
        const [a, b] = await Promise.all([prev ? specOf(at.node, prev) : null, specOf(at.node, at.n)]);
        if (drawn === sig) drawDiff(box, a, b);
      } catch (e) {
        // Asked again at the next refresh: a node that did not answer may answer then.
        if (drawn === sig) { drawn = null; box.textContent = `Cannot read it: ${e.message}`; }
      }
    }
    // The cell of a revision's row that shows its changes: `nodes`, those that keep it (the
    // first is asked).
    function link(n, nodes) {
      const node = nodes[0];
      const prev = before(node, n);
      return h('a', {
        href: href(n, node), 'data-rev': n, 'data-nodes': nodes.join(','), 'aria-controls': 'diff',
        'aria-label': prev ? `What revision ${n} changed from revision ${prev}` : `Revision ${n}'s spec`,
        onclick: (e) => {
          if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
          e.preventDefault();
          history.pushState(null, '', href(n, node));
          chosen = { n, node };
          show();
        },
      }, prev ? `diff from ${prev}` : 'its spec');
    }
    return {
      els: [h('h2', {}, 'Changes'), caption, box],
      link,
      // Each node's revisions (oldest first), as last read; then the rows are drawn (`draw`)
      // and the box follows.
      update(byNode, draw) { lists = byNode; draw(); show(); },
    };
  }

  function appPage([ns, name, revision], query) {
    const key = `${ns}/${name}`;
    const sub = header(key);
    const links = h('p', {}, h('a', { href: `/ui/apps/${enc(key)}/rollout` }, 'Its rollout'), ' · ', h('a', { href: `/ui/events?q=${encodeURIComponent(key + '/')}` }, 'Its events'));
    const inst = table(['Instance', 'Node', 'State', 'Ready', ['Restarts', 'num'], 'Placement', 'Message'], 'No instances.', [16, 8, 11, 7, 8, 10, 40]);
    const eps = table(['Port', 'Endpoints (ready instances)'], 'No endpoints yet.');
    const svcs = table(['Service', 'Type', 'Port', 'Target', 'Address'], 'No services.');
    const spec = h('pre', { id: 'spec', tabindex: 0, 'aria-label': 'The spec as deployed' }, '…');
    const revTable = table(['Revision', 'Hash', 'Applied', 'By', 'On nodes', 'Its rollout', 'Changes'], 'No revisions.', [9, 14, 16, 22, 13, 13, 13]);
    const diffs = revisionDiffs(key, revision ? { n: Number(revision), node: query.get('node') } : null);
    add(main, [links, h('h2', {}, 'Instances'), inst.el, h('h2', {}, 'Revisions'), revTable.el,
      diffs.els, h('h2', {}, 'Endpoints'), eps.el, h('h2', {}, 'Services'), svcs.el,
      h('h2', {}, 'Spec'), spec]);
    let lastSpec = null;
    return async () => {
      const [detail, endpoints, ro, history] = await Promise.all([
        api(`/v1/apps/${enc(key)}`), api(`/v1/apps/${enc(key)}/endpoints`), api(`/v1/apps/${enc(key)}/rollout`).catch(() => null),
        api(`/v1/apps/${enc(key)}/revisions`).catch(() => null)]);
      // Each node keeps its own history; a revision is shown once with the nodes that have it.
      const byNode = {};
      const merged = new Map();
      for (const [node, list] of Object.entries(history ? history.nodes : {})) {
        if (list.revisions) byNode[node] = list.revisions;
        for (const v of list.revisions || []) {
          const k = `${v.revision}/${v.hash}`;
          if (!merged.has(k)) merged.set(k, Object.assign({}, v, { nodes: [], current: [], outcomes: new Set() }));
          const m = merged.get(k);
          m.nodes.push(node);
          if (v.current) m.current.push(node);
          if (v.outcome) m.outcomes.add(v.outcome.phase);
          m.createdMs = Math.min(m.createdMs, v.createdMs);
        }
      }
      diffs.update(byNode, () => revTable.set([...merged.values()].sort((a, b) => b.revision - a.revision), (v) => `${v.revision}/${v.hash}`, (v) => [
        h('b', {}, v.revision, v.current.length ? ' (current)' : ''), h('code', {}, v.hash), utc(v.createdMs), v.appliedBy,
        v.nodes.sort().join(', '), v.outcomes.size ? [...v.outcomes].map((o) => badge(o)) : '—', diffs.link(v.revision, v.nodes)]));
      const revs = ro ? Object.values(ro.nodes).map((n) => n.revision).filter((r) => r !== undefined) : [];
      const ready = detail.instances.filter((p) => p.ready).length;
      sub.textContent = `revision ${revs.length ? Math.max(...revs) : '—'} · ${ready} of ${detail.instances.length} ready` +
        (ro && ro.rollout ? ` · rollout ${ro.rollout.phase}` : '') + (detail.app.stopped && detail.app.stopped.length ? ` · stopped: ${detail.app.stopped.join(', ')}` : '');
      inst.set(detail.instances, (p) => p.instance, (p) => [
        h('span', { class: 'mono' }, p.instance), p.node, badge(p.state), badge(p.ready ? 'yes' : 'no'),
        cell(p.restarts || 0, 'num'), p.placement && p.placement.state ? p.placement.state : (p.placement || ''), p.message || ''] );
      const ports = endpoints ? Object.entries(endpoints.ports) : [];
      eps.set(ports, (e) => e[0], ([port, list]) => [h('b', {}, port),
        list.map((e) => h('span', { class: 'label mono' }, `${e.ip}:${e.port} (${e.node}, #${e.instance})`))]);
      svcs.set(endpoints && endpoints.services ? endpoints.services : [], (v) => `${v.service}/${v.port}`, (v) => [
        v.service, v.type, `${v.port}/${v.protocol}` + (v.nodePort ? ` (node ${v.nodePort})` : ''), v.target, v.clusterIP || '—']);
      const text = JSON.stringify(detail.app.spec, null, 2);
      if (text !== lastSpec) {
        lastSpec = text;
        spec.textContent = text;
      }
    };
  }

  function stepText(step) {
    if (!step) return '';
    if (step.partition !== undefined) return `partition: move until ${step.partition} run the new revision`;
    if (step.hook) return `hook: ${step.hook.template}`;
    if (step.pause !== undefined) return step.pause && step.pause.duration ? `pause ${step.pause.duration}` : 'pause until resumed';
    return JSON.stringify(step);
  }

  function waitingOn(message) {
    const m = /hook run ([^\s/]+)\/([^\s,;)]+)/.exec(message || '');
    if (!m) return message || '';
    const i = m.index; const end = i + m[0].length;
    return h('span', {}, message.slice(0, i), h('a', { href: `/ui/hookruns/${encodeURIComponent(m[1])}/${encodeURIComponent(m[2])}` }, m[0]), message.slice(end));
  }

  function rolloutPage([ns, name]) {
    const key = `${ns}/${name}`;
    const sub = header(`Rollout of ${key}`);
    const phase = h('span', { id: 'phase', 'data-phase': '' });
    const head = h('p', {}, h('a', { href: `/ui/apps/${enc(key)}` }, 'The app'), ' · phase: ', phase);
    add(main, head);
    const base = `/v1/apps/${enc(key)}/rollout/`;
    const actions = canWrite() ? rolloutActions(base,
      action('Undo', 'POST', base + 'undo', { name: 'undo', secondary: true, confirm: `Roll ${key} back to its last good revision?` })) : null;
    if (actions) add(main, actions.el);
    const overall = h('div', { class: 'cards' });
    const steps = h('ol', { id: 'steps' });
    const nodes = table(['Node', 'Revision', 'Phase', 'Step', 'Updated', 'Ready', 'Waiting on'], 'No node runs this app.', [8, 9, 11, 10, 16, 16, 30]);
    // The steps last: a new spec's steps may be more than the last one's, and move nothing.
    add(main, [overall, h('h2', {}, 'Nodes, one at a time'), nodes.el, h('h2', {}, 'Steps'), steps]);
    let lastSteps = null;
    return async () => {
      const [ro, detail] = await Promise.all([api(`/v1/apps/${enc(key)}/rollout`), api(`/v1/apps/${enc(key)}`)]);
      const r = ro.rollout;
      const ph = r ? r.phase : 'none';
      fill(phase, badge(ph));
      phase.dataset.phase = ph;
      if (actions) actions.phase(ph);
      sub.textContent = r ? `started ${utc(r.startedMs)} (${ago(r.startedMs)}) · changed ${ago(r.updatedMs)}` +
        (r.rollback ? ' · a rollback' : '') + (r.reason ? ` · ${r.reason}` : '') : 'This app has not changed since it was deployed.';
      const p = ro.progress;
      fill(overall,
        h('div', { class: 'card' }, h('small', {}, 'Updated'), h('div', { id: 'updated' }, meter(p.updated, p.instances, 'Instances updated', `${p.updated} of ${p.instances}`))),
        h('div', { class: 'card' }, h('small', {}, 'Ready'), h('div', { id: 'ready' }, meter(p.ready, p.instances, 'Instances ready', `${p.ready} of ${p.instances}`))),
        h('div', { class: 'card' }, h('small', {}, 'Surge instances'), h('b', {}, p.spares)),
        h('div', { class: 'card' }, h('small', {}, 'Nodes done'), h('b', {}, r && r.done ? r.done.length : 0, ' of ', Object.keys(ro.nodes).length)));
      const strategy = (detail.app.spec && detail.app.spec.strategy) || {};
      const list = (strategy.steps || []).map(stepText).concat(['every instance moves to the new revision']);
      const sig = JSON.stringify(list);
      if (sig !== lastSteps) { lastSteps = sig; fill(steps, list.map((t) => h('li', {}, t))); }
      nodes.set(Object.entries(ro.nodes).sort(), (e) => e[0], ([node, n]) => {
        if (n.unreachable) return [h('b', {}, node), '—', badge('unreachable', { title: n.unreachable }), '—', '—', '—', n.unreachable];
        const np = n.progress;
        const done = r && r.done && r.done.includes(node);
        // A node this rollout has not reached yet shows its last rollout as of old: say so.
        const reached = r && r.applied && r.applied[node] !== undefined;
        const nr = reached || !r || r.phase === 'complete' ? n.rollout : null;
        const idle = r && (r.phase === 'progressing' || r.phase === 'paused') ? 'waiting' : 'none';
        return [
          h('b', {}, node),
          nr ? `${nr.from} → ${nr.target}` : String(n.revision),
          badge(nr ? nr.phase : idle, { 'data-node-phase': nr ? nr.phase : idle }),
          nr ? (nr.gate !== undefined ? `step ${nr.gate + 1}` : `step 1`) + (done ? ' (done)' : '') : '—',
          meter(np.updated, np.instances, `Updated on ${node}`, `${np.updated} of ${np.instances}`),
          meter(np.ready, np.instances, `Ready on ${node}`, `${np.ready} of ${np.instances}`),
          nr ? waitingOn(nr.message || (nr.reason || '')) : '',
        ];
      });
    };
  }

  function runsPage() {
    const sub = header('Hook runs');
    const runs = table(['Run', 'Node', 'Template', 'Phase', ['Measurements', 'num'], 'Created', 'Message'], 'No hook runs.');
    const templates = table(['Template', 'Args', 'Metrics'], 'No hook templates.');
    add(main, [runs.el, h('h2', {}, 'Templates'), templates.el]);
    return async () => {
      const [listing, tpl] = isHost()
        ? await Promise.all([api('/v1/hookruns').then((l) => ({ runs: l.items.map((r) => Object.assign({ node: state.host }, r)), unreachable: {} })),
          api('/v1/hooktemplates').then((t) => t.items)])
        : await Promise.all([api('/v1/hookruns'), api('/v1/hooktemplates')]);
      const un = Object.keys(listing.unreachable || {});
      sub.textContent = `${listing.runs.length} runs` + (un.length ? ` · not answering: ${un.join(', ')}` : '');
      const sorted = listing.runs.slice().sort((a, b) => b.createdAtMs - a.createdAtMs);
      runs.set(sorted, (r) => `${r.namespace}/${r.name}`, (r) => [
        h('a', { href: `/ui/hookruns/${encodeURIComponent(r.namespace)}/${encodeURIComponent(r.name)}` }, `${r.namespace}/${r.name}`),
        r.node, r.template, badge(r.phase), cell(r.measurements, 'num'), utc(r.createdAtMs), r.message || '']);
      templates.set(tpl, (t) => `${t.namespace}/${t.name}`, (t) => [`${t.namespace}/${t.name}`, t.args.join(', '), t.metrics.join(', ')]);
    };
  }

  // The number a condition compares the result with (`asInt(result) < 30`, `result >= 0.95`).
  function threshold(cond) {
    const m = /(<=|>=|<|>|==)\s*(-?\d+(?:\.\d+)?)\s*$/.exec(cond || '');
    return m ? { op: m[1], value: Number(m[2]) } : null;
  }

  // One metric's measurements over time: each a point coloured by its verdict, the numbers
  // joined by a line, the condition's bound dashed.
  function chart(metric, result) {
    const ms = (result && result.measurements) || [];
    const W = 800; const H = 240; const L = 56; const R = 16; const T = 14; const B = 30;
    const values = ms.map((m) => (m.value !== undefined && m.value !== '' && !Number.isNaN(Number(m.value)) ? Number(m.value) : null));
    const nums = values.filter((v) => v !== null);
    const bound = threshold(metric.successCondition) || threshold(metric.failureCondition);
    const ys = nums.concat(bound ? [bound.value] : []);
    let lo = ys.length ? Math.min(...ys) : 0; let hi = ys.length ? Math.max(...ys) : 1;
    if (lo === hi) { lo -= 1; hi += 1; }
    const pad = (hi - lo) * 0.1; lo -= pad; hi += pad;
    const t0 = ms.length ? ms[0].startedAtMs : 0; const t1 = ms.length ? ms[ms.length - 1].startedAtMs : 1;
    const x = (t) => L + (t1 === t0 ? (W - L - R) / 2 : ((t - t0) / (t1 - t0)) * (W - L - R));
    const y = (v) => T + (1 - (v - lo) / (hi - lo)) * (H - T - B);
    const kids = [];
    for (let i = 0; i <= 4; i += 1) {
      const v = lo + ((hi - lo) * i) / 4;
      kids.push(s('line', { class: 'grid', x1: L, x2: W - R, y1: y(v), y2: y(v) }));
      kids.push(s('text', { x: L - 6, y: y(v) + 4, 'text-anchor': 'end' }, Number(v.toPrecision(4))));
    }
    kids.push(s('line', { class: 'axis', x1: L, x2: L, y1: T, y2: H - B }), s('line', { class: 'axis', x1: L, x2: W - R, y1: H - B, y2: H - B }));
    if (ms.length) {
      kids.push(s('text', { x: L, y: H - 8 }, utc(t0).slice(11)), s('text', { x: W - R, y: H - 8, 'text-anchor': 'end' }, utc(t1).slice(11)));
    }
    if (bound) {
      kids.push(s('line', { class: 'threshold', x1: L, x2: W - R, y1: y(bound.value), y2: y(bound.value) }));
      kids.push(s('text', { x: W - R - 4, y: y(bound.value) - 5, 'text-anchor': 'end' }, `${metric.successCondition ? 'success' : 'failure'} when ${bound.op} ${bound.value}`));
    }
    const pts = ms.map((m, i) => [m, values[i]]).filter(([, v]) => v !== null);
    if (pts.length > 1) kids.push(s('polyline', { class: 'line', points: pts.map(([m, v]) => `${x(m.startedAtMs).toFixed(1)},${y(v).toFixed(1)}`).join(' ') }));
    ms.forEach((m, i) => {
      const v = values[i];
      const cy = v === null ? H - B - 8 : y(v);
      kids.push(s('circle', { class: `pt pt-${m.phase}`, cx: x(m.startedAtMs).toFixed(1), cy: cy.toFixed(1), r: 5, 'data-phase': m.phase },
        s('title', {}, `${utc(m.startedAtMs)}: ${m.value !== undefined ? m.value : 'no value'} — ${m.phase}`)));
    });
    const last = ms.length ? ms[ms.length - 1] : null;
    const label = `${metric.name}: ${ms.length} measurements` + (last ? `, the last ${last.value !== undefined ? last.value : 'without a value'} (${last.phase})` : '');
    return s('svg', { class: 'chart', viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': label, 'data-points': ms.length }, s('title', {}, label), kids);
  }

  function runPage([ns, name]) {
    const key = `${ns}/${name}`;
    const sub = header(`Hook run ${key}`);
    const phase = h('span', { id: 'run-phase', 'data-phase': '' });
    add(main, h('p', {}, 'Phase: ', phase));
    // Terminate while it runs (the box keeps its height when the button goes).
    const actions = canWrite() ? add(main, h('div', { class: 'actions' })).lastChild : null;
    let running = null;
    const args = table(['Arg', 'Value'], 'No args.');
    const metrics = h('div', { id: 'metrics' });
    add(main, [metrics, h('h2', {}, 'Args'), args.el]);
    const drawn = new Map();
    return async () => {
      const found = isHost() ? { node: state.host, run: await api(`/v1/hookruns/${enc(key)}`) } : await api(`/v1/hookruns/${enc(key)}`);
      const run = found.run; const st = run.status;
      fill(phase, badge(st.phase));
      phase.dataset.phase = st.phase;
      const now = st.phase === 'Running' || st.phase === 'Pending';
      if (actions && now !== running) {
        running = now;
        fill(actions, now ? action('Terminate', 'POST', `/v1/hookruns/${enc(key)}/terminate`, { name: 'terminate', secondary: true, confirm: `Terminate hook run ${key}?` }) : null);
      }
      sub.textContent = `on ${found.node} · template ${run.spec.template} · created ${utc(run.metadata.createdAtMs)}` +
        (st.finishedAtMs ? ` · finished ${utc(st.finishedAtMs)}` : '') + (st.message ? ` · ${st.message}` : '');
      args.set(run.spec.args || [], (a) => a.name, (a) => [h('span', { class: 'mono' }, a.name), h('span', { class: 'mono' }, a.value !== undefined ? a.value : '—')]);
      for (const metric of run.spec.metrics) {
        const result = (st.metricResults || []).find((r) => r.name === metric.name);
        let part = drawn.get(metric.name);
        if (!part) {
          const provider = metric.provider.web ? `GET ${metric.provider.web.url}` + (metric.provider.web.jsonPath ? ` (jsonPath ${metric.provider.web.jsonPath})` : '')
            : metric.provider.prometheus ? `Prometheus ${metric.provider.prometheus.address}: ${metric.provider.prometheus.query}` : JSON.stringify(metric.provider);
          part = {
            head: h('p', {}),
            box: h('div', { class: 'chart-box', 'data-metric': metric.name }),
            rows: table(['Started', ['Value', 'num'], 'Verdict', 'Called, and why'], 'No measurement yet.'),
            sig: null,
          };
          drawn.set(metric.name, part);
          add(metrics, [h('h2', {}, `Metric ${metric.name}`),
            h('p', {}, h('span', { class: 'muted' }, 'Provider: '), h('code', {}, provider)),
            h('p', {}, h('span', { class: 'muted' }, 'Condition: '), h('code', {}, metric.successCondition ? `success: ${metric.successCondition}` : metric.failureCondition ? `failure: ${metric.failureCondition}` : 'none (any result succeeds)'),
              h('span', { class: 'muted' }, ` · count ${metric.count !== undefined ? metric.count : '—'} · interval ${metric.interval || '—'} · failureLimit ${metric.failureLimit}`)),
            part.head,
            h('div', { class: 'legend', 'aria-hidden': 'true' }, [['Successful', 'ok'], ['Failed', 'bad'], ['Inconclusive', 'warn'], ['Error', 'muted']].map(([p, c]) => h('span', { class: c }, '● ' + p)), h('span', { class: 'bad' }, '- - condition')),
            part.box, h('h3', {}, 'Measurements'), part.rows.el]);
        }
        const ms = (result && result.measurements) || [];
        fill(part.head, badge(result ? result.phase : 'Pending'), ` ${result ? result.count : 0} measurements: ${result ? result.successful : 0} successful, ${result ? result.failed : 0} failed, ` +
          `${result ? result.inconclusive : 0} inconclusive, ${result ? result.error : 0} errors` + (result && result.measurementsDropped ? ` (${result.measurementsDropped} older not kept)` : ''));
        const sig = JSON.stringify(ms);
        if (sig !== part.sig) {
          part.sig = sig;
          fill(part.box, chart(metric, result));
          part.rows.set(ms.slice().reverse(), (m) => String(m.startedAtMs), (m) => [utc(m.startedAtMs), cell(m.value !== undefined ? m.value : '—', 'num'), badge(m.phase), h('span', { class: 'mono' }, m.message)]);
        }
      }
    };
  }

  function summary(body) {
    return Object.entries(body).filter(([k]) => k !== 'type').map(([k, v]) => {
      const text = typeof v === 'string' ? v : JSON.stringify(v);
      return `${k}: ${text.length > 200 ? text.slice(0, 200) + '…' : text}`;
    }).join(' · ');
  }

  function eventsPage(_, query) {
    const sub = header('Events', isHost() ? 'This host\'s event journal, as it happens.' : 'Every node\'s events and the scheduler\'s, merged, as they happen.');
    const nodeSel = h('select', { id: 'f-node' }, h('option', { value: '' }, 'every node'), isHost() ? null : h('option', { value: 'sched' }, 'sched (the scheduler)'));
    const typeIn = h('input', { id: 'f-type', type: 'text', placeholder: 'e.g. transition', value: query.get('type') || '' });
    const textIn = h('input', { id: 'f-q', type: 'search', placeholder: 'instance, reason…', value: query.get('q') || '' });
    const count = h('span', { class: 'muted', 'aria-live': 'off' });
    add(main, h('div', { class: 'filters', role: 'search' },
      h('label', { for: 'f-node' }, 'Node', nodeSel), h('label', { for: 'f-type' }, 'Type', typeIn), h('label', { for: 'f-q' }, 'Text', textIn), count));
    const tbody = h('tbody', { id: 'events' });
    add(main, h('div', { class: 'events', tabindex: 0, role: 'region', 'aria-label': 'Events, newest first' },
      h('table', {}, h('thead', {}, h('tr', {}, ['Time', 'Node', ['Seq', 'num'], 'Type', 'What'].map((t) => {
        const [text, cls] = Array.isArray(t) ? t : [t, null];
        return h('th', { scope: 'col', class: cls }, text);
      }))), tbody)));
    const MAX = 500;
    const cursors = {};
    let shown = 0;
    const matches = (tr) => {
      const n = nodeSel.value; const t = typeIn.value.trim().toLowerCase(); const q = textIn.value.trim().toLowerCase();
      return (!n || tr.dataset.node === n) && (!t || tr.dataset.type.toLowerCase().includes(t)) && (!q || tr.textContent.toLowerCase().includes(q));
    };
    const refilter = () => {
      shown = 0;
      for (const tr of tbody.children) { tr.hidden = !matches(tr); if (!tr.hidden) shown += 1; }
      count.textContent = `${shown} shown of ${tbody.children.length} kept`;
      const q = new URLSearchParams();
      if (nodeSel.value) q.set('node', nodeSel.value);
      if (typeIn.value.trim()) q.set('type', typeIn.value.trim());
      if (textIn.value.trim()) q.set('q', textIn.value.trim());
      const qs = q.toString();
      history.replaceState(null, '', '/ui/events' + (qs ? '?' + qs : ''));
    };
    for (const el of [nodeSel, typeIn, textIn]) el.addEventListener('input', refilter);
    const line = (v) => {
      if (v.heartbeat) return;
      if (isHost()) v = Object.assign({ node: state.host }, v);
      if (v.seq) cursors[v.node] = v.seq;
      const body = v.body || (v.gap ? Object.assign({ type: 'gap' }, v.gap) : Object.assign({ type: Object.keys(v).find((k) => k !== 'node') || 'line' }, v));
      // A line without a time of its own (a gap) is placed as of its arrival.
      const at = v.at_ms || Date.now();
      const tr = h('tr', { 'data-node': v.node, 'data-type': body.type || '', 'data-at': at },
        h('td', {}, utc(v.at_ms)), h('td', {}, v.node), h('td', { class: 'num' }, v.seq || ''), h('td', {}, h('code', {}, body.type || '')),
        h('td', { class: 'what' }, summary(body)));
      tr.hidden = !matches(tr);
      // Newest first by the event's time, not its arrival: the stream brings each node's
      // backlog in turn, so one node's old events come after another's new ones. A live event
      // is the newest and goes on top at once; a backlog's is placed among those already kept.
      let before = tbody.firstElementChild;
      while (before && Number(before.dataset.at) > at) before = before.nextElementSibling;
      tbody.insertBefore(tr, before);
      while (tbody.children.length > MAX) tbody.lastChild.remove();
    };
    const gen = state.gen;
    // The stream, read as it comes (fetch, so the token goes in a header); resumed from each
    // node's last sequence number after a drop.
    const follow = async () => {
      while (gen === state.gen) {
        const since = isHost() ? String(cursors[state.host] || 0)
          : Object.keys(cursors).length ? Object.entries(cursors).map(([n, s]) => `${n}=${s}`).join(',') : '0';
        state.abort = new AbortController();
        try {
          const res = await fetch(`/v1/events?since=${encodeURIComponent(since)}`, { headers: { Authorization: 'Bearer ' + token() }, signal: state.abort.signal });
          if (res.status === 401) { signOut('The token is not accepted.'); return; }
          if (!res.ok) throw new Error(`events: ${res.status}`);
          sub.textContent = isHost() ? 'Live: this host\'s events, newest first.' : 'Live: every node\'s events and the scheduler\'s, merged, newest first.';
          const reader = res.body.getReader();
          const dec = new TextDecoder();
          let buf = '';
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            buf += dec.decode(value, { stream: true });
            let nl;
            while ((nl = buf.indexOf('\n')) >= 0) {
              const text = buf.slice(0, nl).trim();
              buf = buf.slice(nl + 1);
              if (text) { try { line(JSON.parse(text)); } catch (e) { /* a line that is not JSON is skipped */ } }
            }
            count.textContent = `${[...tbody.children].filter((tr) => !tr.hidden).length} shown of ${tbody.children.length} kept`;
          }
        } catch (e) {
          if (e.name === 'AbortError' || gen !== state.gen) return;
          sub.textContent = `The stream dropped (${e.message}); resuming…`;
        }
        await new Promise((r) => setTimeout(r, 2000));
      }
    };
    follow();
    // The node list for the filter, once.
    (isHost() ? Promise.resolve([{ name: state.host }]) : api('/v1/nodes')).then((list) => {
      for (const n of list) nodeSel.append(h('option', { value: n.name }, n.name));
      nodeSel.value = query.get('node') || '';
      refilter();
    }).catch(() => {});
    return null;
  }

  function enginePage() {
    const sub = header('Engine');
    const facts = h('div', { class: 'cards' });
    const actions = canWrite() ? h('div', { class: 'actions' }) : null;
    const cordons = table(['Node', 'Kind', 'Reason', 'Since'], 'No cordons.');
    const constraints = table(['Type', 'Value', 'Rule', 'Since'], 'No constraints.');
    const unreachable = table(['Node', 'Why'], 'Every node answers.');
    const notes = table(['Notification URL'], 'No notifications.');
    const config = table(['Setting', ['Value', 'num'], ['Default', 'num'], 'Range', 'What it does'], '');
    add(main, [facts, actions, h('h2', {}, 'Nodes not answering'), unreachable.el, h('h2', {}, 'Cordons'), cordons.el,
      h('h2', {}, 'Constraints'), constraints.el, h('h2', {}, 'Notifications (webhooks)'), notes.el, h('h2', {}, 'Settings'), config.el]);
    let lastMaint = null;
    return async () => {
      const [engine, hooks, conf] = await Promise.all([api('/v1/engine'), api('/v1/notifications'), api('/v1/config')]);
      sub.textContent = engine.maintenance ? `Maintenance mode since ${utc(engine.maintenance.sinceMs)}: nothing changes what runs.` : 'Running: the leader converges the nodes to the desired state.';
      fill(facts,
        h('div', { class: 'card' }, h('small', {}, 'Leader'), h('b', { id: 'leader' }, engine.leader || 'none')),
        h('div', { class: 'card' }, h('small', {}, 'Store'), h('b', {}, engine.store)),
        h('div', { class: 'card' }, h('small', {}, 'Maintenance'), h('b', { id: 'maintenance' }, engine.maintenance ? 'on' : 'off'),
          engine.maintenance && engine.maintenance.reason ? h('small', {}, engine.maintenance.reason) : null));
      const maint = !!engine.maintenance;
      if (actions && maint !== lastMaint) {
        lastMaint = maint;
        fill(actions, maint
          ? action('Maintenance off', 'POST', '/v1/engine/maintenance', { name: 'maintenance-off', body: { on: false, reason: '' } })
          : action('Maintenance on', 'POST', '/v1/engine/maintenance', { name: 'maintenance-on', secondary: true, confirm: 'Turn maintenance mode on? Nothing will change what runs until it is off.', body: { on: true, reason: 'from the console' } }));
      }
      unreachable.set(Object.entries(engine.unreachable || {}), (e) => e[0], ([n, why]) => [n, why]);
      cordons.set(Object.entries(engine.cordons || {}), (e) => e[0], ([n, c]) => [n, c.preferred ? 'preferred' : 'required', c.reason || '', utc(c.sinceMs)]);
      constraints.set(engine.constraints || [], (c) => `${c.kind || c.type}/${c.value}`, (c) => [c.type || c.kind, c.value, `node ${c.equal ? '==' : '!='} ${c.value}` + (c.soft ? ' (must hold)' : ' (preferred)'), utc(c.sinceMs)]);
      notes.set(hooks, (u) => u, (u) => [h('span', { class: 'mono' }, u)]);
      config.set(conf, (e) => e.key, (e) => [h('code', {}, e.key), cell(e.value, 'num'), cell(e.default, 'num'), e.range, e.about]);
    };
  }

  // ---- one host (stewardd's remote listener) ----------------------------------------------

  const stateName = (st) => (st && typeof st === 'object' ? st.state : String(st));
  const idText = (id) => `${id.namespace}/${id.name}/${id.index}`;

  function instancesPage() {
    const sub = header('Instances');
    const cols = ['Instance', 'State', 'Ready', ['PID', 'num'], ['Restarts', 'num'], 'Ports', ['Revision', 'num'], 'Message'];
    if (canWrite()) cols.push('Actions');
    const list = table(cols, 'No instances on this host.');
    add(main, list.el);
    return async () => {
      const { instances } = await api('/v1/instances');
      const ready = instances.filter((i) => i.ready).length;
      sub.textContent = `${instances.length} instances on ${state.host} · ${ready} ready`;
      list.set(instances, (i) => idText(i.id), (i) => {
        const app = `${i.id.namespace}/${i.id.name}`;
        const row = [
          h('a', { href: `/ui/apps/${enc(app)}`, class: 'mono' }, idText(i.id)), badge(stateName(i.state)), badge(i.ready ? 'yes' : 'no'),
          cell(i.pid || '—', 'num'), cell(i.restarts, 'num'),
          Object.entries(i.ports || {}).map(([n, p]) => h('span', { class: 'label' }, `${n}=${p}`)),
          cell(i.revision !== undefined ? i.revision : '—', 'num'), i.message || ''];
        if (canWrite()) row.push(action('Restart', 'POST', `/v1/instances/${enc(idText(i.id))}/restart`, { secondary: true, name: 'restart' }));
        return row;
      });
    };
  }

  function nodePage() {
    const sub = header('Node');
    const cards = h('div', { class: 'cards' });
    const labelsT = table(['Label', 'Value'], 'No labels.');
    const attrsT = table(['Attribute', 'Value'], 'No attributes.');
    add(main, [cards, h('h2', {}, 'Labels'), labelsT.el, h('h2', {}, 'Attributes'), attrsT.el]);
    return async () => {
      const n = await api('/v1/node');
      const r = n.resources;
      sub.textContent = `${n.hostname} · ${n.hostIp} · ${n.os}/${n.arch} · stewardd ${n.version} · load ${Number(n.loadAverage).toFixed(2)}`;
      fill(cards,
        h('div', { class: 'card' }, h('small', {}, 'Instances'), h('b', { id: 'node-instances' }, n.instances)),
        h('div', { class: 'card' }, h('small', {}, 'CPU admitted'), meter(r.allocated.milliCpu, r.allocatable.milliCpu, 'CPU admitted', `${cores(r.allocated.milliCpu)} of ${cores(r.allocatable.milliCpu)} cores`, true)),
        h('div', { class: 'card' }, h('small', {}, 'Memory admitted'), meter(r.allocated.memoryBytes, r.allocatable.memoryBytes, 'Memory admitted', `${bytes(r.allocated.memoryBytes)} of ${bytes(r.allocatable.memoryBytes)}`, true)),
        h('div', { class: 'card' }, h('small', {}, 'CPU used'), meter(Math.round(n.cpuUsagePercent), 100, 'CPU used', `${n.cpuUsagePercent.toFixed(1)} % of ${n.cpus} cpus`)),
        h('div', { class: 'card' }, h('small', {}, 'Memory used'), meter(n.memoryUsedBytes, n.memoryTotalBytes, 'Memory used', `${bytes(n.memoryUsedBytes)} of ${bytes(n.memoryTotalBytes)}`)));
      labelsT.set(Object.entries(n.labels || {}), (e) => e[0], ([k, v]) => [h('code', {}, k), v]);
      attrsT.set(Object.entries(n.attributes || {}), (e) => e[0], ([k, v]) => [h('code', {}, k), v]);
    };
  }

  function hostAppPage([ns, name, revision]) {
    const key = `${ns}/${name}`;
    const sub = header(key);
    const phase = h('span', { id: 'phase', 'data-phase': '' });
    add(main, h('p', {}, h('a', { href: `/ui/events?q=${encodeURIComponent(key + '/')}` }, 'Its events'), ' · rollout: ', phase));
    const base = `/v1/apps/${enc(key)}`;
    const actions = canWrite() ? rolloutActions(base + '/rollout/',
      action('Undo', 'POST', base + '/undo', { name: 'undo', secondary: true, confirm: `Apply ${key}'s previous revision again?` })) : null;
    if (actions) add(main, actions.el);
    const overall = h('div', { class: 'cards' });
    const revs = table(['Revision', 'Hash', 'Applied', 'By', 'Its rollout', 'Changes'], 'No revisions.', [11, 14, 17, 27, 18, 13]);
    const diffs = revisionDiffs(key, revision ? { n: Number(revision), node: state.host } : null);
    const inst = table(['Instance', 'State', 'Ready', ['Restarts', 'num'], ['Revision', 'num'], 'Message'], 'No instances here.', [18, 12, 8, 9, 9, 44]);
    add(main, [overall, h('h2', {}, 'Revisions'), revs.el, diffs.els, h('h2', {}, 'Instances'), inst.el]);
    return async () => {
      const q = `namespace=${encodeURIComponent(ns)}&name=${encodeURIComponent(name)}`;
      const [ro, history, list] = await Promise.all([api(`/v1/apps/${enc(key)}/rollout`), api(`/v1/apps/${enc(key)}/revisions`), api(`/v1/instances?${q}`)]);
      const r = ro.rollout; const p = ro.progress;
      const ph = r ? r.phase : 'none';
      fill(phase, badge(ph));
      phase.dataset.phase = ph;
      if (actions) actions.phase(ph);
      sub.textContent = `revision ${ro.revision} on ${state.host}` + (r ? ` · rollout ${r.from} → ${r.target}, ${r.steps} steps, started ${ago(r.startedMs)}` : '') +
        (r && r.message ? ` · ${r.message}` : '') + (r && r.reason ? ` · ${r.reason}` : '');
      fill(overall,
        h('div', { class: 'card' }, h('small', {}, 'Updated'), h('div', { id: 'updated' }, meter(p.updated, p.instances, 'Instances updated', `${p.updated} of ${p.instances}`))),
        h('div', { class: 'card' }, h('small', {}, 'Ready'), meter(p.ready, p.instances, 'Instances ready', `${p.ready} of ${p.instances}`)),
        h('div', { class: 'card' }, h('small', {}, 'Surge instances'), h('b', {}, p.spares)));
      diffs.update({ [state.host]: history.revisions }, () => revs.set(history.revisions.slice().reverse(), (v) => String(v.revision), (v) => [
        h('b', {}, v.revision, v.current ? ' (current)' : ''), h('code', {}, v.hash), utc(v.createdMs), v.appliedBy,
        v.outcome ? h('span', {}, badge(v.outcome.phase), v.outcome.reason ? ` ${v.outcome.reason}` : '') : '—', diffs.link(v.revision, [state.host])]));
      inst.set(list.instances, (i) => idText(i.id), (i) => [h('span', { class: 'mono' }, idText(i.id)), badge(stateName(i.state)),
        badge(i.ready ? 'yes' : 'no'), cell(i.restarts, 'num'), cell(i.revision !== undefined ? i.revision : '—', 'num'), i.message || '']);
    };
  }

  route(false);
})();
