// Package swiftvr is SwiftVR's one-step generative video restoration: it
// reads, checks and synthesizes checkpoints; runs the restoration-aware
// autoencoder (ReAE) and the Wan2.2-TI2V-5B diffusion transformer (DiT)
// with shifted-window attention; and streams a video through them in causal
// chunks (a Session per video). It registers itself as the model family
// "swiftvr" (family.go): a checkpoint directory is a resident model.
//
// A checkpoint directory DIR holds, exactly as published:
//
//	DIR/reae.safetensors                 ReAE weights (fp32, 128 tensors)
//	DIR/prompt_embedding.safetensors     prompt_emb [1, tokens, text_dim] (+ attention_mask, input_ids)
//	DIR/transformer/config.json          Diffusers WanTransformer3DModel config
//	DIR/transformer/diffusion_pytorch_model.safetensors
//	    or diffusion_pytorch_model-0000K-of-0000N.safetensors + diffusion_pytorch_model.safetensors.index.json
//
// Every width is read from the files (tensor shapes and config.json), never
// assumed, so reduced test models load through the same code as the published
// one. Files are only ever parsed as safetensors and JSON: a SwiftVR
// checkpoint must be safetensors, and a PyTorch pickle in place of a
// .safetensors file is refused, never read (vsr reads .pth files only as
// state dicts of the super-resolution architectures it knows).
package swiftvr

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

// Checkpoint is an opened, validated SwiftVR checkpoint directory. The Sets
// read tensors on demand; Close releases them.
type Checkpoint struct {
	Dir    string
	Config Config
	Dims   Dims
	ReAE   *safetensors.Set // reae.safetensors
	Prompt *safetensors.Set // prompt_embedding.safetensors
	DiT    *safetensors.Set // the transformer weights, sharded or not
}

// Close releases the checkpoint's files.
func (c *Checkpoint) Close() error {
	var errs []error
	for _, s := range []*safetensors.Set{c.ReAE, c.Prompt, c.DiT} {
		if s != nil {
			errs = append(errs, s.Close())
		}
	}
	c.ReAE, c.Prompt, c.DiT = nil, nil, nil
	return errors.Join(errs...)
}

// PromptEmbedding returns prompt_emb[0], the [PromptTokens, TextDim] text
// embedding the official loader uses, as float32.
func (c *Checkpoint) PromptEmbedding() ([]float32, error) {
	v, err := c.Prompt.Float32(PromptEmbKey)
	if err != nil {
		return nil, err
	}
	n := c.Dims.PromptTokens * c.Dims.TextDim
	if len(v) < n {
		return nil, fmt.Errorf("%s: %s has %d values, want at least %d", PromptFile, PromptEmbKey, len(v), n)
	}
	return v[:n:n], nil
}

// IsCheckpointDir reports whether dir looks like a SwiftVR checkpoint: it has
// reae.safetensors and a transformer directory.
func IsCheckpointDir(dir string) bool {
	if st, err := os.Stat(filepath.Join(dir, ReAEFile)); err != nil || st.IsDir() {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, TransformerDir))
	return err == nil && st.IsDir()
}

// CheckDir explains why path is not a checkpoint directory (nil when it
// looks like one): a PyTorch pickle, another file, or a directory without
// reae.safetensors or transformer/.
func CheckDir(path string) error {
	st, err := os.Stat(path)
	switch {
	case err != nil:
		return err
	case !st.IsDir():
		if err := safetensors.CheckNotPickle(path); err != nil {
			if errors.Is(err, safetensors.ErrPickle) {
				return fmt.Errorf("a SwiftVR checkpoint is a directory of safetensors files: %w", err)
			}
			return err
		}
		return fmt.Errorf("%s is a file, not a SwiftVR checkpoint directory (which holds %s, %s and %s/)", path, ReAEFile, PromptFile, TransformerDir)
	case IsCheckpointDir(path):
		return nil
	}
	var missing []string
	for _, f := range []string{ReAEFile, TransformerDir + "/"} {
		if _, err := os.Stat(filepath.Join(path, f)); err != nil {
			missing = append(missing, f)
		}
	}
	return fmt.Errorf("directory %s is not a SwiftVR checkpoint: it has no %s (a checkpoint holds %s, %s and %s/, as published)", path, strings.Join(missing, " and no "), ReAEFile, PromptFile, TransformerDir)
}

// Open opens and validates the checkpoint in dir: every expected tensor must
// be present with the shape the other tensors and config.json imply and a
// supported dtype. The first problem found is returned as a one-line error;
// Inspect lists them all.
func Open(dir string) (*Checkpoint, error) {
	l := newCkLoader(dir)
	l.run()
	if len(l.problems) > 0 {
		l.close()
		err := l.problems[0]
		if n := len(l.problems) - 1; n > 0 {
			err = fmt.Errorf("%w (and %d more problem%s; see vsr checkpoint inspect)", err, n, pluralS(n))
		}
		return nil, fmt.Errorf("swiftvr checkpoint %s: %w", dir, err)
	}
	return l.ck, nil
}

func pluralS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// ckLoader opens the parts of a checkpoint and collects every problem.
type ckLoader struct {
	dir      string
	ck       *Checkpoint
	files    []string
	problems []error
	cfg      Config
	cfgOK    bool
	dims     Dims
}

func newCkLoader(dir string) *ckLoader {
	return &ckLoader{dir: dir, ck: &Checkpoint{Dir: dir}}
}

func (l *ckLoader) problem(format string, a ...any) {
	l.problems = append(l.problems, fmt.Errorf(format, a...))
}

func (l *ckLoader) close() { l.ck.Close() }

func (l *ckLoader) path(rel string) string { return filepath.Join(l.dir, filepath.FromSlash(rel)) }

func (l *ckLoader) run() {
	st, err := os.Stat(l.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			l.problem("%s: no such directory", l.dir)
		} else {
			l.problem("%v", err)
		}
		return
	}
	if !st.IsDir() {
		l.problem("%s: not a directory (a SwiftVR checkpoint is a directory holding %s, %s and %s/)", l.dir, ReAEFile, PromptFile, TransformerDir)
		return
	}
	l.ck.ReAE = l.openFile(ReAEFile)
	l.ck.Prompt = l.openFile(PromptFile)
	l.readConfig()
	l.openDiT()

	l.readDims()
	l.ck.Config, l.ck.Dims = l.cfg, l.dims
	if l.ck.ReAE != nil {
		l.checkPart(ReAEFile, l.ck.ReAE, reaeSpecs(l.dims), floatDTypes, false)
	}
	if l.ck.Prompt != nil {
		l.checkPrompt()
	}
	if l.ck.DiT != nil && l.cfgOK {
		l.checkPart("transformer", l.ck.DiT, ditSpecs(l.dims, ""), floatDTypes, true)
	}
	l.checkLatents()
}

// openFile opens one single-file part, refusing anything that is not safetensors.
func (l *ckLoader) openFile(rel string) *safetensors.Set {
	p := l.path(rel)
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			l.problem("%s: missing", rel)
		} else {
			l.problem("%s: %v", rel, err)
		}
		return nil
	}
	if st.IsDir() {
		l.problem("%s: is a directory", rel)
		return nil
	}
	l.files = append(l.files, rel)
	if err := safetensors.CheckNotPickle(p); err != nil {
		l.problems = append(l.problems, fileErr(rel, p, err))
		return nil
	}
	// OpenSet validates the header and that every tensor's data lies inside
	// the file, so a truncated download fails here.
	s, err := safetensors.OpenSet(p)
	if err != nil {
		l.problems = append(l.problems, fileErr(rel, p, err))
		return nil
	}
	return s
}

func (l *ckLoader) readConfig() {
	p := l.path(ConfigFile)
	b, err := readLimited(p, maxConfigBytes)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			l.problem("%s: missing", ConfigFile)
		} else {
			l.problem("%s: %v", ConfigFile, err)
		}
		return
	}
	l.files = append(l.files, ConfigFile)
	c := defaultConfig()
	if err := json.Unmarshal(b, &c); err != nil {
		l.problem("%s: not valid JSON: %v", ConfigFile, err)
		return
	}
	var raw map[string]json.RawMessage
	_ = json.Unmarshal(b, &raw)
	if v, ok := raw["out_channels"]; ok && string(v) == "null" {
		c.OutChannels = c.InChannels // Diffusers: out_channels or in_channels
	}
	n := len(l.problems)
	bad := func(format string, a ...any) { l.problem(ConfigFile+": "+format, a...) }
	if c.ClassName != "" && c.ClassName != configClassName {
		bad("_class_name is %q, expected %q", c.ClassName, configClassName)
	}
	if len(c.PatchSize) != 3 || c.PatchSize[0] <= 0 || c.PatchSize[1] <= 0 || c.PatchSize[2] <= 0 {
		bad("patch_size %v must be three positive sizes", c.PatchSize)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"num_attention_heads", c.NumAttentionHeads}, {"attention_head_dim", c.AttentionHeadDim}, {"in_channels", c.InChannels},
		{"out_channels", c.OutChannels}, {"text_dim", c.TextDim}, {"freq_dim", c.FreqDim}, {"ffn_dim", c.FFNDim},
		{"num_layers", c.NumLayers}, {"rope_max_seq_len", c.RopeMaxSeqLen}} {
		if f.v <= 0 {
			bad("%s is %d, must be positive", f.name, f.v)
		}
	}
	if c.AttentionHeadDim > 0 && (c.AttentionHeadDim%2 != 0 || c.AttentionHeadDim < 6) {
		bad("attention_head_dim %d cannot be split into even temporal/height/width RoPE parts", c.AttentionHeadDim)
	}
	if c.FreqDim > 0 && c.FreqDim%2 != 0 {
		bad("freq_dim %d must be even", c.FreqDim)
	}
	if c.QKNorm != supportedQKNorm {
		bad("qk_norm %q is not supported (only %q)", c.QKNorm, supportedQKNorm)
	}
	if !c.CrossAttnNorm {
		bad("cross_attn_norm false is not supported")
	}
	if !(c.Eps > 0 && c.Eps < 1) {
		bad("eps %g must be in (0, 1)", c.Eps)
	}
	if c.ImageDim != nil || c.AddedKVProjDim != nil || c.PosEmbedSeqLen != nil {
		bad("image conditioning (image_dim, added_kv_proj_dim, pos_embed_seq_len) is not supported")
	}
	l.cfg = c
	l.cfgOK = len(l.problems) == n
}

// openDiT opens the transformer weights: a sharded index when there is one,
// else the single file.
func (l *ckLoader) openDiT() {
	idx := l.path(DiTIndexFile)
	if _, err := os.Stat(idx); err == nil {
		l.openShardedDiT(idx)
		return
	}
	if _, err := os.Stat(l.path(DiTFile)); err != nil && errors.Is(err, fs.ErrNotExist) {
		msg := fmt.Sprintf("%s (or the sharded %s): missing", DiTFile, filepath.Base(DiTIndexFile))
		if _, err := os.Stat(l.path(TransformerDir + "/diffusion_pytorch_model.bin")); err == nil {
			msg += "; found diffusion_pytorch_model.bin, a PyTorch pickle: a SwiftVR checkpoint must be safetensors (vsr reads .pth only as state dicts of the super-resolution architectures it knows)"
		}
		l.problem("%s", msg)
		return
	}
	l.ck.DiT = l.openFile(DiTFile)
}

func (l *ckLoader) openShardedDiT(idx string) {
	l.files = append(l.files, DiTIndexFile)
	// OpenSet checks every shard the index names, pickles included.
	s, err := safetensors.OpenSet(idx)
	if err != nil {
		l.problems = append(l.problems, fileErr(DiTIndexFile, idx, err))
		return
	}
	for _, p := range s.Files() {
		l.files = append(l.files, relTo(l.dir, p))
	}
	l.ck.DiT = s
}

// readDims reads the sizes: the ReAE's from its tensors, the DiT's from
// config.json, the prompt length from prompt_emb.
func (l *ckLoader) readDims() {
	d := &l.dims
	if s := l.ck.ReAE; s != nil {
		d.ReAEChannels = dimOf(s, dimSrc{"encoder.0.weight", 4, 1}, dimSrc{"decoder.22.weight", 4, 0}, dimSrc{"decoder.22.bias", 1, 0})
		d.EncoderWidth = dimOf(s, dimSrc{"encoder.0.weight", 4, 0}, dimSrc{"encoder.0.bias", 1, 0}, dimSrc{"encoder.3.weight", 4, 0}, dimSrc{"encoder.17.weight", 4, 1})
		d.LatentChannels = dimOf(s, dimSrc{"encoder.17.weight", 4, 0}, dimSrc{"encoder.17.bias", 1, 0}, dimSrc{"decoder.1.weight", 4, 1})
		d.DecoderWidths[0] = dimOf(s, dimSrc{"decoder.1.weight", 4, 0}, dimSrc{"decoder.1.bias", 1, 0}, dimSrc{"decoder.8.weight", 4, 1}, dimSrc{"decoder.7.proj.weight", 4, 0})
		d.DecoderWidths[1] = dimOf(s, dimSrc{"decoder.8.weight", 4, 0}, dimSrc{"decoder.14.weight", 4, 1}, dimSrc{"decoder.13.conv3d.weight", 5, 0})
		d.DecoderWidths[2] = dimOf(s, dimSrc{"decoder.14.weight", 4, 0}, dimSrc{"decoder.20.weight", 4, 1}, dimSrc{"decoder.19.conv3d.weight", 5, 0})
		d.DecoderWidths[3] = dimOf(s, dimSrc{"decoder.20.weight", 4, 0}, dimSrc{"decoder.22.weight", 4, 1})
	}
	if l.cfgOK {
		c := l.cfg
		d.Heads, d.HeadDim, d.Dim = c.NumAttentionHeads, c.AttentionHeadDim, c.NumAttentionHeads*c.AttentionHeadDim
		d.FFNDim, d.Layers, d.TextDim, d.FreqDim = c.FFNDim, c.NumLayers, c.TextDim, c.FreqDim
		d.PatchSize = [3]int{c.PatchSize[0], c.PatchSize[1], c.PatchSize[2]}
		d.InChannels, d.OutChannels = c.InChannels, c.OutChannels
	}
	if s := l.ck.Prompt; s != nil {
		d.PromptTokens = dimOf(s, dimSrc{PromptEmbKey, 3, 1}, dimSrc{PromptMaskKey, 2, 1}, dimSrc{PromptIDsKey, 2, 1})
	}
}

// dimSrc names a tensor axis that carries a size: the tensor, its rank, the axis.
type dimSrc struct {
	name string
	rank int
	axis int
}

// dimOf returns the size from the first source present with the expected rank, or 0.
func dimOf(s *safetensors.Set, srcs ...dimSrc) int {
	for _, c := range srcs {
		if info, ok := s.Info(c.name); ok && len(info.Shape) == c.rank && info.Shape[c.axis] > 0 {
			return info.Shape[c.axis]
		}
	}
	return 0
}

var (
	floatDTypes = map[safetensors.DType]bool{"F32": true, "BF16": true, "F16": true}
	intDTypes   = map[safetensors.DType]bool{"I64": true, "I32": true}
)

// checkPart checks that every expected tensor is in s with the expected shape
// and a supported dtype, that its byte range matches, and that s holds nothing
// else (the official loaders are strict).
//
// With fp8, the linear weights that Quantize writes may be float8 e4m3
// (LightX2V's layout): each then needs its float scale NAME_scale of shape
// [out, 1].
func (l *ckLoader) checkPart(file string, s *safetensors.Set, want []TensorSpec, dtypes map[safetensors.DType]bool, fp8 bool) {
	expected := make(map[string]bool, len(want))
	var missing []string
	for i := range want {
		w := &want[i]
		expected[w.Name] = true
		info, ok := s.Info(w.Name)
		if !ok {
			missing = append(missing, w.Name)
			continue
		}
		if fp8 && info.DType == safetensors.F8E4M3 && fp8Quantized(w.Name, w.Shape) {
			sc := w.Name + scaleSuffix
			expected[sc] = true
			if si, ok := s.Info(sc); !ok {
				l.problem("%s: fp8 tensor %s has no scale %s", file, w.Name, sc)
			} else if knownShape(w.Shape) {
				l.checkTensor(file, si, []int{w.Shape[0], 1}, floatDTypes)
			}
			l.checkTensor(file, info, w.Shape, map[safetensors.DType]bool{safetensors.F8E4M3: true})
			continue
		}
		l.checkTensor(file, info, w.Shape, dtypes)
	}
	if len(missing) > 0 {
		l.problem("%s: %s", file, listNames("missing tensor", missing))
	}
	var extra []string
	for _, n := range s.Names() {
		if !expected[n] {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		l.problem("%s: %s", file, listNames("unexpected tensor", extra))
	}
}

func (l *ckLoader) checkTensor(file string, info *safetensors.TensorInfo, shape []int, dtypes map[safetensors.DType]bool) {
	if !dtypes[info.DType] {
		l.problem("%s: tensor %s has unsupported dtype %s (supported: %s)", file, info.Name, info.DType, strings.Join(sortedNames(dtypes), ", "))
		return
	}
	if !knownShape(shape) {
		return // a size it depends on could not be read; that is reported elsewhere
	}
	if !slices.Equal(info.Shape, shape) {
		l.problem("%s: tensor %s has shape %s, expected %s", file, info.Name, fmtShape(info.Shape), fmtShape(shape))
		return
	}
	if n := shapeElems(info.Shape) * int64(info.DType.Size()); info.End-info.Begin != n {
		l.problem("%s: tensor %s: data range [%d, %d) is %d bytes, its %s %s needs %d", file, info.Name, info.Begin, info.End,
			info.End-info.Begin, info.DType, fmtShape(info.Shape), n)
	}
}

func (l *ckLoader) checkPrompt() {
	s, d := l.ck.Prompt, l.dims
	info, ok := s.Info(PromptEmbKey)
	switch {
	case !ok:
		l.problem("%s: missing tensor %s", PromptFile, PromptEmbKey)
	case !floatDTypes[info.DType]:
		l.problem("%s: tensor %s has unsupported dtype %s (supported: BF16, F16, F32)", PromptFile, PromptEmbKey, info.DType)
	case len(info.Shape) != 3 || info.Shape[0] < 1 || info.Shape[1] < 1:
		l.problem("%s: tensor %s has shape %s, expected [1, tokens, %d]", PromptFile, PromptEmbKey, fmtShape(info.Shape), d.TextDim)
	case l.cfgOK && info.Shape[2] != d.TextDim:
		l.problem("%s: tensor %s has shape %s, expected [1, %d, %d] (text_dim %d from %s)", PromptFile, PromptEmbKey,
			fmtShape(info.Shape), info.Shape[1], d.TextDim, d.TextDim, ConfigFile)
	default:
		l.checkTensor(PromptFile, info, info.Shape, floatDTypes)
	}
	// attention_mask and input_ids are unused; when present they must fit.
	for _, k := range []string{PromptMaskKey, PromptIDsKey} {
		info, ok := s.Info(k)
		if !ok {
			continue
		}
		if len(info.Shape) != 2 || info.Shape[0] < 1 || (d.PromptTokens > 0 && info.Shape[1] != d.PromptTokens) {
			l.problem("%s: tensor %s has shape %s, expected [1, %d]", PromptFile, k, fmtShape(info.Shape), d.PromptTokens)
			continue
		}
		l.checkTensor(PromptFile, info, info.Shape, intDTypes)
	}
}

// checkLatents checks that the ReAE's latent space is the DiT's.
func (l *ckLoader) checkLatents() {
	d := l.dims
	if !l.cfgOK || d.LatentChannels == 0 {
		return
	}
	if d.LatentChannels != d.InChannels || d.LatentChannels != d.OutChannels {
		l.problem("%s has %d latent channels but %s has in_channels %d, out_channels %d", ReAEFile, d.LatentChannels,
			ConfigFile, d.InChannels, d.OutChannels)
	}
}

func readLimited(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.IsDir() {
		return nil, errors.New("is a directory")
	}
	if st.Size() > limit {
		return nil, fmt.Errorf("%d bytes, larger than the %d allowed", st.Size(), limit)
	}
	return os.ReadFile(p)
}

func listNames(what string, names []string) string {
	const show = 5
	s := what + pluralS(len(names)) + " " + strings.Join(names[:min(show, len(names))], ", ")
	if len(names) > show {
		s += fmt.Sprintf(" and %d more", len(names)-show)
	}
	return s
}

func knownShape(s []int) bool {
	for _, d := range s {
		if d <= 0 {
			return false
		}
	}
	return true
}

func fmtShape(s []int) string {
	parts := make([]string, len(s))
	for i, d := range s {
		parts[i] = fmt.Sprint(d)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func sortedNames[V any, K ~string](m map[K]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, string(k))
	}
	sort.Strings(out)
	return out
}

func relTo(dir, p string) string {
	if r, err := filepath.Rel(dir, p); err == nil {
		return filepath.ToSlash(r)
	}
	return p
}

// fileErr prefixes err with the file's name unless it already names it.
func fileErr(rel, p string, err error) error {
	if strings.Contains(err.Error(), p) {
		return err
	}
	return fmt.Errorf("%s: %w", rel, err)
}
