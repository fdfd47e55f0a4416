// The page of vsr serve: upload and submit, the tasks with live progress,
// the before/after comparison of a finished task, live sessions and
// devices. Plain DOM code; the API client is api.js, the pure helpers
// format.js.

import { APIError, blob, call, token, upload, watchTasks } from './api.js';
import { RateMeter, baseName, formatBytes, formatDuration, outputName, percent, rates } from './format.js';

const $ = (id) => document.getElementById(id);

/** el makes an element with properties and children. */
function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('aria-') || k.startsWith('data-') || k === 'role' || k === 'for') e.setAttribute(k, v);
    else e[k] = v;
  }
  e.append(...children.filter((c) => c !== null && c !== undefined));
  return e;
}

const state = {
  meta: null,
  tasks: new Map(), // id -> status view
  cards: new Map(), // id -> card
  meters: new Map(), // id -> RateMeter of a running task
  files: [], // {file, row, bar, note}
  stopWatch: null,
  timers: [],
  compare: null, // the task compared
};

function toast(msg) {
  const t = $('toast');
  t.textContent = msg;
  t.hidden = !msg;
}

/** failed reports an API error where it belongs: the token form on 401, else the toast. */
function failed(e, where) {
  if (e instanceof APIError && e.status === 401) {
    lockedOut(token.get() ? 'The service refused the token: enter it again.' : '');
    return;
  }
  if (where) {
    where.textContent = e.message;
    where.hidden = false;
  } else toast(e.message);
}

// ---- the token ----

function lockedOut(msg) {
  stop();
  token.clear();
  $('app').hidden = true;
  $('lock').hidden = true;
  $('mode').hidden = true;
  $('login').hidden = false;
  const err = $('login-error');
  err.textContent = msg || '';
  err.hidden = !msg;
  $('token').focus();
}

$('login-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  token.set($('token').value.trim());
  $('token').value = '';
  start();
});

$('lock').addEventListener('click', () => lockedOut(''));

function stop() {
  if (state.stopWatch) state.stopWatch();
  state.stopWatch = null;
  state.timers.forEach(clearInterval);
  state.timers = [];
}

// ---- start ----

async function start() {
  stop();
  let meta;
  try {
    meta = await call('GET', '/v1/service/metadata');
  } catch (e) {
    if (e.status === 401) lockedOut(token.get() ? 'The service refused that token.' : '');
    else toast(`The service did not answer: ${e.message}`);
    return;
  }
  state.meta = meta;
  $('login').hidden = true;
  $('app').hidden = false;
  $('lock').hidden = !token.get();
  toast('');
  $('service').textContent = [meta.service, meta.version, meta.device].filter(Boolean).join(' · ');
  setupModels(meta);
  showLimits();
  for (const id of [...state.cards.keys()]) removeTask(id);
  state.stopWatch = watchTasks({
    onTask: showTask,
    onRemoved: removeTask,
    onMode: (m) => {
      if (m === 'live') toast(''); // the errors of polling are over
      const p = $('mode');
      p.hidden = false;
      p.textContent = m === 'live' ? 'Live updates' : 'Polling';
      p.dataset.mode = m;
    },
    onError: (e) => failed(e),
  });
  refreshSide();
  state.timers.push(setInterval(refreshSide, 3000), setInterval(tickTimes, 1000));
}

// ---- models and their parameters ----

function familyOf(model) {
  const fams = state.meta.families || [];
  return fams.find((f) => f.name === model.family) || null;
}

function setupModels(meta) {
  const sel = $('model');
  sel.replaceChildren();
  for (const m of meta.models || []) {
    const opt = el('option', { value: m.name, textContent: m.name + (m.name === meta.default_model ? ' (default)' : '') });
    sel.append(opt);
  }
  sel.value = meta.default_model || '';
  sel.onchange = showParams;
  showParams();
}

/** the main parameters, shown first; the others go under "More parameters". */
const mainParams = new Set(['sr_ratio', 'size']);

function showParams() {
  const model = (state.meta.models || []).find((m) => m.name === $('model').value) || {};
  const fam = familyOf(model);
  $('model-about').textContent = fam ? `${fam.title || fam.name} model` : '';
  const main = $('params');
  const more = $('params-more');
  main.replaceChildren();
  more.replaceChildren();
  for (const p of fam ? fam.params : []) {
    (mainParams.has(p.field) ? main : more).append(paramInput(p, model));
  }
  $('more-params').hidden = more.children.length === 0;
}

/** paramInput is the form control of one parameter; empty means the server's default. */
function paramInput(p, model) {
  const id = `p-${p.field}`;
  const words = p.field.replaceAll('_', ' ');
  const label = p.field === 'sr_ratio' ? 'Scale (sr_ratio)' : p.field === 'size' ? 'Output size' : words[0].toUpperCase() + words.slice(1);
  const help = el('p', { id: `${id}-help`, class: 'muted small', textContent: p.help });
  const wrap = el('div', { class: p.kind === 'shape' ? 'wide' : '' });
  if (p.kind === 'shape') {
    const w = el('input', { id: `${id}-w`, type: 'number', min: 2, step: 2, placeholder: 'width', 'aria-describedby': help.id });
    const h = el('input', { id: `${id}-h`, type: 'number', min: 2, step: 2, placeholder: 'height', 'aria-label': 'Output height', 'aria-describedby': help.id });
    w.dataset.param = p.field;
    w.dataset.kind = 'shape';
    wrap.append(el('label', { for: w.id, textContent: `${label} (width × height)` }), el('div', { class: 'row' }, w, el('span', { textContent: '×' }), h), help);
    return wrap;
  }
  let input;
  const ratios = p.field === 'sr_ratio' && model.sr_ratios;
  if (ratios) {
    input = el('select', { id });
    const def = model.default_sr_ratio;
    input.append(el('option', { value: '', textContent: def ? `Server default (${def})` : 'Server default' }));
    for (const r of ratios) input.append(el('option', { value: String(r), textContent: `×${r}` }));
  } else {
    const def = p.field === 'sr_ratio' && model.default_sr_ratio !== undefined ? model.default_sr_ratio : p.default;
    input = el('input', {
      id, type: p.kind === 'string' ? 'text' : 'number',
      step: p.kind === 'float' ? 'any' : 1,
      placeholder: def === null || def === undefined || def === '' ? 'default' : `default ${def}`,
    });
  }
  input.dataset.param = p.field;
  input.dataset.kind = p.kind;
  input.setAttribute('aria-describedby', help.id);
  wrap.append(el('label', { for: id, textContent: label }), input, help);
  return wrap;
}

/** params reads the parameters set in the form; a wrong value throws with its name. */
function params() {
  const out = {};
  for (const input of document.querySelectorAll('[data-param]')) {
    const { param, kind } = input.dataset;
    if (kind === 'shape') {
      const w = input.value, h = $(`${input.id.slice(0, -2)}-h`).value;
      if (w === '' && h === '') continue;
      if (w === '' || h === '') throw new Error('Output size: give both the width and the height');
      out[param] = [Number(h), Number(w)]; // the API's order: [height, width]
      continue;
    }
    const v = input.value.trim();
    if (v === '') continue;
    if (kind === 'string') out[param] = v;
    else {
      const n = Number(v);
      if (!Number.isFinite(n) || (kind === 'int' && !Number.isInteger(n))) throw new Error(`${param}: ${v} is not ${kind === 'int' ? 'a whole number' : 'a number'}`);
      out[param] = n;
    }
  }
  return out;
}

// ---- files and submit ----

async function showLimits() {
  const m = state.meta;
  let text = `Up to ${formatBytes(m.max_upload)} a file · queue of ${m.max_queue}`;
  try {
    const q = await call('GET', '/v1/tasks/queue/status');
    text += ` (${q.queue_available} free)`;
  } catch { /* shown without it */ }
  $('limits').textContent = text;
}

function addFiles(list) {
  for (const file of list) {
    const bar = el('progress', { max: 100, value: 0, 'aria-label': `Upload of ${file.name}` });
    const note = el('span', { class: 'muted small', textContent: formatBytes(file.size) });
    const remove = el('button', { type: 'button', class: 'ghost small', textContent: 'Remove', 'aria-label': `Remove ${file.name}` });
    const row = el('li', {}, el('span', { class: 'name', textContent: file.name }), bar, note, remove);
    const item = { file, row, bar, note, remove };
    if (file.size > state.meta.max_upload) {
      note.textContent = `over the limit of ${formatBytes(state.meta.max_upload)}`;
      note.className = 'error small';
      item.tooBig = true;
    }
    remove.onclick = () => {
      state.files = state.files.filter((f) => f !== item);
      row.remove();
      updateSubmit();
    };
    state.files.push(item);
    $('picked').append(row);
  }
  updateSubmit();
}

function updateSubmit() {
  const n = state.files.filter((f) => !f.sent && !f.tooBig).length;
  $('submit').disabled = n === 0;
  $('submit').textContent = n > 1 ? `Restore ${n} files` : 'Restore';
}

$('files').addEventListener('change', (ev) => {
  addFiles(ev.target.files);
  ev.target.value = '';
});
const drop = $('drop');
drop.addEventListener('dragover', (ev) => {
  ev.preventDefault();
  drop.classList.add('over');
});
drop.addEventListener('dragleave', () => drop.classList.remove('over'));
drop.addEventListener('drop', (ev) => {
  ev.preventDefault();
  drop.classList.remove('over');
  addFiles(ev.dataTransfer.files);
});

$('new-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const err = $('form-error');
  err.hidden = true;
  let fields;
  try {
    fields = { model: $('model').value };
    const p = params();
    if (Object.keys(p).length > 0) fields.params = p;
    if ($('codec').value) fields.codec = $('codec').value;
    if ($('quality').value) fields.crf = Number($('quality').value);
    if ($('speed').value) fields.preset = $('speed').value;
    if ($('overwrite').checked) fields.overwrite = true;
  } catch (e) {
    err.textContent = e.message;
    err.hidden = false;
    return;
  }
  const todo = state.files.filter((f) => !f.sent && !f.tooBig);
  for (const item of todo) item.sent = true;
  updateSubmit();
  await Promise.all(todo.map((item) => send(item, fields)));
  showLimits();
});

async function send(item, fields) {
  const f = { ...fields };
  const name = outputName($('outname').value, item.file.name);
  if (name) f.save_result_path = name;
  item.remove.hidden = true;
  item.note.className = 'muted small';
  item.note.textContent = 'Uploading…';
  try {
    const r = await upload(f, item.file, (x) => {
      item.bar.value = Math.round(100 * x);
      item.note.textContent = `Uploading ${Math.round(100 * x)}%`;
    }).promise;
    item.bar.value = 100;
    item.note.textContent = `Queued as ${r.task_id.slice(0, 8)}`;
    setTimeout(() => {
      item.row.remove();
      state.files = state.files.filter((x) => x !== item);
    }, 4000);
  } catch (e) {
    if (e.status === 401) return failed(e);
    item.note.textContent = e.message;
    item.note.className = 'error small';
    item.row.classList.add('failed');
    item.remove.hidden = false;
  }
}

// ---- the tasks ----

const stateNames = { pending: 'Queued', processing: 'Running', completed: 'Done', failed: 'Failed', cancelled: 'Cancelled' };

function taskName(v) {
  return baseName(v.save_result_path) || v.task_id;
}

function makeCard(id) {
  const c = {};
  c.title = el('h3', { class: 'name' });
  c.badge = el('span', { class: 'badge' });
  c.barFill = el('div', { class: 'fill' });
  c.bar = el('div', { class: 'bar', role: 'progressbar', 'aria-valuemin': 0, 'aria-valuemax': 100 }, c.barFill);
  c.stats = el('p', { class: 'stats small' });
  c.times = el('p', { class: 'muted small' });
  c.error = el('p', { class: 'error small', hidden: true });
  c.cancel = el('button', { type: 'button', class: 'ghost', textContent: 'Cancel' });
  c.compare = el('button', { type: 'button', textContent: 'Compare & download' });
  c.hide = el('button', { type: 'button', class: 'ghost', textContent: 'Delete' });
  c.li = el('li', { class: 'task', 'data-id': id },
    el('div', { class: 'head' }, c.title, c.badge), c.bar, c.stats, c.times, c.error,
    el('div', { class: 'actions' }, c.compare, c.cancel, c.hide));
  c.cancel.onclick = async () => {
    c.cancel.disabled = true;
    try {
      const r = await call('DELETE', `/v1/tasks/${encodeURIComponent(id)}`);
      if (r.stop_status === 'do_nothing') toast(r.reason);
    } catch (e) {
      failed(e);
    } finally {
      c.cancel.disabled = false;
    }
  };
  c.compare.onclick = () => openCompare(state.tasks.get(id));
  c.hide.onclick = async () => {
    c.hide.disabled = true;
    try {
      await call('DELETE', `/v1/tasks/${encodeURIComponent(id)}/record`);
      removeTask(id);
    } catch (e) {
      failed(e);
    } finally {
      c.hide.disabled = false;
    }
  };
  return c;
}

function showTask(v) {
  state.tasks.set(v.task_id, v);
  if (v.status === 'processing') {
    if (!state.meters.has(v.task_id)) state.meters.set(v.task_id, new RateMeter());
    state.meters.get(v.task_id).add(Date.now(), (v.progress && v.progress.frames_done) || 0);
  } else state.meters.delete(v.task_id);
  let c = state.cards.get(v.task_id);
  if (!c) {
    c = makeCard(v.task_id);
    state.cards.set(v.task_id, c);
  }
  c.title.textContent = taskName(v);
  c.title.title = v.task_id;
  c.badge.textContent = stateNames[v.status] || v.status;
  c.badge.dataset.status = v.status;
  c.li.dataset.status = v.status;
  const pct = percent(v);
  c.barFill.style.setProperty('--pct', `${pct}%`);
  c.bar.setAttribute('aria-valuenow', Math.round(pct));
  c.bar.setAttribute('aria-label', `Progress of ${taskName(v)}`);
  c.error.textContent = v.error && v.status !== 'completed' ? v.error : '';
  c.error.hidden = !c.error.textContent;
  c.cancel.hidden = v.status !== 'pending' && v.status !== 'processing';
  c.cancel.setAttribute('aria-label', `Cancel ${taskName(v)}`);
  c.compare.hidden = v.status !== 'completed';
  c.compare.setAttribute('aria-label', `Compare and download ${taskName(v)}`);
  c.hide.hidden = !c.cancel.hidden;
  c.hide.setAttribute('aria-label', `Delete ${taskName(v)} from the list (its output file stays)`);
  showTimes(c, v);
  placeCard(c, v);
  $('no-tasks').hidden = state.cards.size > 0;
  summarize();
  if (state.compare && state.compare.task_id === v.task_id && v.status !== 'completed') closeCompare();
}

/** the order of the list: running, then queued by position, then the finished, latest first. */
function rank(v) {
  const order = { processing: 0, pending: 1 };
  const r = order[v.status] ?? 2;
  const at = Date.parse(v.end_time || v.create_time) || 0;
  return [r, r === 1 ? v.queue_position || 0 : -at];
}

function placeCard(c, v) {
  const list = $('tasks');
  const [r0, r1] = rank(v);
  let before = null;
  for (const other of list.children) {
    if (other === c.li) continue;
    const o = state.tasks.get(other.dataset.id);
    const [o0, o1] = rank(o);
    if (o0 > r0 || (o0 === r0 && o1 > r1)) { before = other; break; }
  }
  if (c.li.parentNode !== list || c.li.nextSibling !== before) {
    const focused = c.li.contains(document.activeElement) ? document.activeElement : null;
    list.insertBefore(c.li, before);
    if (focused) focused.focus();
  }
}

function showTimes(c, v) {
  const rm = state.meters.get(v.task_id);
  const { fps, eta, run } = rates(v, Date.now(), rm ? rm.samples : []);
  const p = v.progress || {};
  const parts = [];
  if (v.status === 'pending') parts.push(v.queue_position ? `Position ${v.queue_position} in the queue` : 'Queued');
  if (p.frames_total) parts.push(`${p.frames_done} / ${p.frames_total} frames`);
  else if (v.status === 'processing') parts.push(`${p.frames_done || 0} frames`);
  if (fps > 0) parts.push(`${fps.toFixed(fps < 10 ? 2 : 1)} frames/s`);
  if (eta !== null) parts.push(`ETA ${formatDuration(eta)}`);
  if (v.status === 'completed' && v.width) parts.push(`${v.width}×${v.height}`);
  c.stats.textContent = parts.join(' · ');
  const t = (s) => new Date(s).toLocaleTimeString();
  const times = [`Created ${t(v.create_time)}`];
  if (v.status !== 'pending' && v.start_time && v.start_time !== v.create_time) times.push(`started ${t(v.start_time)}`);
  if (v.end_time) times.push(`ended ${t(v.end_time)}`);
  if (run > 0) times.push(`ran ${formatDuration(run)}`);
  if (v.devices) times.push(`on ${v.devices}`);
  c.times.textContent = times.join(' · ');
}

function tickTimes() {
  for (const [id, c] of state.cards) {
    const v = state.tasks.get(id);
    if (v && v.status === 'processing') showTimes(c, v);
  }
}

function removeTask(id) {
  const c = state.cards.get(id);
  if (c) c.li.remove();
  state.cards.delete(id);
  state.tasks.delete(id);
  state.meters.delete(id);
  $('no-tasks').hidden = state.cards.size > 0;
  summarize();
}

function summarize() {
  const n = { pending: 0, processing: 0, completed: 0, failed: 0, cancelled: 0 };
  for (const v of state.tasks.values()) n[v.status] = (n[v.status] || 0) + 1;
  $('queue-summary').textContent = `${n.processing} running · ${n.pending} queued · ${n.completed} done` +
    (n.failed ? ` · ${n.failed} failed` : '') + (n.cancelled ? ` · ${n.cancelled} cancelled` : '');
}

// ---- the comparison ----

let previewURLs = [];

async function openCompare(v) {
  state.compare = v;
  const sec = $('compare');
  sec.hidden = false;
  $('compare-h').textContent = `Compare: ${taskName(v)}`;
  $('carried').replaceChildren(...(v.carried || []).map((c) => el('li', { textContent: c })));
  if (!(v.carried || []).length) $('carried').append(el('li', { class: 'muted', textContent: 'Nothing besides the picture.' }));
  $('dropped').replaceChildren(...(v.dropped || []).map((d) => el('li', {}, el('strong', { textContent: d.what }), `: ${d.why}`)));
  if (!(v.dropped || []).length) $('dropped').append(el('li', { class: 'muted', textContent: 'Nothing.' }));
  sec.scrollIntoView({ block: 'start' });
  const slider = $('cmp-time');
  slider.focus();
  try {
    const info = await call('GET', `/v1/tasks/${encodeURIComponent(v.task_id)}/preview/info`);
    const step = info.fps > 0 ? 1 / info.fps : 0.04;
    slider.min = 0;
    slider.step = step.toFixed(6);
    slider.max = Math.max(0, info.duration_seconds - step).toFixed(3);
    slider.value = Math.min(Number(slider.max), info.duration_seconds / 2).toFixed(3);
  } catch (e) {
    if (e.status === 401) return failed(e);
    slider.max = 0;
    slider.value = 0;
  }
  if (state.compare === v) loadFrames();
}

function closeCompare() {
  const v = state.compare;
  state.compare = null;
  $('compare').hidden = true;
  previewURLs.forEach(URL.revokeObjectURL);
  previewURLs = [];
  const c = v && state.cards.get(v.task_id);
  if (c) c.compare.focus();
}

/** frameTime is the time the slider points at, in seconds. */
function frameTime() {
  return Number($('cmp-time').value);
}

async function loadFrames() {
  const v = state.compare;
  if (!v) return;
  const t = frameTime();
  $('cmp-time-out').textContent = `${t.toFixed(2)} s`;
  const box = $('cmp');
  box.setAttribute('aria-busy', 'true');
  $('cmp-status').textContent = 'Rendering the frames…';
  const q = (which) => `/v1/tasks/${encodeURIComponent(v.task_id)}/preview?t=${t.toFixed(3)}&which=${which}`;
  try {
    const [before, after] = await Promise.all([blob(q('input')), blob(q('output'))]);
    if (state.compare !== v) return;
    previewURLs.forEach(URL.revokeObjectURL);
    previewURLs = [URL.createObjectURL(before), URL.createObjectURL(after)];
    await Promise.all([setImage($('cmp-before'), previewURLs[0]), setImage($('cmp-after'), previewURLs[1])]);
    const img = $('cmp-after');
    if (img.naturalHeight > 0) box.style.setProperty('--aspect', String(img.naturalWidth / img.naturalHeight));
    box.setAttribute('aria-busy', 'false');
    $('cmp-status').textContent = `Frame at ${t.toFixed(2)} s, ${$('cmp-after').naturalWidth}×${$('cmp-after').naturalHeight}: drag the divider or use the arrow keys on it.`;
  } catch (e) {
    if (e.status === 401) return failed(e);
    box.setAttribute('aria-busy', 'false');
    $('cmp-status').textContent = `No preview: ${e.message}`;
  }
}

function setImage(img, url) {
  return new Promise((resolve) => {
    img.onload = img.onerror = () => resolve();
    img.src = url;
  });
}

$('cmp-time').addEventListener('input', () => {
  const t = frameTime();
  $('cmp-time-out').textContent = `${t.toFixed(2)} s`;
});
$('cmp-time').addEventListener('change', loadFrames);
$('cmp-pos').addEventListener('input', (ev) => $('cmp').style.setProperty('--pos', `${ev.target.value}%`));
$('compare-close').addEventListener('click', closeCompare);
$('compare').addEventListener('keydown', (ev) => { if (ev.key === 'Escape') closeCompare(); });

$('download').addEventListener('click', async () => {
  const v = state.compare;
  if (!v) return;
  const b = $('download');
  b.disabled = true;
  b.textContent = 'Downloading…';
  try {
    const data = await blob(`/v1/tasks/${encodeURIComponent(v.task_id)}/result`);
    const url = URL.createObjectURL(data);
    const a = el('a', { href: url, download: baseName(v.save_result_path) || `${v.task_id}.mp4` });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (e) {
    failed(e, $('cmp-status'));
  } finally {
    b.disabled = false;
    b.textContent = 'Download';
  }
});

// ---- live sessions and devices ----

async function refreshSide() {
  try {
    const [live, devs] = await Promise.all([call('GET', '/v1/streams'), call('GET', '/v1/devices')]);
    showLive(live.streams || []);
    showDevices(devs.devices || []);
  } catch (e) {
    if (e.status === 401) failed(e);
  }
}

function showLive(list) {
  $('no-live').hidden = list.length > 0;
  $('live-table').hidden = list.length === 0;
  const rows = list.map((s) => {
    const st = s.stats || {};
    const stop = el('button', { type: 'button', class: 'ghost small', textContent: 'Stop', 'aria-label': `Stop session ${s.stream_id}`, hidden: s.status !== 'running' });
    stop.onclick = async () => {
      try { await call('DELETE', `/v1/streams/${encodeURIComponent(s.stream_id)}`); } catch (e) { failed(e); }
      refreshSide();
    };
    return el('tr', {},
      el('th', { scope: 'row', textContent: s.stream_id.slice(0, 8), title: `${s.request.input} → ${s.request.output}` }),
      el('td', {}, s.status, s.error ? el('span', { class: 'error small', textContent: ` ${s.error}` }) : null),
      el('td', { textContent: st.width ? `${st.width}×${st.height}` : '' }),
      el('td', { textContent: `${(st.in_fps || 0).toFixed(1)} / ${(st.out_fps || 0).toFixed(1)}` }),
      el('td', { textContent: `${st.in_frames || 0} / ${st.out_frames || 0} / ${st.dropped_frames || 0}` }),
      el('td', { textContent: `${((st.latency_p50_seconds || 0) * 1000).toFixed(0)} / ${((st.latency_p99_seconds || 0) * 1000).toFixed(0)} ms` }),
      el('td', {}, stop));
  });
  $('live-rows').replaceChildren(...rows);
}

function meter(label, value, max, text) {
  const fill = el('div', { class: 'fill' });
  const pct = max > 0 ? (100 * value) / max : 0;
  fill.style.setProperty('--pct', `${Math.min(100, pct)}%`);
  return el('div', { class: 'meter' },
    el('span', { class: 'small', textContent: `${label}: ${text}` }),
    el('div', { class: 'bar', role: 'meter', 'aria-label': label, 'aria-valuemin': 0, 'aria-valuemax': max, 'aria-valuenow': value }, fill));
}

function showDevices(list) {
  $('device-list').replaceChildren(...list.map((d) => {
    const li = el('li', { class: 'device' }, el('strong', { textContent: d.name }), el('span', { class: 'muted small', textContent: ` ${d.model || ''}` }));
    if (d.memory_total_bytes) li.append(meter('Memory', d.memory_used_bytes, d.memory_total_bytes, `${formatBytes(d.memory_used_bytes)} of ${formatBytes(d.memory_total_bytes)}`));
    if (d.utilization_percent !== undefined) li.append(meter('Utilisation', d.utilization_percent, 100, `${d.utilization_percent}%`));
    if (d.pool_peak_bytes) li.append(el('p', { class: 'muted small', textContent: `Engine pool peak ${formatBytes(d.pool_peak_bytes)}` }));
    if (d.error) li.append(el('p', { class: 'error small', textContent: d.error }));
    if (d.kind === 'cpu') li.append(el('p', { class: 'muted small', textContent: 'Runs on the CPU: no memory or utilisation figures.' }));
    return li;
  }));
}

start();
