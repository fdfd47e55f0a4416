package swiftvr

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"math"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/tensor/half"
)

// The format of a saved state (model.Resumer; resume.go says what a state
// holds). All integers are little-endian.
//
//	magic     8 bytes "SWIFTVR\x00"
//	version   uint32 (stateVersion)
//	shape     uint32 count, then count entries: uint8 name length, name,
//	          int64 value (stateShape.fields: what LoadState checks)
//	position  int64 batch, int64 chunk, int64 proxy from
//	bands     uint32 bands, uint32 tensors a band, then each band's
//	          tensors (the encoder's MemBlocks, then the decoder's)
//	history   uint8 present, then the tensor if present
//	proxy     uint32 count, then the tensors
//	checksum  uint32 CRC-32C of everything before it
//
// A tensor is its value type (uint8: valueF32, valueF16, valueBF16), its
// shape (4 uint32: N H W C) and its values as the device stores them.
const (
	stateMagic   = "SWIFTVR\x00"
	stateVersion = 1
)

// valueType is how a device stores a tensor's values; a state keeps them so,
// bit for bit.
type valueType uint8

const (
	valueF32 valueType = iota
	valueF16
	valueBF16
)

func (v valueType) size() int { return [...]int{4, 2, 2}[v] }

func (v valueType) String() string { return [...]string{"f32", "f16", "bf16"}[v] }

// storageOf returns the value type b stores tensors in.
func storageOf(b backend.Backend) valueType {
	if g, ok := b.(backend.GPU); ok {
		switch g.StorageType() {
		case "f16":
			return valueF16
		case "bf16":
			return valueBF16
		}
	}
	return valueF32
}

// stateLayout is how the ReAE's causal state is cut into bands.
type stateLayout int

const (
	layoutWhole    stateLayout = iota // whole frames
	layoutBands                       // a Session's bands, each with the rows within reach (bands.go)
	layoutSequence                    // sequence parallelism's bands, each its own rows (halo)
)

// stateShape is what a state must agree on with the session that loads it:
// the video, the request's settings that shape the state and the model's
// widths. Two sessions of the same shape hold states of the same tensors.
type stateShape struct {
	frames, inW, inH, width, height int
	clipLen, overlap                int
	dit, proxy                      bool
	latentC, encWidth               int
	decWidths                       []int
	encMem, decMem                  int
	layout                          stateLayout
	bands                           int
	value                           valueType
}

// field is one named value of a stateShape.
type field struct {
	name  string
	value int64
}

func flag(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// fields lists the shape's values by name, in the order a state holds them.
func (s stateShape) fields() []field {
	fs := []field{
		{"frames", int64(s.frames)}, {"input width", int64(s.inW)}, {"input height", int64(s.inH)},
		{"output width", int64(s.width)}, {"output height", int64(s.height)},
		{"clip length", int64(s.clipLen)}, {"dit overlap", int64(s.overlap)},
		{"dit", flag(s.dit)}, {"encode proxy", flag(s.proxy)},
		{"latent channels", int64(s.latentC)}, {"encoder width", int64(s.encWidth)},
		{"decoder widths", int64(len(s.decWidths))},
	}
	for i, w := range s.decWidths {
		fs = append(fs, field{fmt.Sprintf("decoder width %d", i), int64(w)})
	}
	return append(fs, field{"encoder MemBlocks", int64(s.encMem)}, field{"decoder MemBlocks", int64(s.decMem)},
		field{"band layout", int64(s.layout)}, field{"bands", int64(s.bands)}, field{"value type", int64(s.value)})
}

// shapeOf is the stateShape of a request on r (with the DiT or not) for a
// video of frames frames of inW x inH, with opt's settings.
func shapeOf(r *ReAE, dit bool, frames, inW, inH int, opt Options, layout stateLayout, bands int) stateShape {
	st := r.NewState()
	return stateShape{frames: frames, inW: inW, inH: inH, width: opt.Width, height: opt.Height,
		clipLen: opt.ClipLen, overlap: opt.DiTOverlap, dit: dit, proxy: opt.EncodeProxy,
		latentC: r.LatentC, encWidth: r.EncWidth, decWidths: r.DecWidths, encMem: len(st.Enc), decMem: len(st.Dec),
		layout: layout, bands: bands, value: storageOf(r.b)}
}

// hostTensor is a tensor's values on the host as its device stores them.
type hostTensor struct {
	shape backend.Shape
	value valueType
	data  []byte
}

// toHost copies t from b to the host in b's value type.
func toHost(b backend.Backend, t backend.Tensor) (hostTensor, error) {
	h := hostTensor{shape: t.Shape(), value: storageOf(b)}
	if s, ok := b.(backend.Stored); ok {
		var err error
		h.data, err = s.DownloadStored(t)
		return h, err
	}
	v, err := b.Download(t)
	if err != nil {
		return hostTensor{}, err
	}
	if h.value == valueF32 {
		h.data = make([]byte, 4*len(v))
		for i, x := range v {
			binary.LittleEndian.PutUint32(h.data[4*i:], math.Float32bits(x))
		}
		return h, nil
	}
	// The device's 16-bit values widen to float32 exactly, so narrowing
	// them again gives back the stored bits.
	h.data = make([]byte, 2*len(v))
	for i, x := range half.EncodeSlice(v, h.value == valueBF16) {
		binary.LittleEndian.PutUint16(h.data[2*i:], x)
	}
	return h, nil
}

// upload makes the tensor on b, whose value type must be h's.
func (h hostTensor) upload(b backend.Backend) (backend.Tensor, error) {
	if v := storageOf(b); v != h.value {
		return nil, fmt.Errorf("swiftvr state: a tensor of %v values for a device that stores %v", h.value, v)
	}
	if s, ok := b.(backend.Stored); ok {
		return s.UploadStored(h.shape, h.data)
	}
	var v []float32
	if h.value == valueF32 {
		v = make([]float32, len(h.data)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(h.data[4*i:]))
		}
	} else {
		v = half.DecodeSlice(h.data, h.value == valueBF16)
	}
	return b.Upload(h.shape, v)
}

// savedState is a state on the host: what SaveState writes and LoadState
// reads (see resume.go).
type savedState struct {
	shape stateShape
	// batch is the last batch run; chunk the first chunk of the next.
	batch, chunk int
	// bands holds each band's MemBlock states: the encoder's, then the
	// decoder's (one band for whole frames).
	bands [][]hostTensor
	// hist is the DiT history the next chunk takes (nil: none).
	hist *hostTensor
	// proxy are the input frames from proxyFrom on kept for EncodeProxy.
	proxy     []hostTensor
	proxyFrom int
}

// stateWriter writes a state's parts, keeping the first error.
type stateWriter struct {
	w   *bufio.Writer
	crc hash.Hash32
	err error
}

func (w *stateWriter) bytes(p []byte) {
	if w.err == nil {
		_, w.err = w.w.Write(p)
	}
	if w.err == nil {
		w.crc.Write(p)
	}
}

func (w *stateWriter) u8(v uint8)   { w.bytes([]byte{v}) }
func (w *stateWriter) u32(v uint32) { w.bytes(binary.LittleEndian.AppendUint32(nil, v)) }
func (w *stateWriter) i64(v int64)  { w.bytes(binary.LittleEndian.AppendUint64(nil, uint64(v))) }

func (w *stateWriter) tensor(t hostTensor) {
	w.u8(uint8(t.value))
	for _, d := range []int{t.shape.N, t.shape.H, t.shape.W, t.shape.C} {
		w.u32(uint32(d))
	}
	w.bytes(t.data)
}

// write writes s to out in the format above.
func (s *savedState) write(out io.Writer) error {
	w := &stateWriter{w: bufio.NewWriterSize(out, 1<<20), crc: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
	w.bytes([]byte(stateMagic))
	w.u32(stateVersion)
	fs := s.shape.fields()
	w.u32(uint32(len(fs)))
	for _, f := range fs {
		w.u8(uint8(len(f.name)))
		w.bytes([]byte(f.name))
		w.i64(f.value)
	}
	w.i64(int64(s.batch))
	w.i64(int64(s.chunk))
	w.i64(int64(s.proxyFrom))
	w.u32(uint32(len(s.bands)))
	w.u32(uint32(len(s.bands[0])))
	for _, band := range s.bands {
		for _, t := range band {
			w.tensor(t)
		}
	}
	w.u8(uint8(flag(s.hist != nil)))
	if s.hist != nil {
		w.tensor(*s.hist)
	}
	w.u32(uint32(len(s.proxy)))
	for _, t := range s.proxy {
		w.tensor(t)
	}
	if w.err == nil {
		_, w.err = w.w.Write(binary.LittleEndian.AppendUint32(nil, w.crc.Sum32()))
	}
	if w.err == nil {
		w.err = w.w.Flush()
	}
	if w.err != nil {
		return fmt.Errorf("swiftvr: save state: %w", w.err)
	}
	return nil
}

// errBadState is wrapped by every error of a state that is damaged or not
// one at all.
var errBadState = errors.New("not a SwiftVR state, or a damaged one")

// stateReader reads a state's parts, keeping the first error.
type stateReader struct {
	r   io.Reader
	crc hash.Hash32
	err error
}

func (r *stateReader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r.r, p); err != nil {
		r.err = fmt.Errorf("%w: %v", errBadState, err)
		return nil
	}
	r.crc.Write(p)
	return p
}

func (r *stateReader) u8() uint8 {
	if p := r.bytes(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *stateReader) u32() uint32 {
	if p := r.bytes(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *stateReader) i64() int64 {
	if p := r.bytes(8); p != nil {
		return int64(binary.LittleEndian.Uint64(p))
	}
	return 0
}

// fail records a damaged state's error, if none came before it.
func (r *stateReader) fail(format string, a ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", errBadState, fmt.Sprintf(format, a...))
	}
}

// count reads a count of at most limit.
func (r *stateReader) count(what string, limit int) int {
	n := r.u32()
	if n > uint32(limit) {
		r.fail("%d %s (at most %d)", n, what, limit)
		return 0
	}
	return int(n)
}

// maxStateDim bounds each dimension of a saved tensor, so that a damaged
// size is refused before anything is allocated for it.
const maxStateDim = 1 << 16

func (r *stateReader) tensor(value valueType) hostTensor {
	v := valueType(r.u8())
	var d [4]int
	for i := range d {
		d[i] = int(r.u32())
		if d[i] < 1 || d[i] > maxStateDim {
			r.fail("a tensor dimension of %d", d[i])
		}
	}
	if r.err != nil {
		return hostTensor{}
	}
	if v != value {
		r.fail("a tensor of value type %d in a state of %v", v, value)
		return hostTensor{}
	}
	s := backend.Shape{N: d[0], H: d[1], W: d[2], C: d[3]}
	if d[0] > 64 || d[3] > 1<<13 || s.Elems() > 1<<31 {
		r.fail("a tensor of shape %v", s)
		return hostTensor{}
	}
	return hostTensor{shape: s, value: v, data: r.bytes(s.Elems() * v.size())}
}

// readState reads a state that must be of the shape want returns for the
// shape it was saved with (the session's own, or one it can take: see
// Session.LoadState); it refuses one of another shape (naming what
// differs), of another format version, and a damaged one.
func readState(in io.Reader, want func(saved []field) stateShape) (*savedState, error) {
	r := &stateReader{r: bufio.NewReaderSize(in, 1<<20), crc: crc32.New(crc32.MakeTable(crc32.Castagnoli))}
	if m := r.bytes(len(stateMagic)); r.err == nil && string(m) != stateMagic {
		r.fail("it begins %q", m)
	}
	if v := r.u32(); r.err == nil && v != stateVersion {
		return nil, fmt.Errorf("swiftvr state: format version %d, this build reads %d: start over", v, stateVersion)
	}
	saved := make([]field, r.count("shape fields", 256))
	for i := range saved {
		saved[i].name = string(r.bytes(int(r.u8())))
		saved[i].value = r.i64()
	}
	if r.err != nil {
		return nil, fmt.Errorf("swiftvr state: %w", r.err)
	}
	shape := want(saved)
	mine := shape.fields()
	if len(saved) != len(mine) {
		return nil, fmt.Errorf("swiftvr state: saved by another build of vsr (%d shape fields, this one has %d): start over", len(saved), len(mine))
	}
	for i, f := range saved {
		switch {
		case f.name != mine[i].name:
			return nil, fmt.Errorf("swiftvr state: saved by another build of vsr (its shape field %d is %q, not %q): start over", i, f.name, mine[i].name)
		case f.value != mine[i].value:
			return nil, fmt.Errorf("swiftvr state: saved with %s %d, this session has %d: the state is of another video, model or settings; start over", f.name, f.value, mine[i].value)
		}
	}
	s := &savedState{shape: shape}
	s.batch, s.chunk, s.proxyFrom = int(r.i64()), int(r.i64()), int(r.i64())
	bands, per := r.count("bands", shape.bands), r.count("tensors a band", shape.encMem+shape.decMem)
	if r.err == nil && (bands != shape.bands || per != shape.encMem+shape.decMem) {
		r.fail("%d bands of %d tensors, want %d of %d", bands, per, shape.bands, shape.encMem+shape.decMem)
	}
	for range bands {
		var band []hostTensor
		for range per {
			band = append(band, r.tensor(shape.value))
		}
		s.bands = append(s.bands, band)
	}
	if r.u8() != 0 {
		h := r.tensor(shape.value)
		s.hist = &h
	}
	for range r.count("proxy frames", 64) {
		s.proxy = append(s.proxy, r.tensor(shape.value))
	}
	sum := r.crc.Sum32()
	if got := r.u32(); r.err == nil && got != sum {
		r.fail("checksum %08x, the contents give %08x", got, sum)
	}
	if r.err != nil {
		return nil, fmt.Errorf("swiftvr state: %w", r.err)
	}
	return s, nil
}
