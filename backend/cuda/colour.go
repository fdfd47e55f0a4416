package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// frameArgs is the output mode of shuffle_add_nearest for frames of f (1
// RGB24, 3 RGB48, 2 YUV) and to_yuv's arguments: chroma subsampling, 16-bit
// samples, the conversion.
func frameArgs(f backend.PixelFormat) (mode, sub, wide int32, conv cu.Raw) {
	mode, sub = 1, 1
	if f.Wide() {
		mode, wide = 3, 1
	}
	if f.Layout != backend.PackedRGB {
		mode = 2
		if f.Layout == backend.YUV420 {
			sub = 2
		}
	}
	return mode, sub, wide, cu.Raw(f.Conversion().Raw())
}

// FromRGB8 uploads packed RGB24 frames and scales them to [0,1].
func (b *Backend) FromRGB8(rgb []byte, n, h, w int) (backend.Tensor, error) {
	return b.fromFrames(rgb, backend.RGB24, n, h, w)
}

// FromRGB16 uploads packed RGB48 frames and scales them to [0,1].
func (b *Backend) FromRGB16(rgb []byte, n, h, w int) (backend.Tensor, error) {
	return b.fromFrames(rgb, backend.RGB48, n, h, w)
}

func (b *Backend) fromFrames(data []byte, f backend.PixelFormat, n, h, w int) (backend.Tensor, error) {
	s := backend.Shape{N: n, H: h, W: w, C: 3}
	if len(data) != n*f.FrameBytes(w, h) {
		return nil, fmt.Errorf("%s frames %dx%dx%d: got %d bytes", f.Name(), n, w, h, len(data))
	}
	tmp, err := b.pool.get(int64(len(data)))
	if err != nil {
		return nil, err
	}
	defer b.pool.put(tmp)
	if err := b.compute.CopyHtoD(tmp.ptr, data); err != nil {
		return nil, err
	}
	return b.fromFramesDevice(tmp.ptr, f, s, b.dtype)
}

// fromFramesDevice converts frames of input format f at src to a tensor
// of type dt, on the compute stream.
func (b *Backend) fromFramesDevice(src cu.DevicePtr, f backend.PixelFormat, s backend.Shape, dt DType) (*Tensor, error) {
	if err := f.CheckInput(); err != nil {
		return nil, err
	}
	t, err := b.allocAs(s, dt)
	if err != nil {
		return nil, err
	}
	n := int64(s.Elems())
	switch f {
	case backend.RGB24:
		err = b.launchAs("from_rgb8", dt, n, src, t.ptr(), n)
	case backend.RGB48:
		err = b.launchAs("from_rgb16", dt, n, src, t.ptr(), n)
	default:
		sx, sy := f.Subsampling()
		ox, oy := f.Siting.Offsets()
		err = b.launchAs("from_yuv", dt, int64(s.N*s.H*s.W), src, t.ptr(), int32(s.N), int32(s.H), int32(s.W), int32(sx), int32(sy), ox, oy, cu.Raw(f.Inverse().Raw()))
	}
	if err != nil {
		t.Free()
		return nil, err
	}
	return t, nil
}

// toFrames converts t to frames of format f at dst on the compute stream
// and returns the byte count.
func (b *Backend) toFrames(tt backend.Tensor, f backend.PixelFormat, dst cu.DevicePtr) (int, error) {
	ct, ok := tt.(*Tensor)
	if !ok {
		return 0, fmt.Errorf("cuda backend given a %T tensor", tt)
	}
	s := ct.shape
	if s.C != 3 {
		return 0, fmt.Errorf("frames need 3 channels, tensor is %v", s)
	}
	size := s.N * f.FrameBytes(s.W, s.H)
	if err := f.CheckSize(s.W, s.H); err != nil {
		return 0, err
	}
	if ct.lazy != nil && (f.Layout != backend.YUV420 || ct.lazy.r%2 == 0) {
		return size, b.shuffleAddInto(ct.lazy, dst, false, f)
	}
	t, err := b.anyTensor(ct)
	if err != nil {
		return 0, err
	}
	mode, sub, wide, conv := frameArgs(f)
	switch mode {
	case 2:
		return size, b.launchAs("to_yuv", t.dt(), int64(s.N*(s.H/int(sub))*(s.W/int(sub))), t.ptr(), dst, int32(s.N), int32(s.H), int32(s.W), sub, wide, conv)
	case 3:
		n := int64(s.Elems())
		return size, b.launchAs("to_rgb16", t.dt(), n, t.ptr(), dst, n)
	}
	n := int64(s.Elems())
	return size, b.launchAs("to_rgb8", t.dt(), n, t.ptr(), dst, n)
}

// ToRGB8 converts to RGB24 bytes on the device and copies them to dst.
func (b *Backend) ToRGB8(t backend.Tensor, dst []byte) error {
	return b.download(t, backend.RGB24, dst)
}

// ToRGB16 converts to RGB48 words on the device and copies them to dst.
func (b *Backend) ToRGB16(t backend.Tensor, dst []byte) error {
	return b.download(t, backend.RGB48, dst)
}

// download converts t to frames of format f on the device and copies them
// to dst.
func (b *Backend) download(t backend.Tensor, f backend.PixelFormat, dst []byte) error {
	s := t.Shape()
	if s.C != 3 || len(dst) != s.N*f.FrameBytes(s.W, s.H) {
		return fmt.Errorf("to %s: tensor %v, buffer of %d bytes", f.Name(), s, len(dst))
	}
	tmp, err := b.pool.get(int64(len(dst)))
	if err != nil {
		return err
	}
	defer b.pool.put(tmp)
	if _, err := b.toFrames(t, f, tmp.ptr); err != nil {
		return err
	}
	if err := b.compute.CopyDtoH(dst, tmp.ptr); err != nil {
		return err
	}
	return b.compute.Synchronize()
}
