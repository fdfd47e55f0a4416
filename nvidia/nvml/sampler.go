package nvml

import (
	"context"
	"sync"
	"time"
)

// DefaultInterval is the Sampler's polling period when none is given.
const DefaultInterval = 10 * time.Millisecond

// Sample is one poll: device memory in use and GPU utilization.
type Sample struct {
	MemUsed uint64 // device memory in use, bytes
	GPUUtil uint32 // GPU utilization, percent
}

// SamplerStats summarizes the samples taken so far.
type SamplerStats struct {
	// Samples is the number of successful polls; Errors the failed ones,
	// and Err the last failure.
	Samples, Errors int
	Err             error // last sampling error
	// StartMemUsed is the memory in use at the first sample and
	// PeakMemUsed the most seen; the work's own peak is about the
	// difference.
	StartMemUsed, PeakMemUsed uint64
	// MeanGPUUtil is the mean of the sampled GPU utilization percentages,
	// MaxGPUUtil the highest.
	MeanGPUUtil float64
	MaxGPUUtil  uint32 // percent
	// Duration is the time from start to the last sample.
	Duration time.Duration
}

// Sampler polls a device in its own goroutine until Stop is called or its
// context ends. Its methods may be called from any goroutine.
type Sampler struct {
	sample   func() (Sample, error)
	interval time.Duration
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	start    time.Time

	mu      sync.Mutex
	st      SamplerStats
	utilSum float64
}

// StartSampler starts polling d's memory used and GPU utilization every
// interval (DefaultInterval if zero) until Stop or ctx's end.
func (d Device) StartSampler(ctx context.Context, interval time.Duration) *Sampler {
	return NewSampler(ctx, interval, func() (Sample, error) {
		m, err := d.Memory()
		if err != nil {
			return Sample{}, err
		}
		u, err := d.Utilization()
		if err != nil {
			return Sample{}, err
		}
		return Sample{MemUsed: m.Used, GPUUtil: u.GPU}, nil
	})
}

// NewSampler starts a sampler over any sample function; StartSampler uses
// it with NVML, tests with a fake. The first sample is taken at once and a
// last one when the sampler stops.
func NewSampler(ctx context.Context, interval time.Duration, sample func() (Sample, error)) *Sampler {
	if interval <= 0 {
		interval = DefaultInterval
	}
	s := &Sampler{
		sample:   sample,
		interval: interval,
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		start:    time.Now(),
	}
	go s.run(ctx)
	return s
}

func (s *Sampler) run(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	s.poll()
	for {
		select {
		case <-ctx.Done():
			s.poll()
			return
		case <-s.stop:
			s.poll()
			return
		case <-t.C:
			s.poll()
		}
	}
}

func (s *Sampler) poll() {
	v, err := s.sample()
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.st.Errors++
		s.st.Err = err
		return
	}
	if s.st.Samples == 0 {
		s.st.StartMemUsed = v.MemUsed
	}
	s.st.Samples++
	s.st.PeakMemUsed = max(s.st.PeakMemUsed, v.MemUsed)
	s.st.MaxGPUUtil = max(s.st.MaxGPUUtil, v.GPUUtil)
	s.utilSum += float64(v.GPUUtil)
	s.st.MeanGPUUtil = s.utilSum / float64(s.st.Samples)
	s.st.Duration = now.Sub(s.start)
}

// Stats returns the statistics so far; the sampler keeps running.
func (s *Sampler) Stats() SamplerStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Stop ends the polling, waits for the goroutine to exit and returns the
// final statistics. It may be called more than once.
func (s *Sampler) Stop() SamplerStats {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return s.Stats()
}

// Done is closed when the sampler's goroutine has exited (after Stop or
// the end of its context).
func (s *Sampler) Done() <-chan struct{} { return s.done }
