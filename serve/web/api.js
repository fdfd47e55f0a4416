// The page's client of the vsr API. The bearer token, when the service
// has one, is kept in this tab's sessionStorage and sent in the
// Authorization header of every call: never in a URL or a cookie. That
// is why the event stream is read with fetch() rather than EventSource,
// which cannot send headers.

import { SSEParser } from './format.js';

const KEY = 'vsr.token';

export const token = {
  get: () => sessionStorage.getItem(KEY) || '',
  set: (v) => sessionStorage.setItem(KEY, v),
  clear: () => sessionStorage.removeItem(KEY),
};

/** APIError is a refused call: its HTTP status (0: no answer) and the service's one-line error. */
export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function headers(extra = {}) {
  const h = { ...extra };
  const t = token.get();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function errorOf(resp) {
  let msg = `${resp.status} ${resp.statusText}`;
  try {
    const j = await resp.json();
    if (j && j.error) msg = j.error;
  } catch { /* not JSON */ }
  return new APIError(resp.status, msg);
}

async function send(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { 'Content-Type': 'application/json' }), cache: 'no-store' };
  if (body !== undefined) init.body = JSON.stringify(body);
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (e) {
    throw new APIError(0, `the service did not answer (${e.message})`);
  }
  if (!resp.ok) throw await errorOf(resp);
  return resp;
}

/** call sends a JSON request and returns the JSON answer. */
export async function call(method, path, body) {
  return (await send(method, path, body)).json();
}

/** blob GETs path as a Blob (a result, a preview). */
export async function blob(path) {
  return (await send('GET', path)).blob();
}

/**
 * upload posts file with the request's fields to /v1/tasks/video/upload,
 * calling onProgress(fraction) as it is sent. It returns {promise,
 * abort}: promise resolves to the service's answer ({task_id, ...}).
 */
export function upload(fields, file, onProgress) {
  const xhr = new XMLHttpRequest();
  const promise = new Promise((resolve, reject) => {
    xhr.open('POST', '/v1/tasks/video/upload');
    const t = token.get();
    if (t) xhr.setRequestHeader('Authorization', `Bearer ${t}`);
    xhr.responseType = 'json';
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded / e.total); };
    xhr.onload = () => {
      const r = xhr.response;
      if (xhr.status === 200 && r) resolve(r);
      else reject(new APIError(xhr.status, (r && r.error) || `${xhr.status} ${xhr.statusText}`));
    };
    xhr.onerror = () => reject(new APIError(0, 'the upload was cut off'));
    xhr.onabort = () => reject(new APIError(0, 'upload cancelled'));
    const fd = new FormData();
    for (const [k, v] of Object.entries(fields)) fd.append(k, typeof v === 'string' ? v : JSON.stringify(v));
    fd.append('video', file, file.name);
    xhr.send(fd);
  });
  return { promise, abort: () => xhr.abort() };
}

/**
 * watchTasks follows the tasks: from GET /v1/events while it streams,
 * else by polling GET /v1/tasks/ every pollMs (trying the stream again
 * every retryMs). onTask(view) gets each new or changed task,
 * onRemoved(id) each one gone, onMode('live' | 'polling') the way updates
 * come, onError(APIError) each refusal (401 among them). It returns a
 * function that stops it.
 */
export function watchTasks({ onTask, onRemoved, onMode, onError }, pollMs = 2000, retryMs = 10000) {
  const ctl = new AbortController();
  let known = new Set();
  const sleep = (ms) => new Promise((r) => { const id = setTimeout(r, ms); ctl.signal.addEventListener('abort', () => { clearTimeout(id); r(); }); });

  async function stream() {
    const resp = await fetch('/v1/events', { headers: headers({ Accept: 'text/event-stream' }), signal: ctl.signal, cache: 'no-store' });
    if (!resp.ok) throw await errorOf(resp);
    if (!resp.body) throw new APIError(0, 'no streaming in this browser');
    onMode('live');
    const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
    const seen = new Set();
    const parser = new SSEParser(({ type, data }) => {
      const v = JSON.parse(data);
      if (type === 'task') { seen.add(v.task_id); onTask(v); }
      else if (type === 'removed') { seen.delete(v.task_id); onRemoved(v.task_id); }
      else if (type === 'ready') {
        for (const id of known) if (!seen.has(id)) onRemoved(id);
        known = seen;
      }
    });
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      parser.push(value);
    }
  }

  async function poll() {
    const [tasks, queue] = await Promise.all([call('GET', '/v1/tasks/'), call('GET', '/v1/tasks/queue/status')]);
    const pos = new Map((queue.pending_tasks || []).map((id, i) => [id, i + 1]));
    const now = new Set(Object.keys(tasks));
    for (const id of known) if (!now.has(id)) onRemoved(id);
    known = now;
    for (const v of Object.values(tasks)) onTask({ ...v, queue_position: pos.get(v.task_id) || 0 });
  }

  (async () => {
    while (!ctl.signal.aborted) {
      try {
        await stream();
      } catch (e) {
        if (ctl.signal.aborted) return;
        if (e instanceof APIError && e.status === 401) { onError(e); return; }
      }
      if (ctl.signal.aborted) return;
      onMode('polling');
      const until = Date.now() + retryMs;
      while (!ctl.signal.aborted && Date.now() < until) {
        try {
          await poll();
        } catch (e) {
          onError(e);
          if (e.status === 401) return;
        }
        await sleep(pollMs);
      }
    }
  })();
  return () => ctl.abort();
}
