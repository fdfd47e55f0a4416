package serve

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the service's Prometheus metrics, in a registry of its own.
type metrics struct {
	reg       *prometheus.Registry
	submitted prometheus.Counter
	frames    prometheus.Counter
	resumed   prometheus.Counter
	fps       prometheus.Gauge
	duration  *prometheus.HistogramVec
	byDevices *prometheus.CounterVec
}

func newMetrics(s *Service) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.submitted = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vsr_tasks_submitted_total", Help: "Tasks accepted since the service started."})
	m.frames = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vsr_frames_processed_total", Help: "Frames written by tasks since the service started."})
	m.resumed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "vsr_resumed_frames_total", Help: "Frames that completed tasks took from the journals of their interrupted runs instead of restoring them again."})
	m.fps = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "vsr_frames_per_second", Help: "Frames per second of the last completed task (whole task, wall time)."})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "vsr_task_duration_seconds",
		Help:    "Run time of finished tasks by final status.",
		Buckets: prometheus.ExponentialBuckets(0.25, 2, 16),
	}, []string{"status"})
	m.byDevices = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vsr_tasks_finished_total", Help: "Finished tasks by the devices they ran on and their final status."},
		[]string{"devices", "status"})
	m.reg.MustRegister(m.submitted, m.frames, m.resumed, m.fps, m.duration, m.byDevices,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "vsr_queue_depth", Help: "Tasks waiting in the queue (not counting the running ones)."},
		func() float64 { return float64(len(s.snapshot(false).pending)) }))
	if s.wq != nil {
		m.reg.MustRegister(&workerCollector{s: s,
			count: prometheus.NewDesc("vsr_workers_connected", "Workers taking tasks from NATS JetStream now (vsr worker processes).", nil, nil),
			running: prometheus.NewDesc("vsr_worker_running_tasks",
				"Tasks each connected worker runs now, by worker and devices.", []string{"worker", "devices"}, nil)})
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "vsr_task_redeliveries_total", Help: "Runs of tasks started again after an interrupted one (a worker that died, a restart), over the tasks in the store."},
			func() float64 { return float64(s.snapshot(true).reruns) }))
	}
	m.reg.MustRegister(&taskCollector{s: s, desc: prometheus.NewDesc("vsr_tasks",
		"Tasks in the store by status.", []string{"status"}, nil)})
	if _, ok := s.placement.streamRunner(); ok {
		m.reg.MustRegister(&streamCollector{s: s,
			sessions: prometheus.NewDesc("vsr_live_sessions", "Live sessions of this process by status.", []string{"status"}, nil),
			frames: prometheus.NewDesc("vsr_live_frames_total",
				"Frames of the live sessions of this process: in from their sources, out to their sinks, dropped (--overload drop).", []string{"kind"}, nil)})
	}
	// Only where there is GPU memory to report (not on a CPU server).
	if mr, ok := s.runner.(MemoryReporter); ok && hasGPU(mr) {
		m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "vsr_gpu_memory_bytes", Help: "GPU memory held by the engine (peak of its pool)."},
			func() float64 {
				n, _ := mr.GPUMemoryBytes()
				return float64(n)
			}))
	}
	return m
}

// taskCollector counts the stored tasks by status at scrape time.
type taskCollector struct {
	s    *Service
	desc *prometheus.Desc
}

func (c *taskCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *taskCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.s.snapshot(true).byStatus
	for _, st := range Statuses {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n[st]), string(st))
	}
}

func hasGPU(mr MemoryReporter) bool {
	_, ok := mr.GPUMemoryBytes()
	return ok
}

// workerCollector reports the connected workers and each one's running
// tasks at scrape time, from one listing of the worker bucket.
type workerCollector struct {
	s              *Service
	count, running *prometheus.Desc
}

func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.running
}

func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	ws, _ := c.s.wq.Workers()
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(len(ws)))
	for _, w := range ws {
		ch <- prometheus.MustNewConstMetric(c.running, prometheus.GaugeValue, float64(len(w.Running)), w.Name, w.Devices)
	}
}

// streamCollector reports the live sessions at scrape time, from their
// latest statistics.
type streamCollector struct {
	s                *Service
	sessions, frames *prometheus.Desc
}

func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.sessions; ch <- c.frames }

func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	byStatus := map[string]int{"running": 0, "finished": 0, "stopped": 0, "failed": 0}
	var in, out, dropped int
	c.s.live.mu.Lock()
	for _, ls := range c.s.live.byID {
		byStatus[ls.Status]++
		in, out, dropped = in+ls.Stats.InFrames, out+ls.Stats.OutFrames, dropped+ls.Stats.Dropped
	}
	c.s.live.mu.Unlock()
	for st, n := range byStatus {
		ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(n), st)
	}
	for kind, n := range map[string]int{"in": in, "out": out, "dropped": dropped} {
		ch <- prometheus.MustNewConstMetric(c.frames, prometheus.CounterValue, float64(n), kind)
	}
}
