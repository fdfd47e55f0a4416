// Unit tests of the page's format.js, run in the browser by
// TestPageInBrowser: an expression whose value is the list of failures.
(async () => {
  const m = await import('/web/format.js');
  const fails = [];
  const eq = (what, got, want) => {
    if (JSON.stringify(got) !== JSON.stringify(want)) fails.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  };

  eq('formatBytes 0', m.formatBytes(0), '0 bytes');
  eq('formatBytes 1536', m.formatBytes(1536), '1.5 KiB');
  eq('formatBytes 2 GiB', m.formatBytes(2 * 2 ** 30), '2.0 GiB');
  eq('formatBytes -1', m.formatBytes(-1), '');
  eq('formatDuration 75', m.formatDuration(75), '1:15');
  eq('formatDuration 3725', m.formatDuration(3725), '1:02:05');
  eq('formatDuration NaN', m.formatDuration(NaN), '');

  eq('outputName', m.outputName('{name}_vsr.mp4', 'holiday.2024.mkv'), 'holiday.2024_vsr.mp4');
  eq('outputName empty', m.outputName('  ', 'a.mp4'), '');
  eq('outputName no extension', m.outputName('{name}.mp4', 'clip'), 'clip.mp4');
  eq('outputName slashes', m.outputName('{name}.mp4', 'a/b.mp4'), 'a_b.mp4');
  eq('baseName', m.baseName('/srv/out/x.mp4'), 'x.mp4');

  const t0 = Date.parse('2026-01-01T00:00:00Z');
  const running = { status: 'processing', attempts: 1, start_time: '2026-01-01T00:00:00Z', progress: { frames_done: 50, frames_total: 150 } };
  eq('rates of a run', m.rates(running, t0 + 10000), { fps: 5, eta: 20, run: 10 });
  eq('rates resumed', m.rates({ ...running, resumed_from_frame: 30 }, t0 + 10000).fps, 2);
  eq('rates windowed', m.rates(running, t0 + 10000, [[t0 + 8000, 40], [t0 + 10000, 50]]).fps, 5);
  eq('rates windowed short', m.rates(running, t0 + 10000, [[t0 + 9500, 48], [t0 + 10000, 50]]).fps, 5);
  eq('rates pending', m.rates({ status: 'pending', start_time: '2026-01-01T00:00:00Z', progress: {} }, t0 + 5000), { fps: 0, eta: null, run: 0 });
  eq('rates completed', m.rates({ status: 'completed', attempts: 1, start_time: '2026-01-01T00:00:00Z', end_time: '2026-01-01T00:00:04Z', progress: { frames_done: 8, frames_total: 8 } }, t0 + 99000), { fps: 2, eta: null, run: 4 });
  eq('rates cancelled while queued', m.rates({ status: 'cancelled', attempts: 0, start_time: '2026-01-01T00:00:00Z', end_time: '2026-01-01T00:00:04Z', progress: {} }, t0 + 9000), { fps: 0, eta: null, run: 0 });
  eq('percent', m.percent({ status: 'processing', progress: { frames_done: 1, frames_total: 4 } }), 25);
  eq('percent completed', m.percent({ status: 'completed', progress: {} }), 100);

  const meter = new m.RateMeter(10);
  meter.add(0, 0);
  meter.add(1000, 0);
  meter.add(5000, 10);
  meter.add(20000, 40);
  eq('RateMeter window', meter.samples, [[5000, 10], [20000, 40]]);
  meter.add(21000, 2);
  eq('RateMeter new run', meter.samples, [[21000, 2]]);

  const events = [];
  const p = new m.SSEParser((e) => events.push(e));
  p.push('event: task\ndata: {"a"');
  p.push(':1}\n\n: keep-alive\n\nevent: ready\r');
  p.push('\ndata: {}\r\n\r\ndata: x\ndata: y\n\n');
  eq('SSEParser', events, [{ type: 'task', data: '{"a":1}' }, { type: 'ready', data: '{}' }, { type: 'message', data: 'x\ny' }]);
  return fails;
})()
