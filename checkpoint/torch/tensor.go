package torch

import (
	"fmt"
	"math"
)

// DType is a tensor's element type, spelled as in safetensors.
type DType string

// The element types of the storages this package reads.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
	F64  DType = "F64"
	I64  DType = "I64"
	I32  DType = "I32"
	I16  DType = "I16"
	I8   DType = "I8"
	U8   DType = "U8"
	BOOL DType = "BOOL"
	// Element types with no typed storage class, saved through
	// torch.UntypedStorage and _rebuild_tensor_v3.
	F8E4M3 DType = "F8_E4M3"
	F8E5M2 DType = "F8_E5M2"
	U16    DType = "U16"
	U32    DType = "U32"
	U64    DType = "U64"
)

// Size is the bytes of one element (0 for an unknown type).
func (d DType) Size() int {
	switch d {
	case F64, I64, U64:
		return 8
	case F32, I32, U32:
		return 4
	case F16, BF16, I16, U16:
		return 2
	case I8, U8, BOOL, F8E4M3, F8E5M2:
		return 1
	}
	return 0
}

// storageTypes maps torch's typed storage class names (torch.FloatStorage,
// also found as torch.cuda.FloatStorage in old files) to their dtype.
var storageTypes = map[string]DType{
	"FloatStorage":    F32,
	"HalfStorage":     F16,
	"BFloat16Storage": BF16,
	"DoubleStorage":   F64,
	"LongStorage":     I64,
	"IntStorage":      I32,
	"ShortStorage":    I16,
	"CharStorage":     I8,
	"ByteStorage":     U8,
	"BoolStorage":     BOOL,
}

// dtypeNames maps the names of torch's dtype objects (torch.float32 is
// pickled as the global torch.float32) to their dtype.
var dtypeNames = map[string]DType{
	"float32": F32, "float": F32,
	"float16": F16, "half": F16,
	"bfloat16": BF16,
	"float64":  F64, "double": F64,
	"int64": I64, "long": I64,
	"int32": I32, "int": I32,
	"int16": I16, "short": I16,
	"int8":   I8,
	"uint8":  U8,
	"bool":   BOOL,
	"uint16": U16, "uint32": U32, "uint64": U64,
	"float8_e4m3fn": F8E4M3, "float8_e5m2": F8E5M2,
}

// Tensor is a tensor read from a torch.save file: its element type, shape
// (outermost first; empty for a scalar) and its elements, contiguous in
// row-major order and little-endian (nil when read with [Options.Header]).
// Data may share memory with other tensors that viewed the same storage:
// treat it as read-only.
type Tensor struct {
	DType DType
	Shape []int
	Data  []byte

	view *view // until the storages are read
}

// storage is one persistent storage: a key into the file's storages, its
// element type and its element count as the pickle declared them, and the
// bytes its tensors reach.
type storage struct {
	key   string
	dtype DType
	numel int64
	// need is the bytes from the storage's start that its tensors' views
	// reach (the largest view end); only these are read.
	need int64
	data []byte // once read: at least need bytes
}

// view is a tensor's place in its storage, in the tensor's elements: end
// is one past the last element it reaches (0 for an empty view).
type view struct {
	st     *storage
	offset int64
	size   []int64
	stride []int64
	end    int64
}

// maxDim bounds every declared tensor dimension and stride.
const maxDim = 1 << 40

// newView checks a tensor's offset, sizes and strides against numel, its
// storage's declared size in the tensor's elements, and returns the view,
// whose end is where it stops in the storage. No memory is allocated for
// the tensor's data here. A tensor never has more elements than its
// storage (torch.save writes no expanded views of state dicts).
func newView(st *storage, numel, offset int64, size, stride []int64) (*view, error) {
	if len(size) != len(stride) {
		return nil, fmt.Errorf("tensor has %d sizes but %d strides", len(size), len(stride))
	}
	if offset < 0 || offset > numel {
		return nil, fmt.Errorf("tensor offset %d is outside its storage of %d elements", offset, numel)
	}
	elems := int64(1)
	for i := range size {
		if size[i] < 0 || size[i] > maxDim || stride[i] < 0 || stride[i] > maxDim {
			return nil, fmt.Errorf("tensor size %v or stride %v is negative or too large", size, stride)
		}
		if elems > 0 && size[i] > 0 && elems > math.MaxInt64/size[i] {
			return nil, fmt.Errorf("tensor size %v is too large", size)
		}
		elems *= size[i]
	}
	v := &view{st: st, offset: offset, size: size, stride: stride}
	if elems == 0 {
		return v, nil
	}
	if elems > numel {
		return nil, fmt.Errorf("tensor of size %v has more elements than its storage of %d", size, numel)
	}
	// last is the index of the view's last element; it stays below numel.
	last := offset
	for i := range size {
		if size[i] > 1 && stride[i] > 0 {
			if last >= numel || stride[i] > (numel-1-last)/(size[i]-1) {
				return nil, fmt.Errorf("tensor of size %v, stride %v at offset %d reaches past its storage of %d elements", size, stride, offset, numel)
			}
			last += (size[i] - 1) * stride[i]
		}
	}
	if last >= numel {
		return nil, fmt.Errorf("tensor at offset %d is outside its storage of %d elements", offset, numel)
	}
	v.end = last + 1
	return v, nil
}

// contiguous reports whether the view's elements lie in row-major order
// without gaps.
func (v *view) contiguous() bool {
	want := int64(1)
	for i := len(v.size) - 1; i >= 0; i-- {
		if v.size[i] != 1 && v.stride[i] != want {
			return false
		}
		want *= v.size[i]
	}
	return true
}

// materialize sets t's shape and data from its view of a storage whose data
// has been read: a slice of the storage when the view is contiguous, a copy
// otherwise; with header set, only the shape. copied counts the bytes
// copied so far against budget.
func (t *Tensor) materialize(header bool, copied *int64, budget int64) error {
	v := t.view
	e := int64(t.DType.Size())
	n := int64(1)
	t.Shape = make([]int, len(v.size))
	for i, s := range v.size {
		t.Shape[i] = int(s)
		n *= s
	}
	t.view = nil
	switch {
	case header:
	case n == 0:
		t.Data = []byte{}
	case v.contiguous():
		t.Data = v.st.data[v.offset*e : (v.offset+n)*e : (v.offset+n)*e]
	default:
		if *copied+n*e > budget {
			return fmt.Errorf("non-contiguous tensors need more than %d bytes of copies, more than the file holds", budget)
		}
		*copied += n * e
		t.Data = make([]byte, n*e)
		gather(t.Data, v.st.data, v, e)
	}
	return nil
}

// gather copies the view's elements of src into dst in row-major order.
func gather(dst, src []byte, v *view, e int64) {
	idx := make([]int64, len(v.size))
	at := v.offset
	for o := int64(0); o < int64(len(dst)); o += e {
		copy(dst[o:o+e], src[at*e:at*e+e])
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			at += v.stride[d]
			if idx[d] < v.size[d] {
				break
			}
			at -= idx[d] * v.stride[d]
			idx[d] = 0
		}
	}
}

// byteswap reverses the bytes of each element of size e in b.
func byteswap(b []byte, e int) {
	for i := 0; i+e <= len(b); i += e {
		for j, k := i, i+e-1; j < k; j, k = j+1, k-1 {
			b[j], b[k] = b[k], b[j]
		}
	}
}
