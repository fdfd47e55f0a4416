package backend

import "fmt"

// PixelFormat is the layout of 8-bit frames entering or leaving a backend.
type PixelFormat int

const (
	// RGB24 is packed 8-bit RGB, w*h*3 bytes a frame.
	RGB24 PixelFormat = iota
	// YUV420P is planar BT.601 limited-range YCbCr with 2x2 chroma
	// subsampling (ffmpeg's yuv420p), w*h*3/2 bytes a frame; w and h even.
	YUV420P
)

func (f PixelFormat) String() string {
	switch f {
	case RGB24:
		return "rgb24"
	case YUV420P:
		return "yuv420p"
	}
	return fmt.Sprintf("PixelFormat(%d)", int(f))
}

// FrameBytes is the size of one w x h frame in format f.
func (f PixelFormat) FrameBytes(w, h int) int {
	if f == YUV420P {
		return w*h + 2*(w/2)*(h/2)
	}
	return w * h * 3
}

// Streaming is implemented by backends with their own memory and
// asynchronous queues (GPUs). A Slot stages one batch of frames: the
// caller fills In, Input uploads it, model ops run, Put converts the
// result and Send starts the copy back, and Wait blocks until Out holds it.
// Transfers run on a copy queue, overlapping compute on other slots.
type Streaming interface {
	Backend
	// NewSlot allocates host memory suited to fast transfers (page-locked)
	// and device memory for inBytes in and outBytes out.
	NewSlot(inBytes, outBytes int) (Slot, error)
}

// Batch is host staging for a group of frames on their way through a
// model: the caller fills In, starts the work, and reads Out after Wait.
type Batch interface {
	// In is the host input buffer.
	In() []byte
	// Out is the host output buffer, valid after Wait.
	Out() []byte
	// Wait blocks until Out holds the result of the last work started.
	Wait() error
	// Free releases the memory. Work using it must be finished.
	Free()
}

// Slot is one batch's staging buffers on a Streaming backend. Input, Put
// and Send are called from the goroutine that drives the backend; Wait may
// be called from another.
type Slot interface {
	Batch
	// Input starts copying n RGB24 frames of w x h from In to the device
	// and returns them as an (n h w 3) tensor in [0,1], ordered after the
	// copy.
	Input(n, h, w int) (Tensor, error)
	// Put converts t, an (n h w 3) tensor in [0,1], to 8-bit frames of
	// format f at output frames [at, at+n), without copying them out:
	// results computed piece by piece go there without being held
	// together first.
	Put(t Tensor, f PixelFormat, at int) error
	// Send starts copying the first n output frames (w x h, format f) to
	// Out and returns the byte count.
	Send(n, w, h int, f PixelFormat) (int, error)
}

// Output converts t, an (n h w 3) tensor in [0,1], to 8-bit frames of
// format f in s and starts copying them to Out. It returns the byte count.
func Output(s Slot, t Tensor, f PixelFormat) (int, error) {
	if err := s.Put(t, f, 0); err != nil {
		return 0, err
	}
	sh := t.Shape()
	return s.Send(sh.N, sh.W, sh.H, f)
}

// ycc converts 8-bit RGB values (as floats) to BT.601 limited-range Y, Cb
// and Cr, rounded to nearest; GPU kernels use the same float32 arithmetic.
func luma(r, g, b float32) byte {
	return clampByte(16 + (65.481*r+128.553*g+24.966*b)/255 + 0.5)
}

func chromaB(r, g, b float32) byte {
	return clampByte(128 + (-37.797*r-74.203*g+112.0*b)/255 + 0.5)
}

func chromaR(r, g, b float32) byte {
	return clampByte(128 + (112.0*r-93.786*g-18.214*b)/255 + 0.5)
}

func clampByte(v float32) byte {
	return byte(min(max(v, 0), 255))
}

// RGBToYUV420 converts n packed RGB24 frames of w x h (both even) to
// yuv420p in dst (n * YUV420P.FrameBytes(w, h) bytes): BT.601 limited
// range, chroma the mean of each 2x2 block.
func RGBToYUV420(dst, rgb []byte, n, w, h int) {
	fs := YUV420P.FrameBytes(w, h)
	for f := 0; f < n; f++ {
		src := rgb[f*w*h*3:]
		Y := dst[f*fs:]
		U := Y[w*h:]
		V := U[(w/2)*(h/2):]
		for by := 0; by < h/2; by++ {
			for bx := 0; bx < w/2; bx++ {
				var sr, sg, sb float32
				for dy := 0; dy < 2; dy++ {
					for dx := 0; dx < 2; dx++ {
						y, x := 2*by+dy, 2*bx+dx
						p := src[(y*w+x)*3:]
						r, g, b := float32(p[0]), float32(p[1]), float32(p[2])
						Y[y*w+x] = luma(r, g, b)
						sr += r
						sg += g
						sb += b
					}
				}
				sr, sg, sb = sr*0.25, sg*0.25, sb*0.25
				U[by*(w/2)+bx] = chromaB(sr, sg, sb)
				V[by*(w/2)+bx] = chromaR(sr, sg, sb)
			}
		}
	}
}

// ShuffleAdder is implemented by backends with a fused kernel for
// PixelShuffle(x, r) + Resize(base, Nearest, x r), the tail of
// SRVGGNetCompact. Results must equal the unfused ops exactly.
type ShuffleAdder interface {
	ShuffleAddNearest(x, base Tensor, r int, order ShuffleOrder) (Tensor, error)
}

// NewSlot returns a Slot for b: the backend's own when it is Streaming,
// else host buffers whose Input and Put convert synchronously.
func NewSlot(b Backend, inBytes, outBytes int) (Slot, error) {
	if s, ok := b.(Streaming); ok {
		return s.NewSlot(inBytes, outBytes)
	}
	return &hostSlot{b: b, in: make([]byte, inBytes), out: make([]byte, outBytes)}, nil
}

// hostSlot is a Slot in Go memory for backends without their own queues.
type hostSlot struct {
	b       Backend
	in, out []byte
	n       int
}

func (s *hostSlot) In() []byte  { return s.in }
func (s *hostSlot) Out() []byte { return s.out[:s.n] }
func (s *hostSlot) Wait() error { return nil }
func (s *hostSlot) Free()       {}

func (s *hostSlot) Input(n, h, w int) (Tensor, error) {
	if n*h*w*3 > len(s.in) {
		return nil, fmt.Errorf("slot holds %d input bytes, %d frames of %dx%d need %d", len(s.in), n, w, h, n*h*w*3)
	}
	return s.b.FromRGB8(s.in[:n*h*w*3], n, h, w)
}

func (s *hostSlot) Put(t Tensor, f PixelFormat, at int) error {
	sh := t.Shape()
	fs := f.FrameBytes(sh.W, sh.H)
	if at < 0 || (at+sh.N)*fs > len(s.out) {
		return fmt.Errorf("slot holds %d output bytes, %v as %v from frame %d needs %d", len(s.out), sh, f, at, (at+sh.N)*fs)
	}
	dst := s.out[at*fs : (at+sh.N)*fs]
	if f == RGB24 {
		return s.b.ToRGB8(t, dst)
	}
	rgb := make([]byte, sh.Elems())
	if err := s.b.ToRGB8(t, rgb); err != nil {
		return err
	}
	RGBToYUV420(dst, rgb, sh.N, sh.W, sh.H)
	return nil
}

func (s *hostSlot) Send(n, w, h int, f PixelFormat) (int, error) {
	size := n * f.FrameBytes(w, h)
	if size > len(s.out) || n < 0 {
		return 0, fmt.Errorf("slot holds %d output bytes, %d frames of %dx%d as %v need %d", len(s.out), n, w, h, f, size)
	}
	s.n = size
	return size, nil
}
