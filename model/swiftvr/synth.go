package swiftvr

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/tensor/half"
)

// Synth writes a synthetic checkpoint of the given preset ("tiny" or "full",
// see Layout) into dir, in exactly the official layout: the same file names,
// tensor names, shapes and dtypes (ReAE fp32, prompt bf16 + int64, transformer
// bf16; "full" shards the transformer into two files with an index).
//
// The weights are deterministic in seed and scaled so activations stay finite
// and non-trivial through every layer. dir is created (its parent must exist)
// or must be an empty directory. Everything is written into a temporary
// sibling directory that is renamed to dir only when complete, so a failure
// never leaves a checkpoint Open would accept. Tensors are generated and
// written one slice at a time: memory stays bounded for the 10 GB full preset.
func Synth(dir, preset string, seed uint64) error {
	return SynthOutliers(dir, preset, seed, 0)
}

func (family) SynthHelp() string {
	return "a checkpoint directory DIR in the official layout. Presets: full (the published sizes: about 10 GB), " +
		"block (one DiT block at the full width, a small ReAE and prompt: for kernel tests at real shapes) and tiny " +
		"(every layer, small widths). DIR's parent must exist; DIR must not exist or be empty."
}

func (family) SynthParams() []model.Param {
	return []model.Param{
		{Name: "preset", Kind: model.String, Default: "tiny",
			Help: "SwiftVR size preset: " + strings.Join(Presets(), " or ")},
		{Name: "outliers", Kind: model.Float, Default: 0.0,
			Help: fmt.Sprintf("SwiftVR: make every %dth output channel of the DiT blocks' linear layers this many times larger (the outlier channels of trained transformers, for fp8 checks); 0 for none", OutlierEvery)},
	}
}

// Synth writes a synthetic checkpoint of p's preset into the directory
// out (SynthOutliers), and says so on w (model.Synther).
func (family) Synth(w io.Writer, out string, seed uint64, p model.Params) error {
	if out == "" {
		return fmt.Errorf("no output directory: pass -o DIR")
	}
	preset, outliers := p.String("preset"), float32(p.Float("outliers"))
	specs, _ := Layout(preset)
	if specs == nil {
		return fmt.Errorf("unknown preset %q (known: %s)", preset, strings.Join(Presets(), ", "))
	}
	var params, size int64
	for i := range specs {
		params += specs[i].Elems()
		size += specs[i].Bytes()
	}
	start := time.Now()
	if outliers != 0 && outliers <= 1 {
		return fmt.Errorf("--outliers %g: want a factor above 1 (or 0 for none)", outliers)
	}
	if err := SynthOutliers(out, preset, seed, outliers); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "wrote %s %s checkpoint to %s: %d tensors, %d parameters, %.2f GB, seed %d, in %.1f s\n",
		Family, preset, out, len(specs), params, float64(size)/1e9, seed, time.Since(start).Seconds())
	return err
}

// OutlierEvery is how often SynthOutliers makes an output channel large:
// rows 0, OutlierEvery, 2·OutlierEvery, ... of every linear layer of the
// DiT's blocks (about 1%).
const OutlierEvery = 97

// SynthOutliers is Synth with, when factor > 1, every OutlierEvery-th
// output channel of the DiT blocks' linear layers factor times larger:
// the few large-magnitude channels of trained transformers, in weights and
// in the activations they make, for checking fp8's per-channel and
// per-token scales.
func SynthOutliers(dir, preset string, seed uint64, factor float32) error {
	p, ok := presetFor(preset)
	if !ok {
		return fmt.Errorf("unknown preset %q (known: %s)", preset, strings.Join(Presets(), ", "))
	}
	specs, cfg := Layout(preset)
	if factor > 1 {
		for i := range specs {
			t := &specs[i]
			if t.Part == PartDiT && strings.HasPrefix(t.Name, "blocks.") && strings.HasSuffix(t.Name, ".weight") && len(t.Shape) == 2 {
				t.fill.outlier, t.fill.cols = factor, t.Shape[1]
			}
		}
	}
	if dir == "" {
		return errors.New("synth: no output directory")
	}
	dir = filepath.Clean(dir)
	parent := filepath.Dir(dir)
	if st, err := os.Stat(parent); err != nil || !st.IsDir() {
		return fmt.Errorf("synth: parent directory %s does not exist", parent)
	}
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("synth: %s exists and is not a directory", dir)
		}
		if ents, err := os.ReadDir(dir); err != nil || len(ents) > 0 {
			return fmt.Errorf("synth: %s exists and is not empty", dir)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("synth: %w", err)
	}

	tmp, err := os.MkdirTemp(parent, filepath.Base(dir)+".tmp-")
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := writeCheckpoint(tmp, p, specs, cfg, seed); err != nil {
		return fmt.Errorf("synth %s: %w", dir, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	os.Remove(dir) // an empty directory is replaced; anything else was refused above
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	done = true
	return nil
}

func writeCheckpoint(root string, p presetSpec, specs []TensorSpec, cfg Config, seed uint64) error {
	byPart := map[Part][]TensorSpec{}
	for _, s := range specs {
		byPart[s.Part] = append(byPart[s.Part], s)
	}
	meta := map[string]string{"format": "pt"}
	if err := writeSafetensors(filepath.Join(root, ReAEFile), byPart[PartReAE], seed, meta); err != nil {
		return err
	}
	if err := writeSafetensors(filepath.Join(root, PromptFile), byPart[PartPrompt], seed, meta); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(root, TransformerDir), 0o755); err != nil {
		return err
	}
	cj, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(ConfigFile)), append(cj, '\n'), 0o644); err != nil {
		return err
	}
	dit := byPart[PartDiT]
	if p.shards <= 1 {
		return writeSafetensors(filepath.Join(root, filepath.FromSlash(DiTFile)), dit, seed, meta)
	}
	return writeShards(filepath.Join(root, TransformerDir), dit, p.shards, seed, meta)
}

// writeShards splits the tensors, in module order, into n files of about
// equal size plus the Hugging Face index that maps each tensor to its file.
func writeShards(dir string, specs []TensorSpec, n int, seed uint64, meta map[string]string) error {
	var total int64
	for i := range specs {
		total += specs[i].Bytes()
	}
	groups := make([][]TensorSpec, n)
	var acc int64
	for _, s := range specs {
		k := min(int(acc*int64(n)/max(total, 1)), n-1)
		groups[k] = append(groups[k], s)
		acc += s.Bytes()
	}
	weightMap := map[string]string{}
	for k, g := range groups {
		name := fmt.Sprintf("diffusion_pytorch_model-%05d-of-%05d.safetensors", k+1, n)
		if err := writeSafetensors(filepath.Join(dir, name), g, seed, meta); err != nil {
			return err
		}
		for _, s := range g {
			weightMap[s.Name] = name
		}
	}
	index := struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}{map[string]int64{"total_size": total}, weightMap}
	b, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, filepath.Base(DiTIndexFile)), append(b, '\n'), 0o644)
}

// Generation works on fixed chunks of elements, each with its own PCG stream
// seeded from (seed, part, tensor name, chunk index): the bytes do not depend
// on the number of workers or the batch size.
const (
	chunkElems = 1 << 16
	batchBytes = 16 << 20
)

// writeSafetensors streams specs into a new safetensors file at path: the
// header is computed from the shapes first, then each tensor is generated and
// written a batch at a time. Tensors are laid out by descending dtype size,
// then name, like the Python writer, so every tensor is aligned.
func writeSafetensors(path string, specs []TensorSpec, seed uint64, meta map[string]string) error {
	order := make([]*TensorSpec, len(specs))
	for i := range specs {
		order[i] = &specs[i]
	}
	sort.SliceStable(order, func(i, j int) bool {
		if a, b := order[i].DType.Size(), order[j].DType.Size(); a != b {
			return a > b
		}
		return order[i].Name < order[j].Name
	})
	header, err := safetensorsHeader(order, meta)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	w := newStreamWriter(f)
	w.write(header)
	for _, s := range order {
		if w.failed() {
			break
		}
		w.tensor(s, seed)
	}
	err = w.finish()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// safetensorsHeader returns the 8-byte length and the JSON header, padded
// with spaces to a multiple of 8 bytes.
func safetensorsHeader(order []*TensorSpec, meta map[string]string) ([]byte, error) {
	type entry struct {
		DType   string  `json:"dtype"`
		Shape   []int   `json:"shape"`
		Offsets []int64 `json:"data_offsets"`
	}
	h := make(map[string]any, len(order)+1)
	if len(meta) > 0 {
		h["__metadata__"] = meta
	}
	var off int64
	for _, s := range order {
		if s.DType.Size() == 0 {
			return nil, fmt.Errorf("tensor %s: unknown dtype %q", s.Name, s.DType)
		}
		n := s.Bytes()
		h[s.Name] = entry{string(s.DType), s.Shape, []int64{off, off + n}}
		off += n
	}
	j, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if pad := (8 - len(j)%8) % 8; pad > 0 {
		j = append(j, bytes.Repeat([]byte{' '}, pad)...)
	}
	out := make([]byte, 8, 8+len(j))
	binary.LittleEndian.PutUint64(out, uint64(len(j)))
	return append(out, j...), nil
}

// streamWriter generates batches on all cores while one goroutine writes the
// previous batch: three buffers of batchBytes bound the memory.
type streamWriter struct {
	free    chan []byte
	todo    chan []byte
	done    chan error
	err     error
	workers int
}

func newStreamWriter(w io.Writer) *streamWriter {
	s := &streamWriter{free: make(chan []byte, 3), todo: make(chan []byte, 3), done: make(chan error, 1), workers: runtime.GOMAXPROCS(0)}
	for range 3 {
		s.free <- make([]byte, batchBytes)
	}
	go func() {
		var err error
		for b := range s.todo {
			if err == nil {
				_, err = w.Write(b)
			}
			s.free <- b[:cap(b)]
		}
		s.done <- err
	}()
	return s
}

func (s *streamWriter) failed() bool { return s.err != nil }

func (s *streamWriter) write(b []byte) {
	buf := <-s.free
	if len(b) > cap(buf) {
		buf = make([]byte, len(b))
	}
	s.todo <- append(buf[:0], b...)
}

func (s *streamWriter) finish() error {
	close(s.todo)
	if err := <-s.done; err != nil {
		return err
	}
	return s.err
}

// tensor generates and queues one tensor's data.
func (s *streamWriter) tensor(t *TensorSpec, seed uint64) {
	size := t.DType.Size()
	n := t.Elems()
	perBatch := int64(batchBytes / size / chunkElems * chunkElems)
	key := tensorKey(seed, t.Part, t.Name)
	for off := int64(0); off < n; off += perBatch {
		m := min(perBatch, n-off)
		buf := (<-s.free)[:m*int64(size)]
		if err := s.generate(t, key, off, m, buf); err != nil {
			s.err = err
			s.free <- buf[:cap(buf)]
			return
		}
		s.todo <- buf
	}
}

// generate fills elements [off, off+m) of t into buf; off is chunk-aligned.
func (s *streamWriter) generate(t *TensorSpec, key uint64, off, m int64, buf []byte) error {
	size := int64(t.DType.Size())
	chunks := (m + chunkElems - 1) / chunkElems
	gen := func(c int64) error {
		start := c * chunkElems
		cnt := min(chunkElems, m-start)
		return genChunk(t, key, uint64((off+start)/chunkElems), buf[start*size:(start+cnt)*size], int(cnt))
	}
	workers := int64(min(s.workers, int(chunks)))
	if workers <= 1 {
		for c := range chunks {
			if err := gen(c); err != nil {
				return err
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	errs := make([]error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := w; c < chunks; c += workers {
				if err := gen(c); err != nil {
					errs[w] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// tensorKey mixes the seed with the part and the tensor name.
func tensorKey(seed uint64, part Part, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(part))
	h.Write([]byte{0})
	h.Write([]byte(name))
	return synthMix(synthMix(seed) ^ h.Sum64())
}

func synthMix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// genChunk fills out (n elements of t's dtype) for chunk number chunk.
func genChunk(t *TensorSpec, key, chunk uint64, out []byte, n int) error {
	if err := genValues(t, key, chunk, out, n); err != nil || t.fill.outlier <= 1 {
		return err
	}
	base := int64(chunk) * chunkElems
	for i := 0; i < n; i++ {
		if (base+int64(i))/int64(t.fill.cols)%OutlierEvery == 0 {
			if err := putElem(t.DType, out, i, t.fill.outlier*getElem(t.DType, out, i)); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
		}
	}
	return nil
}

// genValues is genChunk before outliers.
func genValues(t *TensorSpec, key, chunk uint64, out []byte, n int) error {
	var rng rand.PCG
	rng.Seed(key, synthMix(chunk))
	f := t.fill
	switch f.kind {
	case fillFirst:
		// Integers: one "real" token (id 1 = end of sequence, mask 1) at the
		// start of every row, padding (0) after it, as an empty prompt gives.
		if len(t.Shape) == 0 {
			return fmt.Errorf("tensor %s: scalar integer tensors are not generated", t.Name)
		}
		row := int64(t.Shape[len(t.Shape)-1])
		base := int64(chunk) * chunkElems
		for i := range n {
			v := float32(0)
			if (base+int64(i))%row == 0 {
				v = 1
			}
			if err := putElem(t.DType, out, i, v); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
		}
		return nil
	case fillNormal:
		// Irwin-Hall: the sum of four 16-bit uniforms, scaled to unit variance.
		const scale = 1.7320508 / 65536 // sqrt(12/4) per unit of 2^16
		base := int64(chunk) * chunkElems
		for i := range n {
			r := rng.Uint64()
			s := float32(r&0xffff+(r>>16)&0xffff+(r>>32)&0xffff+r>>48) - 2*65535
			v := f.mean + f.std*s*scale
			if f.prefix > 0 && base+int64(i) >= int64(f.prefix) {
				v = 0
			}
			if err := putElem(t.DType, out, i, v); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
		}
		return nil
	}
	// Uniform on [mean - a, mean + a) with a = std * sqrt(3): two per draw.
	a := f.std * 1.7320508
	const inv = 1.0 / (1 << 23)
	switch t.DType {
	case "BF16":
		for i := 0; i < n; i += 2 {
			r := rng.Uint64()
			binary.LittleEndian.PutUint16(out[2*i:], toBF16Bits(f.mean+a*(float32(r&0xffffff)*inv-1)))
			if i+1 < n {
				binary.LittleEndian.PutUint16(out[2*i+2:], toBF16Bits(f.mean+a*(float32((r>>32)&0xffffff)*inv-1)))
			}
		}
	default:
		for i := 0; i < n; i += 2 {
			r := rng.Uint64()
			if err := putElem(t.DType, out, i, f.mean+a*(float32(r&0xffffff)*inv-1)); err != nil {
				return fmt.Errorf("tensor %s: %w", t.Name, err)
			}
			if i+1 < n {
				putElem(t.DType, out, i+1, f.mean+a*(float32((r>>32)&0xffffff)*inv-1))
			}
		}
	}
	return nil
}

// getElem reads element i of out, of a float dtype putElem writes.
func getElem(dt safetensors.DType, out []byte, i int) float32 {
	switch dt {
	case "F32":
		return math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
	case "BF16":
		return half.FromBF16(binary.LittleEndian.Uint16(out[2*i:]))
	case "F16":
		return half.FromF16(binary.LittleEndian.Uint16(out[2*i:]))
	}
	return 0
}

// putElem stores v as element i of out in dtype dt.
func putElem(dt safetensors.DType, out []byte, i int, v float32) error {
	switch dt {
	case "F32":
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	case "BF16":
		binary.LittleEndian.PutUint16(out[2*i:], toBF16Bits(v))
	case "F16":
		binary.LittleEndian.PutUint16(out[2*i:], toF16Bits(v))
	case "I64":
		binary.LittleEndian.PutUint64(out[8*i:], uint64(int64(v)))
	case "I32":
		binary.LittleEndian.PutUint32(out[4*i:], uint32(int32(v)))
	default:
		return fmt.Errorf("cannot generate dtype %s", dt)
	}
	return nil
}

// toBF16Bits rounds v to bfloat16, to nearest even (v is always finite here).
func toBF16Bits(v float32) uint16 {
	b := math.Float32bits(v)
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// toF16Bits rounds a finite v of moderate magnitude to IEEE half precision, to nearest even.
func toF16Bits(v float32) uint16 {
	b := math.Float32bits(v)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case exp >= 31:
		return sign | 0x7c00
	case exp <= 0:
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		h := mant >> shift
		rem := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is still correct
	}
	return sign | uint16(h)
}

func sqrt32(v float32) float32 { return float32(math.Sqrt(float64(v))) }

// synthFill describes how Synth generates a tensor's values.
type synthFill struct {
	kind      synthFillKind
	mean, std float32
	prefix    int // fillNormal: when > 0, values from this index on are 0
	// outlier, when > 1, multiplies every OutlierEvery-th row of cols
	// values (output channels of a linear layer) by itself.
	outlier float32
	cols    int
}

type synthFillKind uint8

const (
	fillUniform synthFillKind = iota // uniform with the given mean and standard deviation
	fillNormal                       // approximately normal with the given mean and standard deviation
	fillFirst                        // integers: 1 at the first position of each row, 0 elsewhere
)

func uniformFill(std float32) synthFill { return synthFill{kind: fillUniform, std: std} }
func aroundFill(mean, std float32) synthFill {
	return synthFill{kind: fillUniform, mean: mean, std: std}
}

// Preset sizes. "full" is the published checkpoint; "tiny" keeps every layer
// and name but shrinks the widths; "block" is one DiT block at full width.
type presetSpec struct {
	dims        Dims
	promptDType safetensors.DType
	ditDType    safetensors.DType
	shards      int
}

func presetFor(name string) (presetSpec, bool) {
	switch name {
	case "full":
		return presetSpec{dims: Dims{
			ReAEChannels: 12, EncoderWidth: 64, DecoderWidths: [4]int{512, 256, 128, 64}, LatentChannels: 48,
			Dim: 3072, Heads: 24, HeadDim: 128, FFNDim: 14336, Layers: 30, TextDim: 4096, FreqDim: 256,
			PatchSize: [3]int{1, 2, 2}, InChannels: 48, OutChannels: 48, PromptTokens: 512,
		}, promptDType: "BF16", ditDType: "BF16", shards: 2}, true
	case "tiny":
		return presetSpec{dims: Dims{
			ReAEChannels: 12, EncoderWidth: 16, DecoderWidths: [4]int{32, 16, 16, 16}, LatentChannels: 48,
			Dim: 256, Heads: 2, HeadDim: 128, FFNDim: 512, Layers: 2, TextDim: 64, FreqDim: 256,
			PatchSize: [3]int{1, 2, 2}, InChannels: 48, OutChannels: 48, PromptTokens: 16,
		}, promptDType: "BF16", ditDType: "BF16", shards: 1}, true
	case "block":
		return presetSpec{dims: Dims{
			ReAEChannels: 12, EncoderWidth: 16, DecoderWidths: [4]int{32, 16, 16, 16}, LatentChannels: 48,
			Dim: 3072, Heads: 24, HeadDim: 128, FFNDim: 14336, Layers: 1, TextDim: 4096, FreqDim: 256,
			PatchSize: [3]int{1, 2, 2}, InChannels: 48, OutChannels: 48, PromptTokens: 32,
		}, promptDType: "BF16", ditDType: "BF16", shards: 1}, true
	}
	return presetSpec{}, false
}

// Presets lists the names Layout and Synth accept: "tiny" (every layer,
// small widths), "block" (one DiT block at the full width, a small ReAE and
// 32 prompt tokens: for tests) and "full" (the published sizes).
func Presets() []string { return []string{"tiny", "block", "full"} }
