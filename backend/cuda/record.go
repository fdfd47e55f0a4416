package cuda

import (
	"errors"
	"fmt"
	"math"
	"os"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

var _ backend.Recorder = (*Backend)(nil)

// recording is a CUDA graph of ops captured from the compute stream, and
// the device word the graph's RoPE tables read their offset from.
type recording struct {
	b      *Backend
	exec   *cu.GraphExec
	offset *block // int32: the RoPE offset of the replay being queued
	// tables are the RoPE tables made inside the graph while recording,
	// by grid and head size (Offset 0); the graph frees them at its end.
	tables map[backend.RoPE]*block
}

// Record captures the work f queues on the compute stream into a CUDA
// graph. Allocations f makes from the stream-ordered pool become the
// graph's own memory nodes, whose memory the driver keeps for its replays,
// so recording needs that pool (not VSR_CUDA_POOL=cache).
// VSR_CUDA_GRAPHS=0 turns recording off, for comparisons.
func (b *Backend) Record(f func() error) (backend.Recording, error) {
	switch {
	case os.Getenv("VSR_CUDA_GRAPHS") == "0":
		return nil, errors.New("cuda: recording is turned off (VSR_CUDA_GRAPHS=0)")
	case b.pool.mp == nil:
		return nil, errors.New("cuda: recording needs the stream-ordered memory pool")
	case b.rec != nil:
		return nil, errors.New("cuda: already recording")
	}
	off, err := b.pool.get(4)
	if err != nil {
		return nil, err
	}
	r := &recording{b: b, offset: off, tables: map[backend.RoPE]*block{}}
	recorded := false
	defer func() {
		if !recorded { // an error or a panic in f
			b.pool.put(off)
		}
	}()
	if err := r.capture(f); err != nil {
		return nil, fmt.Errorf("cuda graph: %w", err)
	}
	recorded = true
	return r, nil
}

// capture records f into r.exec. Relaxed capture leaves the driver calls
// of other goroutines (frame copies, waits) alone; the backend's compute
// stream has no other user meanwhile. The capture ends however f returns,
// a panic included (the service recovers from those and goes on).
func (r *recording) capture(f func() error) (err error) {
	b := r.b
	unlock, err := b.ctx.LockThread()
	if err != nil {
		return err
	}
	defer unlock()
	if err := b.compute.BeginCapture(cu.CaptureRelaxed); err != nil {
		return err
	}
	b.rec = r
	b.pool.setCapturing(true)
	returned := false
	defer func() {
		for _, t := range r.tables {
			b.pool.put(t)
		}
		r.tables, b.rec = nil, nil
		b.pool.setCapturing(false)
		g, endErr := b.compute.EndCapture()
		if err = errors.Join(err, endErr); err != nil || !returned {
			if g != nil {
				g.Close()
			}
			return
		}
		defer g.Close()
		r.exec, err = g.Instantiate()
	}()
	err = f()
	returned = true
	return err
}

// Replay queues the recorded work on the compute stream with RoPE offset
// offset.
func (r *recording) Replay(offset int) error {
	if r.exec == nil {
		return errors.New("cuda graph: replay after Free")
	}
	if offset < 0 || offset > math.MaxInt32 {
		return fmt.Errorf("cuda graph: RoPE offset %d", offset)
	}
	if err := r.b.compute.Memset32(r.offset.ptr, uint32(offset), 1); err != nil {
		return err
	}
	err := r.exec.Launch(r.b.compute)
	if errors.Is(err, cu.ErrOutOfMemory) { // give unused memory back and try once more
		r.b.pool.mu.Lock()
		r.b.pool.release()
		r.b.pool.mu.Unlock()
		err = r.exec.Launch(r.b.compute)
	}
	if errors.Is(err, cu.ErrOutOfMemory) {
		return fmt.Errorf("GPU out of memory for a recorded CUDA graph: use a smaller output size, or VSR_CUDA_GRAPHS=0 to run op by op")
	}
	return err
}

// Free destroys the graph; replays already queued still run.
func (r *recording) Free() {
	if r.exec != nil {
		r.exec.Close()
		r.b.pool.put(r.offset)
		r.exec, r.offset = nil, nil
	}
}
