package serve

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSubmitToStart measures the time from a task's submission to
// its runner's start: bbolt with the worker in the process, and NATS
// JetStream (an embedded server) with the API alone and one worker taking
// the task from the work queue. One task at a time (each finishes before
// the next is submitted), so the figure is the queue's own latency:
//
//	go test ./serve -run XXX -bench SubmitToStart -benchtime 100x
func BenchmarkSubmitToStart(b *testing.B) {
	for _, store := range []string{"bolt", "jetstream"} {
		b.Run(store, func(b *testing.B) {
			run := newFake(false)
			cfg, open := Config{Data: b.TempDir()}, New
			if store == "jetstream" {
				cfg.NATS, open = &NATS{Listen: "127.0.0.1:-1"}, NewRemote
			}
			api, err := open(cfg, run)
			if err != nil {
				b.Fatal(err)
			}
			defer api.Close()
			if store == "jetstream" {
				w, err := NewWorker(Config{Data: b.TempDir(), NATS: workerNATS(b, api),
					InputRoot: api.InputRoot(), OutputRoot: api.OutputRoot()}, run)
				if err != nil {
					b.Fatal(err)
				}
				defer w.Close()
			}
			in := filepath.Join(api.InputRoot(), "a.mp4")
			if err := os.WriteFile(in, []byte("video"), 0o644); err != nil {
				b.Fatal(err)
			}
			var total time.Duration
			b.ResetTimer()
			for i := range b.N {
				tk := &Task{ID: newID(), Input: in, Output: filepath.Join(api.OutputRoot(), fmt.Sprintf("o%d.mp4", i))}
				start := time.Now()
				if err := api.submit(tk, ""); err != nil {
					b.Fatal(err)
				}
				<-run.started
				total += time.Since(start)
				for { // finished before the next one
					if t, _ := api.get(tk.ID); t.Status.Final() {
						break
					}
					time.Sleep(time.Millisecond)
				}
			}
			b.ReportMetric(float64(total.Microseconds())/float64(b.N), "µs/start")
		})
	}
}

// BenchmarkRedelivery measures how long a task of a worker that stops
// answering (its connection to NATS closed) takes to start on another
// worker, with an ack wait of 1 s:
//
//	go test ./serve -run XXX -bench Redelivery -benchtime 5x
func BenchmarkRedelivery(b *testing.B) {
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		api, err := NewRemote(Config{Data: b.TempDir(), NATS: &NATS{Listen: "127.0.0.1:-1"}}, newFake(false))
		if err != nil {
			b.Fatal(err)
		}
		worker := func() (*Service, *fakeRunner) {
			f := newFake(true)
			w, err := NewWorker(Config{Data: b.TempDir(), NATS: workerNATS(b, api), AckWait: time.Second,
				InputRoot: api.InputRoot(), OutputRoot: api.OutputRoot()}, f)
			if err != nil {
				b.Fatal(err)
			}
			return w, f
		}
		first, f1 := worker()
		in := filepath.Join(api.InputRoot(), "a.mp4")
		os.WriteFile(in, []byte("video"), 0o644)
		if err := api.submit(&Task{ID: newID(), Input: in, Output: filepath.Join(api.OutputRoot(), fmt.Sprint(i, ".mp4"))}, ""); err != nil {
			b.Fatal(err)
		}
		<-f1.started
		second, f2 := worker()
		b.StartTimer()
		start := time.Now()
		jsOf(first).nc.Close()
		<-f2.started
		total += time.Since(start)
		b.StopTimer()
		f2.release <- struct{}{}
		f1.release <- struct{}{}
		second.Close()
		first.Close()
		api.Close()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/redelivery")
}
