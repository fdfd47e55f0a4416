// Pure helpers of the page: formatting, rates, the event-stream parser.
// They touch no DOM, so that tests can import them alone.

/** formatBytes(1536) is "1.5 KiB". */
export function formatBytes(n) {
  if (!Number.isFinite(n) || n < 0) return '';
  const units = ['bytes', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} bytes` : `${n < 10 ? n.toFixed(1) : Math.round(n)} ${units[i]}`;
}

/** formatDuration(75) is "1:15", formatDuration(3725) "1:02:05". */
export function formatDuration(s) {
  if (!Number.isFinite(s) || s < 0) return '';
  s = Math.round(s);
  const h = Math.floor(s / 3600), m = Math.floor(s / 60) % 60, sec = s % 60;
  const mm = h > 0 ? String(m).padStart(2, '0') : String(m);
  return (h > 0 ? `${h}:` : '') + `${mm}:${String(sec).padStart(2, '0')}`;
}

/**
 * rates says how fast a task runs and when it should end, from its
 * status view (as GET /v1/tasks/{id}/status has it) at time now (ms):
 * frames/s, the seconds left (null when unknown) and the seconds run so
 * far. The rate is that of the last window seconds of samples (see
 * RateMeter) when they span one second or more, else of the whole run
 * (frames resumed from a journal not counted).
 */
export function rates(v, now, samples = []) {
  const p = v.progress || {};
  const done = p.frames_done || 0, total = p.frames_total || 0;
  const started = v.status === 'pending' || !v.attempts ? NaN : Date.parse(v.start_time); // a task cancelled while it waited never ran
  const end = v.end_time ? Date.parse(v.end_time) : now;
  const run = Number.isFinite(started) ? Math.max(0, (end - started) / 1000) : 0;
  const frames = done - (v.resumed_from_frame || 0);
  let fps = run > 0 && frames > 0 ? frames / run : 0;
  if (v.status === 'processing' && samples.length >= 2) {
    const [t0, d0] = samples[0], [t1, d1] = samples[samples.length - 1];
    if (t1 - t0 >= 1000 && d1 > d0) fps = (1000 * (d1 - d0)) / (t1 - t0);
  }
  const eta = v.status === 'processing' && fps > 0 && total >= done ? (total - done) / fps : null;
  return { fps, eta, run };
}

/**
 * RateMeter keeps a running task's recent progress: samples of [time ms,
 * frames done] over the last window seconds, for rates.
 */
export class RateMeter {
  constructor(window = 10) {
    this.window = window * 1000;
    this.samples = [];
  }

  add(now, done) {
    const last = this.samples[this.samples.length - 1];
    if (last && done < last[1]) this.samples = []; // a new run
    if (!last || done !== last[1]) this.samples.push([now, done]);
    while (this.samples.length > 2 && now - this.samples[1][0] > this.window) this.samples.shift();
    return this.samples;
  }
}

/** percent of a task's frames done, 0 to 100. */
export function percent(v) {
  const p = v.progress || {};
  if (v.status === 'completed') return 100;
  return p.frames_total > 0 ? Math.min(100, (100 * p.frames_done) / p.frames_total) : 0;
}

/**
 * outputName makes a task's save_result_path from the page's pattern,
 * where {name} is the input file's name without its extension: "" when
 * the pattern is empty (the server names it TASK_ID.mp4).
 */
export function outputName(pattern, fileName) {
  pattern = pattern.trim();
  if (pattern === '') return '';
  const dot = fileName.lastIndexOf('.');
  const stem = (dot > 0 ? fileName.slice(0, dot) : fileName).replace(/[\\/]/g, '_');
  return pattern.replaceAll('{name}', stem);
}

/** baseName("/a/b/c.mp4") is "c.mp4". */
export function baseName(p) {
  return String(p || '').split(/[\\/]/).pop();
}

/**
 * SSEParser reads a text/event-stream (the Server-Sent Events format) in
 * pieces as they arrive, calling onEvent({type, data}) for each event.
 */
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = '';
    this.type = '';
    this.data = [];
  }

  push(text) {
    this.buf += text;
    for (;;) {
      const i = this.buf.search(/[\r\n]/);
      if (i < 0) return;
      if (this.buf[i] === '\r' && i === this.buf.length - 1) return; // a \n may follow
      const n = this.buf[i] === '\r' && this.buf[i + 1] === '\n' ? 2 : 1;
      const line = this.buf.slice(0, i);
      this.buf = this.buf.slice(i + n);
      this.line(line);
    }
  }

  line(line) {
    if (line === '') {
      if (this.data.length > 0) this.onEvent({ type: this.type || 'message', data: this.data.join('\n') });
      this.type = '';
      this.data = [];
      return;
    }
    if (line.startsWith(':')) return;
    const c = line.indexOf(':');
    const field = c < 0 ? line : line.slice(0, c);
    let value = c < 0 ? '' : line.slice(c + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') this.type = value;
    else if (field === 'data') this.data.push(value);
  }
}
