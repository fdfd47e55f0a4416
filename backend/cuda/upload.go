package cuda

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	cu "github.com/vsr-dev/vsr/nvidia/cuda"
)

// upload32 copies float32 host values into a new device block.
func (b *Backend) upload32(data []float32) (*block, error) { return b.uploadBlock(cu.AsBytes(data)) }

// uploadBlock copies host bytes into a new device block.
func (b *Backend) uploadBlock(data []byte) (*block, error) {
	blk, err := b.pool.get(int64(len(data)))
	if err != nil {
		return nil, err
	}
	if err := b.compute.CopyHtoD(blk.ptr, data); err != nil {
		b.pool.put(blk)
		return nil, err
	}
	return blk, nil
}

// Upload makes a tensor from float32 host data.
func (b *Backend) Upload(s backend.Shape, data []float32) (backend.Tensor, error) {
	if len(data) != s.Elems() {
		return nil, fmt.Errorf("upload %v: got %d values", s, len(data))
	}
	f32, err := b.upload32(data)
	if err != nil {
		return nil, err
	}
	t, err := b.alloc(s)
	if err != nil {
		b.pool.put(f32)
		return nil, err
	}
	t.f32 = f32
	if err := b.launch("from_f32", true, int64(len(data)), f32.ptr, t.ptr(), int64(len(data))); err != nil {
		t.Free()
		return nil, err
	}
	// The host slice must stay valid until the copy ran.
	return t, b.compute.Synchronize()
}

// Download copies a tensor to the host as float32.
func (b *Backend) Download(tt backend.Tensor) ([]float32, error) {
	t, err := b.anyTensor(tt)
	if err != nil {
		return nil, err
	}
	n := int64(t.shape.Elems())
	src := t.ptr()
	if t.dt() != F32 {
		tmp, err := b.pool.get(n * 4)
		if err != nil {
			return nil, err
		}
		defer b.pool.put(tmp)
		if err := b.launch("to_f32", true, n, t.ptr(), tmp.ptr, n); err != nil {
			return nil, err
		}
		src = tmp.ptr
	}
	out := make([]float32, n)
	if err := b.compute.CopyDtoH(cu.AsBytes(out), src); err != nil {
		return nil, err
	}
	return out, b.compute.Synchronize()
}

// DownloadStored copies a tensor of the storage type to the host as it is
// stored (backend.Stored).
func (b *Backend) DownloadStored(tt backend.Tensor) ([]byte, error) {
	t, err := b.anyTensor(tt)
	if err != nil {
		return nil, err
	}
	if t.dt() != b.dtype {
		return nil, fmt.Errorf("download stored: a %v tensor on a device that stores %v", t.dt(), b.dtype)
	}
	out := make([]byte, t.shape.Elems()*b.dtype.size())
	if err := b.compute.CopyDtoH(out, t.ptr()); err != nil {
		return nil, err
	}
	return out, b.compute.Synchronize()
}

// UploadStored makes a tensor from host bytes of the storage type
// (backend.Stored).
func (b *Backend) UploadStored(s backend.Shape, data []byte) (backend.Tensor, error) {
	if len(data) != s.Elems()*b.dtype.size() {
		return nil, fmt.Errorf("upload stored %v: got %d bytes for %d %v values", s, len(data), s.Elems(), b.dtype)
	}
	t, err := b.alloc(s)
	if err != nil {
		return nil, err
	}
	if err := b.compute.CopyHtoD(t.ptr(), data); err != nil {
		t.Free()
		return nil, err
	}
	// The host slice must stay valid until the copy ran.
	return t, b.compute.Synchronize()
}
