package compact

import (
	"context"
	"fmt"

	"github.com/vsr-dev/vsr/backend"
)

// Engine drives a Graph for a streaming pipeline. On a Streaming backend
// (a GPU) each batch is staged in a backend Slot: upload, model, format
// conversion and download are queued and overlap with other batches. On
// other backends (the CPU) a batch runs synchronously on host memory, in
// tiles when a frame is large.
type Engine struct {
	M *Graph
	// Tile is the tile size in input pixels for host backends; 0 picks
	// one from Budget.
	Tile int
	// Budget bounds the working set of one frame in bytes when Tile is 0.
	Budget int64
	// Width and Height, when set, are the output size: the model's output
	// is resized to it (bicubic) after super-resolution.
	Width, Height int
}

// DefaultBudget is the per-frame working-set bound used when none is set.
const DefaultBudget = 1 << 30

// OutputSize returns the output size for an input of w x h.
func (r Engine) OutputSize(w, h int) (int, int) {
	if r.Width > 0 && r.Height > 0 {
		return r.Width, r.Height
	}
	return r.M.OutputSize(w, h)
}

// resized returns the model's output y resized to the engine's size, or y.
func (r Engine) resized(y backend.Tensor) (backend.Tensor, error) {
	s := y.Shape()
	if r.Width <= 0 || r.Height <= 0 || (s.W == r.Width && s.H == r.Height) {
		return y, nil
	}
	z, err := r.M.b.Resize(y, backend.Bicubic, r.Height, r.Width, backend.Tile{}, backend.Tile{})
	y.Free()
	return z, err
}

// Device returns the backend's device name.
func (r Engine) Device() string { return r.M.b.Name() }

// NewBatch allocates staging for up to n frames of w x h that come in
// format in (see backend.PixelFormat.CheckInput) and whose results go out in
// format f.
func (r Engine) NewBatch(n, w, h int, in, f backend.PixelFormat) (backend.Batch, error) {
	ow, oh := r.OutputSize(w, h)
	if ow <= 0 {
		return nil, fmt.Errorf("a %dx%d frame is too small for model %s", w, h, r.M.Name)
	}
	if err := f.CheckSize(ow, oh); err != nil {
		return nil, fmt.Errorf("output: %w", err)
	}
	if err := in.CheckInput(); err != nil {
		return nil, err
	}
	if s, ok := r.M.b.(backend.Streaming); ok {
		slot, err := s.NewSlot(n*in.FrameBytes(w, h), n*f.FrameBytes(ow, oh))
		if err != nil {
			return nil, err
		}
		return &deviceBatch{Slot: slot, in: in, f: f, w: w, h: h}, nil
	}
	// On the host, the model takes and gives RGB (mf) of 16 bits when in
	// or f is wider than 8 bits, else 8: the input converted to it when it
	// differs, the result (rgb) resized (rs) when the engine's size
	// differs, then converted to f (through tmp, RGB of f's depth, for
	// YUV of another depth).
	mw, mh := r.M.OutputSize(w, h)
	mf := in.Model()
	if f.Wide() {
		mf = backend.RGB48
	}
	hb := &hostBatch{in: make([]byte, n*in.FrameBytes(w, h)), out: make([]byte, n*f.FrameBytes(ow, oh)), inf: in, mf: mf, f: f, w: w, h: h, ow: ow, oh: oh, mw: mw, mh: mh}
	if f != mf || mw != ow || mh != oh {
		hb.rgb = make([]byte, n*mf.FrameBytes(mw, mh))
	}
	if f != mf && (mw != ow || mh != oh) {
		hb.rs = make([]byte, n*mf.FrameBytes(ow, oh))
	}
	if in != mf {
		hb.min = make([]byte, n*mf.FrameBytes(w, h))
	}
	if f.Layout != backend.PackedRGB && f.Wide() != mf.Wide() {
		hb.tmp = make([]byte, n*f.Model().FrameBytes(ow, oh))
	}
	return hb, nil
}

// Start begins upscaling the first k frames of b. On a Streaming backend
// it returns once the work is queued; b.Wait blocks until it is done.
func (r Engine) Start(ctx context.Context, b backend.Batch, k int) error {
	switch b := b.(type) {
	case *deviceBatch:
		x, err := b.Input(k, b.h, b.w, b.in)
		if err != nil {
			return err
		}
		y, err := r.M.Forward(x)
		x.Free()
		if err == nil {
			y, err = r.resized(y)
		}
		if err != nil {
			return err
		}
		_, err = backend.Output(b, y, b.f)
		y.Free()
		return err
	case *hostBatch:
		tile := r.Tile
		if tile == 0 {
			budget := r.Budget
			if budget <= 0 {
				budget = DefaultBudget
			}
			tile = r.M.AutoTile(b.w, b.h*k, budget)
		}
		rgb := b.out
		if b.rgb != nil {
			rgb = b.rgb
		}
		rgb = rgb[:k*b.mf.FrameBytes(b.mw, b.mh)]
		in := b.in[:k*b.inf.FrameBytes(b.w, b.h)]
		if b.min != nil {
			if err := r.convertHost(b.inf, b.mf, in, k, b.w, b.h, b.min[:k*b.mf.FrameBytes(b.w, b.h)]); err != nil {
				return err
			}
			in = b.min[:k*b.mf.FrameBytes(b.w, b.h)]
		}
		if err := r.M.UpscaleFormat(ctx, b.mf, in, k, b.w, b.h, rgb, tile); err != nil {
			return err
		}
		if b.mw != b.ow || b.mh != b.oh {
			dst := b.out
			if b.rs != nil {
				dst = b.rs
			}
			dst = dst[:k*b.mf.FrameBytes(b.ow, b.oh)]
			if err := r.resizeHost(b.mf, rgb, k, b.mw, b.mh, dst); err != nil {
				return err
			}
			rgb = dst
		}
		if b.f == b.mf {
			return nil
		}
		if b.f.Layout == backend.PackedRGB { // rgb24 <-> rgb48
			return r.convertHost(b.mf, b.f, rgb, k, b.ow, b.oh, b.out[:k*b.f.FrameBytes(b.ow, b.oh)])
		}
		if b.tmp != nil { // YUV of another depth than the model's RGB
			tf := b.f.Model()
			tmp := b.tmp[:k*tf.FrameBytes(b.ow, b.oh)]
			if err := r.convertHost(b.mf, tf, rgb, k, b.ow, b.oh, tmp); err != nil {
				return err
			}
			rgb = tmp
		}
		return backend.RGBToYUV(b.out, rgb, b.f, k, b.ow, b.oh)
	}
	return fmt.Errorf("compact: batch %T was not made by this runner", b)
}

type deviceBatch struct {
	backend.Slot
	in, f backend.PixelFormat
	w, h  int
}

type hostBatch struct {
	in, out, rgb []byte
	min          []byte              // the input as mf, when in holds YUV
	inf, mf, f   backend.PixelFormat // the batch's input, the model's RGB, the output
	w, h, ow, oh int
	mw, mh       int    // the model's output size, before any resize
	rs           []byte // the resized RGB frames, when out holds another format
	tmp          []byte // the RGB frames at f's depth, when f is YUV of another
}

// resizeHost resizes n frames of w x h in format f (RGB24 or RGB48) to
// the engine's size in out, on the model's (host) backend.
func (r Engine) resizeHost(f backend.PixelFormat, rgb []byte, n, w, h int, out []byte) error {
	x, err := backend.FromFrames(r.M.b, rgb, f, n, h, w)
	if err != nil {
		return err
	}
	y, err := r.resized(x)
	if err != nil {
		return err
	}
	defer y.Free()
	return backend.ToFrames(r.M.b, y, f, out)
}

// convertHost converts n frames of w x h from input format in to format f
// in out.
func (r Engine) convertHost(in, f backend.PixelFormat, rgb []byte, n, w, h int, out []byte) error {
	x, err := backend.FromFrames(r.M.b, rgb, in, n, h, w)
	if err != nil {
		return err
	}
	defer x.Free()
	return backend.ToFrames(r.M.b, x, f, out)
}

func (b *hostBatch) In() []byte  { return b.in }
func (b *hostBatch) Out() []byte { return b.out }
func (b *hostBatch) Wait() error { return nil }
func (b *hostBatch) Free()       {}
