package parallel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

func cpus(n int) []backend.Backend {
	devs := make([]backend.Backend, n)
	for i := range devs {
		devs[i] = cpu.New(1)
	}
	return devs
}

// values makes rank r's test tensor: values that name the rank and the
// position.
func values(r, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r*1000 + i)
	}
	return v
}

// onRanks runs f on every rank's goroutine at once and returns the first
// error.
func onRanks(ranks []*Rank, f func(r int) error) error {
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, rk := range ranks {
		wg.Add(1)
		rk.Go(func() {
			defer wg.Done()
			errs[i] = f(i)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// testExchanges runs a ring exchange, AllGather and AllToAll over devs and
// checks every value that arrives.
func testExchanges(t *testing.T, devs []backend.Backend) *Local {
	t.Helper()
	n := len(devs)
	ranks := NewRanks(n)
	defer func() {
		for _, r := range ranks {
			r.Stop()
		}
	}()
	tr := NewLocal(devs)
	ctx := context.Background()
	s := backend.Shape{N: 1, H: 3, W: 5, C: 8}
	// check compares got with rank from's values as b stores them.
	check := func(got backend.Tensor, b backend.Backend, from int) error {
		v, err := b.Download(got)
		if err != nil {
			return err
		}
		w, err := b.Upload(s, values(from, s.Elems()))
		if err != nil {
			return err
		}
		want, err := b.Download(w)
		w.Free()
		if err != nil {
			return err
		}
		if !slices.Equal(v, want) || got.Shape() != s {
			return fmt.Errorf("got %v from rank %d, want its values", got.Shape(), from)
		}
		return nil
	}
	err := onRanks(ranks, func(r int) error {
		b := devs[r]
		x, err := b.Upload(s, values(r, s.Elems()))
		if err != nil {
			return err
		}
		defer x.Free()
		// Three rounds of send to rank+1, receive from rank-1.
		for round := range 3 {
			tag := fmt.Sprint("ring", round)
			if err := tr.Send(ctx, r, (r+1)%n, tag, x); err != nil {
				return err
			}
			y, err := tr.Recv(ctx, r, (r+n-1)%n, tag)
			if err != nil {
				return err
			}
			if err := check(y, b, (r+n-1)%n); err != nil {
				return err
			}
			y.Free()
		}
		g := Group{Tr: tr, Ranks: iota(n), Me: r}
		all, err := g.AllGather(ctx, "gather", x)
		if err != nil {
			return err
		}
		for j, y := range all {
			if err := check(y, b, j); err != nil {
				return fmt.Errorf("all-gather: %w", err)
			}
			if j != r {
				y.Free()
			}
		}
		parts := make([]backend.Tensor, n)
		for j := range parts {
			if parts[j], err = b.Upload(s, values(r*10+j, s.Elems())); err != nil {
				return err
			}
		}
		got, err := g.AllToAll(ctx, "a2a", parts)
		if err != nil {
			return err
		}
		for j, y := range got {
			if err := check(y, b, j*10+r); err != nil {
				return fmt.Errorf("all-to-all: %w", err)
			}
		}
		for j := range parts {
			parts[j].Free()
			if j != r {
				got[j].Free()
			}
		}
		tr.Flush(r, nil)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestExchangesCPU(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			tr := testExchanges(t, cpus(n))
			for r, st := range tr.Stats() {
				// 3 ring messages, n-1 gathered, n-1 exchanged, each of
				// 120 float32 values, all through the host.
				want := int64(3 + 2*(n-1))
				if st.Sent != want || st.SentValues != want*120 || st.SentBytes != want*480 || st.Staged != want {
					t.Errorf("rank %d stats %+v, want %d messages of 120 values", r, st, want)
				}
			}
		})
	}
}

// TestProtocolErrors: a tag that does not match is an error, a cancelled
// context ends a Recv that would wait forever, and a stopped rank refuses
// work.
func TestProtocolErrors(t *testing.T) {
	devs := cpus(2)
	tr := NewLocal(devs)
	ctx := context.Background()
	x, _ := devs[0].Upload(backend.Shape{N: 1, H: 1, W: 1, C: 1}, []float32{1})
	if err := tr.Send(ctx, 0, 1, "a", x); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Recv(ctx, 1, 0, "b"); err == nil || !strings.Contains(err.Error(), `expected "b" from rank 0, got "a"`) {
		t.Errorf("tag mismatch: %v", err)
	}
	if err := tr.Send(ctx, 0, 0, "a", x); err == nil {
		t.Error("a message to itself was accepted")
	}
	if err := tr.Send(ctx, 0, 2, "a", x); err == nil {
		t.Error("a message to rank 2 of 2 was accepted")
	}
	cctx, cancel := context.WithCancelCause(ctx)
	go func() {
		time.Sleep(20 * time.Millisecond)
		cancel(errors.New("rank 0 failed"))
	}()
	if _, err := tr.Recv(cctx, 1, 0, "c"); err == nil || err.Error() != "rank 0 failed" {
		t.Errorf("Recv after cancel: %v", err)
	}
	r := NewRanks(1)[0]
	r.Stop()
	if err := r.Do(func() error { return nil }); !errors.Is(err, ErrStopped) {
		t.Errorf("work on a stopped rank: %v", err)
	}
}

// iota returns 0..n-1.
func iota(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}
