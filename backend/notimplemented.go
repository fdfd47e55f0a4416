package backend

import (
	"errors"
	"fmt"
)

// ErrNotImplemented is the error a backend returns for an op it does not
// implement (yet). Test for it with errors.Is.
var ErrNotImplemented = errors.New("op not implemented")

// NotImplemented answers every op of Backend with an error wrapping
// ErrNotImplemented and naming the op and the device, so that a new
// backend can grow op by op: embed it, set Device, and override the ops
// one at a time; the ops not yet written fail clearly at run time instead
// of the type failing to compile.
//
//	type Backend struct {
//		backend.NotImplemented
//		...
//	}
//
//	func Open(device string, _ backend.Options) (backend.Backend, error) {
//		return &Backend{NotImplemented: backend.NotImplemented{Device: device}}, nil
//	}
//
// Name returns Device and Close returns nil; every other op fails.
// NotImplemented implements Backend only, no capability (see the package
// doc): a backend gains a capability by implementing all of its methods,
// and until it does, callers take the capability's fallback.
type NotImplemented struct {
	// Device is the device name, as Name returns it ("mydev:0").
	Device string
}

// Unsupported returns the error of op on device: "backend mydev:0: Conv2D:
// op not implemented", wrapping ErrNotImplemented. It is the error a
// growing backend returns for the cases of an op it does not cover yet (a
// mode, an activation, a pixel format), so callers can tell them apart
// with errors.Is.
func Unsupported(device, op string) error {
	return fmt.Errorf("backend %s: %s: %w", device, op, ErrNotImplemented)
}

func (n NotImplemented) err(op string) error { return Unsupported(n.Device, op) }

// Name returns n.Device.
func (n NotImplemented) Name() string { return n.Device }

// Close releases nothing and returns nil.
func (n NotImplemented) Close() error { return nil }

func (n NotImplemented) Upload(Shape, []float32) (Tensor, error) { return nil, n.err("Upload") }
func (n NotImplemented) Download(Tensor) ([]float32, error)      { return nil, n.err("Download") }
func (n NotImplemented) PrepareConv(out, in, kh, kw int, w, bias []float32) (Weights, error) {
	return nil, n.err("PrepareConv")
}
func (n NotImplemented) Conv2D(Tensor, Weights, ConvParams, Activation) (Tensor, error) {
	return nil, n.err("Conv2D")
}
func (n NotImplemented) Conv2DAdd(Tensor, Weights, ConvParams, Activation, Tensor) (Tensor, error) {
	return nil, n.err("Conv2DAdd")
}
func (n NotImplemented) Activate(Tensor, Activation) (Tensor, error) { return nil, n.err("Activate") }
func (n NotImplemented) PixelShuffle(Tensor, int, ShuffleOrder) (Tensor, error) {
	return nil, n.err("PixelShuffle")
}
func (n NotImplemented) Resize(Tensor, ResizeMode, int, int, Tile, Tile) (Tensor, error) {
	return nil, n.err("Resize")
}
func (n NotImplemented) Binary(BinaryOp, Tensor, Tensor) (Tensor, error) {
	return nil, n.err("Binary")
}
func (n NotImplemented) AddScaled(Tensor, float32, Tensor, float32) (Tensor, error) {
	return nil, n.err("AddScaled")
}
func (n NotImplemented) CopyChannels(Tensor, int, Tensor) error { return n.err("CopyChannels") }
func (n NotImplemented) Channels(Tensor, int, int) (Tensor, error) {
	return nil, n.err("Channels")
}
func (n NotImplemented) Band(Tensor, int, int) (Tensor, error) { return nil, n.err("Band") }
func (n NotImplemented) CopyBand(Tensor, int, Tensor) error    { return n.err("CopyBand") }
func (n NotImplemented) PixelUnshuffle(Tensor, int) (Tensor, error) {
	return nil, n.err("PixelUnshuffle")
}
func (n NotImplemented) CropPad(Tensor, int, int) (Tensor, error) { return nil, n.err("CropPad") }
func (n NotImplemented) Frames(Tensor, int, int) (Tensor, error)  { return nil, n.err("Frames") }
func (n NotImplemented) ConcatFrames(...Tensor) (Tensor, error) {
	return nil, n.err("ConcatFrames")
}
func (n NotImplemented) Empty(Shape) (Tensor, error)          { return nil, n.err("Empty") }
func (n NotImplemented) CopyFrames(Tensor, int, Tensor) error { return n.err("CopyFrames") }
func (n NotImplemented) ConcatPrev(Tensor, Tensor) (Tensor, error) {
	return nil, n.err("ConcatPrev")
}
func (n NotImplemented) FoldFrames(Tensor, int) (Tensor, error) { return nil, n.err("FoldFrames") }
func (n NotImplemented) UnfoldFrames(Tensor, int) (Tensor, error) {
	return nil, n.err("UnfoldFrames")
}
func (n NotImplemented) FromRGB8([]byte, int, int, int) (Tensor, error) {
	return nil, n.err("FromRGB8")
}
func (n NotImplemented) ToRGB8(Tensor, []byte) error { return n.err("ToRGB8") }
func (n NotImplemented) FromRGB16([]byte, int, int, int) (Tensor, error) {
	return nil, n.err("FromRGB16")
}
func (n NotImplemented) ToRGB16(Tensor, []byte) error { return n.err("ToRGB16") }

var _ Backend = NotImplemented{}
