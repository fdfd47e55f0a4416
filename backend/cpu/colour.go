package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/vsr-dev/vsr/backend"
)

// FromRGB8 converts packed RGB24 frames to floats in [0,1].
func (b *Backend) FromRGB8(rgb []byte, n, h, w int) (backend.Tensor, error) {
	s := backend.Shape{N: n, H: h, W: w, C: 3}
	if len(rgb) != s.Elems() {
		return nil, fmt.Errorf("rgb frames %dx%dx%d: got %d bytes", n, w, h, len(rgb))
	}
	t := b.alloc(s)
	for i, v := range rgb {
		t.Data[i] = float32(v) / 255
	}
	return t, nil
}

// ToRGB8 converts floats in [0,1] to RGB24, rounding and clamping.
func (b *Backend) ToRGB8(xt backend.Tensor, dst []byte) error {
	x, err := b.tensor(xt)
	if err != nil {
		return err
	}
	if x.shape.C != 3 || len(dst) != len(x.Data) {
		return fmt.Errorf("to rgb: tensor %v, buffer of %d bytes", x.shape, len(dst))
	}
	for i, v := range x.Data {
		dst[i] = quantize(v)
	}
	return nil
}

// FromRGB16 converts packed RGB48 (little-endian) frames to floats in
// [0,1].
func (b *Backend) FromRGB16(rgb []byte, n, h, w int) (backend.Tensor, error) {
	s := backend.Shape{N: n, H: h, W: w, C: 3}
	if len(rgb) != 2*s.Elems() {
		return nil, fmt.Errorf("rgb48 frames %dx%dx%d: got %d bytes", n, w, h, len(rgb))
	}
	t := b.alloc(s)
	for i := range t.Data {
		t.Data[i] = float32(binary.LittleEndian.Uint16(rgb[2*i:])) / 65535
	}
	return t, nil
}

// ToRGB16 converts floats in [0,1] to RGB48 (little-endian), rounding and
// clamping.
func (b *Backend) ToRGB16(xt backend.Tensor, dst []byte) error {
	x, err := b.tensor(xt)
	if err != nil {
		return err
	}
	if x.shape.C != 3 || len(dst) != 2*len(x.Data) {
		return fmt.Errorf("to rgb48: tensor %v, buffer of %d bytes", x.shape, len(dst))
	}
	for i, v := range x.Data {
		binary.LittleEndian.PutUint16(dst[2*i:], quantize16(v))
	}
	return nil
}

// quantize16 maps [0,1] to 16 bits: round half up, clamp, NaN -> 0.
func quantize16(v float32) uint16 {
	v = v*65535 + 0.5
	if !(v > 0) {
		return 0
	}
	if v >= 65535 {
		return 65535
	}
	return uint16(v)
}

func quantize(v float32) byte {
	v = v*255 + 0.5
	if !(v > 0) { // also NaN
		return 0
	}
	if v >= 255 {
		return 255
	}
	return byte(v)
}
