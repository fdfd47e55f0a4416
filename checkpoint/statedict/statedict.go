// Package statedict is the state dict of a PyTorch model as vsr reads it:
// named tensors of floating-point values, whatever file they came from (a
// .safetensors file, or a torch.save pickle read by package
// checkpoint/torch without running it), with the containers and key
// prefixes that training code wraps them in removed. Architecture
// detection and graph building (issue 39) work on a Dict only.
package statedict

import (
	"fmt"
	"slices"
)

// DType is a tensor's element type, named as in safetensors.
type DType string

// The element types a state dict's tensors may have.
const (
	F32  DType = "F32"
	F16  DType = "F16"
	BF16 DType = "BF16"
)

// Size is the bytes of one element (0 for an unknown type).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case F16, BF16:
		return 2
	}
	return 0
}

// Tensor is one named tensor: its shape (row-major, contiguous), element
// type and little-endian element bytes.
type Tensor struct {
	Shape []int
	DType DType
	Data  []byte
}

// Elems is the number of elements the shape holds.
func (t *Tensor) Elems() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Dict is a state dict: tensors by name, in the file's order, and the
// file's metadata (safetensors' __metadata__; none for a pickle).
// Skipped lists the file's entries that are not F32, F16 or BF16 tensors
// (Open leaves them out of Keys): their keys still tell an architecture's
// variant (Real-CUGAN's "pro" may be an int).
type Dict struct {
	Keys     []string
	Tensors  map[string]*Tensor
	Metadata map[string]string
	Skipped  []Skipped
}

// Get returns the tensor named key, or nil.
func (d *Dict) Get(key string) *Tensor { return d.Tensors[key] }

// Shape returns the shape of the tensor named key, or nil.
func (d *Dict) Shape(key string) []int {
	if t := d.Tensors[key]; t != nil {
		return slices.Clone(t.Shape)
	}
	return nil
}

// Add appends a tensor; a key already present is an error.
func (d *Dict) Add(key string, t *Tensor) error {
	if d.Tensors == nil {
		d.Tensors = map[string]*Tensor{}
	}
	if _, ok := d.Tensors[key]; ok {
		return fmt.Errorf("state dict: %q twice", key)
	}
	d.Keys = append(d.Keys, key)
	d.Tensors[key] = t
	return nil
}
