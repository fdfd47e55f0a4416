package compact

import (
	"slices"

	"github.com/vsr-dev/vsr/backend"
)

// sliceOut is where a convolution writes when its output is a part of a
// dense block's buffer: channels from at of blob buf's tensor.
type sliceOut struct{ buf, at int }

// denseBuffers turns the concatenations of dense blocks into views of one
// buffer per block, on backends that convolve a channel prefix into a
// channel slice (backend.SliceConver). A block is a longest Concat and the
// Concats whose inputs are a prefix of its inputs, as in the residual dense
// blocks of realesrgan-x4plus, where conv k reads cat(x, x1, ..., x(k-1))
// and writes xk. The buffer is the longest Concat's blob: an opBuffer
// allocates it and copies the block's first input x into it, and the
// convolution computing each later part reads a prefix of it (a shorter
// Concat) and writes straight into its own channels. The copies of every
// part into every later Concat go away. Blocks whose convolutions the
// backend cannot run so keep their Concats.
func (m *Graph) denseBuffers() {
	sc, ok := m.b.(backend.SliceConver)
	if !ok {
		return
	}
	var concats []int
	for i, o := range m.ops {
		if o.kind == opConcat {
			concats = append(concats, i)
		}
	}
	done := map[int]bool{}
	var blocks []denseBlock
	for k := len(concats) - 1; k >= 0; k-- {
		if done[concats[k]] {
			continue
		}
		top := m.ops[concats[k]]
		var members []int
		for _, j := range concats[:k+1] {
			if !done[j] && isPrefix(m.ops[j].in, top.in) {
				members = append(members, j)
			}
		}
		if d, ok := m.denseBlock(sc, top, members); ok {
			for _, j := range members {
				done[j] = true
			}
			blocks = append(blocks, d)
		}
	}
	if len(blocks) == 0 {
		return
	}
	starts := map[int][]*op{} // op index -> the opBuffers to insert before it
	for _, d := range blocks {
		starts[d.start] = append(starts[d.start], &op{layer: d.top.layer, kind: opBuffer, in: []int{d.top.in[0]}, out: d.top.out})
		for _, c := range d.convs {
			c.into = &sliceOut{buf: d.top.out, at: d.parts[c.out]}
		}
		for _, o := range d.readers {
			o.in[0] = d.top.out
		}
	}
	var out []*op
	for i, o := range m.ops {
		out = append(out, starts[i]...)
		if !done[i] {
			out = append(out, o)
		}
	}
	m.ops = out
	m.countUses()
}

// denseBlock is one dense block found by denseBuffers.
type denseBlock struct {
	top     *op         // the longest Concat: its blob is the buffer
	parts   map[int]int // blobs after the first input -> their channel offset
	convs   []*op       // the convolutions computing them
	readers []*op       // the convolutions reading a shorter Concat
	start   int         // the op before which the buffer is made
}

// denseBlock checks the block of Concat top and its prefix Concats
// members (op indices, top's among them): every part after the first is
// computed by a convolution with one input that nothing but the members
// reads and that the backend runs from its input (a prefix of the buffer
// when that is a shorter member) into its slice, the shorter members are
// read by those convolutions only and are not the model's output, and
// the first part is computed before the buffer is needed.
func (m *Graph) denseBlock(sc backend.SliceConver, top *op, members []int) (denseBlock, bool) {
	d := denseBlock{top: top, parts: map[int]int{}, start: len(m.ops)}
	if len(top.in) < 2 || len(members) < 2 {
		return d, false
	}
	memberOut := map[int]bool{}
	for _, j := range members {
		memberOut[m.ops[j].out] = true
	}
	if memberOut[m.output] && m.output != top.out {
		return d, false // a shorter Concat is the model's output
	}
	width := m.chans[top.out]
	at := m.chans[top.in[0]]
	for _, blob := range top.in[1:] {
		if _, dup := d.parts[blob]; dup || blob == top.in[0] {
			return d, false
		}
		d.parts[blob] = at
		at += m.chans[blob]
	}
	for i, o := range m.ops {
		for k, blob := range o.in {
			if _, part := d.parts[blob]; part && (o.kind != opConcat || !memberOut[o.out]) {
				return d, false // a part read outside the block
			}
			if !memberOut[blob] || blob == top.out {
				continue
			}
			// o reads a shorter Concat: it must be the convolution
			// computing a later part (checked below), reading a prefix
			// of the buffer.
			if _, part := d.parts[o.out]; !part || k != 0 {
				return d, false
			}
			d.readers = append(d.readers, o)
		}
		if _, part := d.parts[o.out]; part {
			if o.kind != opConv || len(o.in) != 1 {
				return d, false
			}
			d.convs = append(d.convs, o)
			inC := m.chans[o.in[0]]
			if memberOut[o.in[0]] {
				inC = width
			}
			if !sc.CanSliceConv(o.w, o.conv, o.act, inC, width) {
				return d, false
			}
			d.start = min(d.start, i)
		}
	}
	if len(d.convs) != len(d.parts) {
		return d, false // a part is the model's input
	}
	for _, o := range m.ops[:d.start] {
		if o.out == top.in[0] {
			return d, true
		}
	}
	return d, top.in[0] == m.input
}

// isPrefix reports whether a is a prefix of b.
func isPrefix(a, b []int) bool {
	return len(a) <= len(b) && slices.Equal(a, b[:len(a)])
}

// countUses counts how many ops read each blob, a buffer written into
// counting as read.
func (m *Graph) countUses() {
	m.uses = make([]int, m.nblobs)
	for _, o := range m.ops {
		for _, i := range o.reads() {
			m.uses[i]++
		}
	}
}

// reads returns the blobs o needs: its inputs and the buffer it writes
// into, if any.
func (o *op) reads() []int {
	if o.into == nil {
		return o.in
	}
	return append(o.in[:len(o.in):len(o.in)], o.into.buf)
}
