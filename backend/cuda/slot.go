package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// Slot stages one batch of frames: page-locked host buffers for transfers
// at full speed, device buffers, and the events that order the copy and
// compute streams:
//
//	upload:   H2D(in) -> [uploaded]
//	compute:  wait [uploaded] -> [start] model, convert -> [computed]
//	download: wait [computed] -> D2H(out) -> [downloaded]
type Slot struct {
	b                  *Backend
	hin, hout          *cu.HostBuffer
	din, dout          *block
	uploaded, computed *cu.Event
	downloaded         *cu.Event
	start              *cu.Event // timing: compute began
	outBytes           int
	pending            bool   // an output copy was queued and not waited for
	key                [2]int // sizes it was made for, for reuse
}

// maxCachedSlots bounds the slots of one size kept for reuse.
const maxCachedSlots = 32

// NewSlot returns a slot for inBytes of input and outBytes of output. Page-
// locked memory is slow to allocate, so freed slots are kept and handed out
// again to later requests of the same sizes.
func (b *Backend) NewSlot(inBytes, outBytes int) (backend.Slot, error) {
	key := [2]int{inBytes, outBytes}
	b.slotMu.Lock()
	if l := b.slots[key]; len(l) > 0 {
		s := l[len(l)-1]
		b.slots[key] = l[:len(l)-1]
		b.slotMu.Unlock()
		return s, nil
	}
	b.slotMu.Unlock()
	s := &Slot{b: b, key: key}
	err := func() error {
		var err error
		if s.hin, err = b.ctx.AllocHost(inBytes); err != nil {
			return err
		}
		if s.hout, err = b.ctx.AllocHost(outBytes); err != nil {
			return err
		}
		if s.din, err = b.pool.get(int64(inBytes)); err != nil {
			return err
		}
		if s.dout, err = b.pool.get(int64(outBytes)); err != nil {
			return err
		}
		if s.uploaded, err = b.ctx.NewEvent(cu.EventDisableTiming); err != nil {
			return err
		}
		// Writers wait on this one from the host: block instead of
		// spinning, so waiting goroutines leave the CPU to the encoders.
		if s.downloaded, err = b.ctx.NewEvent(cu.EventDisableTiming | cu.EventBlockingSync); err != nil {
			return err
		}
		// Timed events mark the compute span, for the busy fraction.
		if s.start, err = b.ctx.NewEvent(cu.EventDefault); err != nil {
			return err
		}
		s.computed, err = b.ctx.NewEvent(cu.EventDefault)
		return err
	}()
	if err != nil {
		s.release()
		return nil, fmt.Errorf("allocate frame buffers: %w", err)
	}
	return s, nil
}

// In is the page-locked input buffer.
func (s *Slot) In() []byte { return s.hin.Bytes() }

// Out is the page-locked output buffer.
func (s *Slot) Out() []byte { return s.hout.Bytes()[:s.outBytes] }

// Input queues the upload of n frames of input format f and their conversion
// to a tensor on the compute stream, after the upload.
func (s *Slot) Input(n, h, w int, f backend.PixelFormat) (backend.Tensor, error) {
	return s.input(n, h, w, f, s.b.dtype)
}

// input is Input into values of type dt.
func (s *Slot) input(n, h, w int, f backend.PixelFormat, dt DType) (backend.Tensor, error) {
	if err := f.CheckInput(); err != nil {
		return nil, err
	}
	size := n * f.FrameBytes(w, h)
	if size > s.hin.Size() {
		return nil, fmt.Errorf("slot holds %d input bytes, %d frames of %dx%d in %s need %d", s.hin.Size(), n, w, h, f.Name(), size)
	}
	b := s.b
	if err := b.upload.CopyHtoD(s.din.ptr, s.hin.Bytes()[:size]); err != nil {
		return nil, err
	}
	if err := s.uploaded.Record(b.upload); err != nil {
		return nil, err
	}
	if err := b.compute.WaitEvent(s.uploaded); err != nil {
		return nil, err
	}
	if err := s.start.Record(b.compute); err != nil {
		return nil, err
	}
	return b.fromFramesDevice(s.din.ptr, f, backend.Shape{N: n, H: h, W: w, C: 3}, dt)
}

// Put converts t into the device output buffer from frame at on, on the
// compute stream.
func (s *Slot) Put(t backend.Tensor, f backend.PixelFormat, at int) error {
	sh := t.Shape()
	fs := f.FrameBytes(sh.W, sh.H)
	if end := (at + sh.N) * fs; at < 0 || end > int(s.dout.size) || end > s.hout.Size() {
		return fmt.Errorf("slot holds %d output bytes, %v as %v from frame %d needs %d", s.hout.Size(), sh, f, at, end)
	}
	_, err := s.b.toFrames(t, f, s.dout.ptr.Add(at*fs))
	return err
}

// Send starts copying the first n output frames to Out once the compute
// stream has written them.
func (s *Slot) Send(n, w, h int, f backend.PixelFormat) (int, error) {
	size := n * f.FrameBytes(w, h)
	if n < 0 || size > int(s.dout.size) || size > s.hout.Size() {
		return 0, fmt.Errorf("slot holds %d output bytes, %d frames of %dx%d as %v need %d", s.hout.Size(), n, w, h, f, size)
	}
	b := s.b
	s.outBytes, s.pending = size, true
	if err := s.computed.Record(b.compute); err != nil {
		return 0, err
	}
	if err := b.down.WaitEvent(s.computed); err != nil {
		return 0, err
	}
	if err := b.down.CopyDtoH(s.hout.Bytes()[:size], s.dout.ptr); err != nil {
		return 0, err
	}
	return size, s.downloaded.Record(b.down)
}

// Wait blocks until the output is in Out, and records the span the
// compute stream spent on this batch (see Backend.Spans).
func (s *Slot) Wait() error {
	if !s.pending {
		return nil
	}
	s.pending = false
	if err := s.downloaded.Synchronize(); err != nil {
		return err
	}
	start, err1 := cu.ElapsedTime(s.b.epoch, s.start)
	end, err2 := cu.ElapsedTime(s.b.epoch, s.computed)
	if err1 == nil && err2 == nil {
		s.b.spanMu.Lock()
		s.b.spans = append(s.b.spans, Span{Start: start, End: end})
		s.b.spanMu.Unlock()
	}
	return nil
}

// Free gives the slot back to its backend for reuse. Work using it must be
// finished.
func (s *Slot) Free() {
	b := s.b
	b.slotMu.Lock()
	if b.slots != nil && len(b.slots[s.key]) < maxCachedSlots { // nil once closed
		s.pending, s.outBytes = false, 0
		b.slots[s.key] = append(b.slots[s.key], s)
		b.slotMu.Unlock()
		return
	}
	b.slotMu.Unlock()
	s.release()
}

// release frees the slot's buffers and events.
func (s *Slot) release() {
	for _, e := range []*cu.Event{s.uploaded, s.computed, s.downloaded, s.start} {
		if e != nil {
			e.Close()
		}
	}
	if s.din != nil {
		s.b.pool.put(s.din)
	}
	if s.dout != nil {
		s.b.pool.put(s.dout)
	}
	for _, h := range []*cu.HostBuffer{s.hin, s.hout} {
		if h != nil {
			h.Free()
		}
	}
	*s = Slot{b: s.b, key: s.key}
}
