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
// one. Files are only ever parsed as safetensors and JSON: a pickle in place of
// a .safetensors file is refused, never executed.
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

// Family is the name under which this checkpoint layout is reported.
const Family = "swiftvr"

// File names of the official layout, relative to the checkpoint directory.
const (
	ReAEFile       = "reae.safetensors"
	PromptFile     = "prompt_embedding.safetensors"
	TransformerDir = "transformer"
	ConfigFile     = "transformer/config.json"
	DiTFile        = "transformer/diffusion_pytorch_model.safetensors"
	DiTIndexFile   = "transformer/diffusion_pytorch_model.safetensors.index.json"
)

// Tensor names of the prompt embedding file. Only prompt_emb is used.
const (
	PromptEmbKey  = "prompt_emb"
	PromptMaskKey = "attention_mask"
	PromptIDsKey  = "input_ids"
)

const (
	configClassName  = "WanTransformer3DModel"
	supportedQKNorm  = "rms_norm_across_heads"
	maxConfigBytes   = 1 << 20
	reaeKernel       = 3 // every ReAE conv is 3x3
	memBlocksPerUnit = 3 // MemBlocks per encoder/decoder stage
)

// Part names one of the three weight files of a checkpoint.
type Part string

// The parts of a SwiftVR checkpoint.
const (
	PartReAE   Part = "reae"
	PartPrompt Part = "prompt"
	PartDiT    Part = "dit"
)

// Config is transformer/config.json: the Diffusers WanTransformer3DModel
// constructor arguments. Fields absent from the file take Diffusers' defaults.
type Config struct {
	ClassName         string  `json:"_class_name"`
	DiffusersVersion  string  `json:"_diffusers_version,omitempty"`
	AddedKVProjDim    *int    `json:"added_kv_proj_dim"`
	AttentionHeadDim  int     `json:"attention_head_dim"`
	CrossAttnNorm     bool    `json:"cross_attn_norm"`
	Eps               float64 `json:"eps"`
	FFNDim            int     `json:"ffn_dim"`
	FreqDim           int     `json:"freq_dim"`
	ImageDim          *int    `json:"image_dim"`
	InChannels        int     `json:"in_channels"`
	NumAttentionHeads int     `json:"num_attention_heads"`
	NumLayers         int     `json:"num_layers"`
	OutChannels       int     `json:"out_channels"`
	PatchSize         []int   `json:"patch_size"`
	PosEmbedSeqLen    *int    `json:"pos_embed_seq_len"`
	QKNorm            string  `json:"qk_norm"`
	RopeMaxSeqLen     int     `json:"rope_max_seq_len"`
	TextDim           int     `json:"text_dim"`

	// Present only when the config was saved by the official SwiftVR class
	// (rvr/models/transformer.py); Synth does not write them.
	EnableSWA        *bool `json:"enable_swa,omitempty"`
	SelfAttnWindowHW []int `json:"self_attn_window_hw,omitempty"`
}

// defaultConfig returns Diffusers' WanTransformer3DModel defaults, which apply
// to any field config.json leaves out.
func defaultConfig() Config {
	return Config{
		PatchSize: []int{1, 2, 2}, NumAttentionHeads: 40, AttentionHeadDim: 128,
		InChannels: 16, OutChannels: 16, TextDim: 4096, FreqDim: 256, FFNDim: 13824,
		NumLayers: 40, CrossAttnNorm: true, QKNorm: supportedQKNorm, Eps: 1e-6, RopeMaxSeqLen: 1024,
	}
}

// Dims are the sizes of a checkpoint, read from its tensors and config.json.
type Dims struct {
	// ReAE
	ReAEChannels   int    `json:"reae_channels"`   // encoder input / decoder output channels: 3 x 2 x 2 = 12
	EncoderWidth   int    `json:"encoder_width"`   // every encoder layer's width (64)
	DecoderWidths  [4]int `json:"decoder_widths"`  // decoder stage widths (512, 256, 128, 64)
	LatentChannels int    `json:"latent_channels"` // 48

	// DiT
	Dim          int    `json:"dim"`      // heads x head dim (3072)
	Heads        int    `json:"heads"`    // 24
	HeadDim      int    `json:"head_dim"` // 128
	FFNDim       int    `json:"ffn_dim"`  // 14336
	Layers       int    `json:"layers"`   // 30
	TextDim      int    `json:"text_dim"` // 4096
	FreqDim      int    `json:"freq_dim"` // 256
	PatchSize    [3]int `json:"patch_size"`
	InChannels   int    `json:"in_channels"`
	OutChannels  int    `json:"out_channels"`
	PromptTokens int    `json:"prompt_tokens"` // 512
}

// TensorSpec is one expected tensor: which file, its name, dtype and shape.
// Synth writes exactly these; Open checks a checkpoint against them.
type TensorSpec struct {
	Part  Part              `json:"part"`
	Name  string            `json:"name"`
	DType safetensors.DType `json:"dtype"`
	Shape []int             `json:"shape"`

	fill synthFill // how Synth generates the values
}

// Elems is the number of elements of the tensor.
func (t *TensorSpec) Elems() int64 { return shapeElems(t.Shape) }

// Bytes is the size of the tensor's data.
func (t *TensorSpec) Bytes() int64 { return t.Elems() * int64(t.DType.Size()) }

func shapeElems(s []int) int64 {
	n := int64(1)
	for _, d := range s {
		n *= int64(d)
	}
	return n
}

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

// configFor returns the config.json that describes d, with the published
// Wan2.2-TI2V-5B values for everything d does not set.
func configFor(d Dims) Config {
	c := defaultConfig()
	c.ClassName = configClassName
	c.DiffusersVersion = "0.35.0.dev0"
	c.PatchSize = []int{d.PatchSize[0], d.PatchSize[1], d.PatchSize[2]}
	c.NumAttentionHeads = d.Heads
	c.AttentionHeadDim = d.HeadDim
	c.InChannels = d.InChannels
	c.OutChannels = d.OutChannels
	c.TextDim = d.TextDim
	c.FreqDim = d.FreqDim
	c.FFNDim = d.FFNDim
	c.NumLayers = d.Layers
	return c
}

// Layout returns every tensor of a synthetic checkpoint of the given preset
// ("tiny" or "full"), in file order (ReAE, prompt, DiT), and the config.json it
// is written with. It reads and writes nothing. An unknown preset returns nil.
func Layout(name string) ([]TensorSpec, Config) {
	p, ok := presetFor(name)
	if !ok {
		return nil, Config{}
	}
	specs := reaeSpecs(p.dims)
	specs = append(specs, promptSpecs(p.dims, p.promptDType)...)
	specs = append(specs, ditSpecs(p.dims, p.ditDType)...)
	return specs, configFor(p.dims)
}

// reaeSpecs lists the ReAE tensors for the given widths, following the layer
// indices of the official reae.py (swiftvr/models/reae.py).
func reaeSpecs(d Dims) []TensorSpec {
	var s []TensorSpec
	add := func(name string, f synthFill, shape ...int) {
		s = append(s, TensorSpec{Part: PartReAE, Name: name, DType: "F32", Shape: shape, fill: f})
	}
	k := reaeKernel
	he := func(fanIn int) synthFill { return uniformFill(sqrt32(2 / float32(fanIn))) }
	lin := func(fanIn int) synthFill { return uniformFill(1 / sqrt32(float32(fanIn))) }
	bias := uniformFill(0.02)
	conv := func(prefix string, out, in int, hasBias, relu bool) {
		f := lin(in * k * k)
		if relu {
			f = he(in * k * k)
		}
		add(prefix+".weight", f, out, in, k, k)
		if hasBias {
			add(prefix+".bias", bias, out)
		}
	}
	memBlock := func(prefix string, c int) {
		conv(prefix+".conv.0", c, 2*c, true, true)
		conv(prefix+".conv.2", c, c, true, true)
		conv(prefix+".conv.4", c, c, true, false)
	}
	memBlocks := func(side string, first, c int) {
		for i := range memBlocksPerUnit {
			memBlock(fmt.Sprintf("%s.%d", side, first+i), c)
		}
	}
	tpool := func(i, c, stride int) {
		add(fmt.Sprintf("encoder.%d.conv.weight", i), lin(stride*c), c, stride*c, 1, 1)
	}

	e := d.EncoderWidth
	conv("encoder.0", e, d.ReAEChannels, true, true)
	tpool(2, e, 2)
	conv("encoder.3", e, e, false, false)
	memBlocks("encoder", 4, e)
	tpool(7, e, 2)
	conv("encoder.8", e, e, false, false)
	memBlocks("encoder", 9, e)
	tpool(12, e, 1)
	conv("encoder.13", e, e, false, false)
	memBlocks("encoder", 14, e)
	conv("encoder.17", d.LatentChannels, e, true, false)

	w := d.DecoderWidths
	conv("decoder.1", w[0], d.LatentChannels, true, true)
	memBlocks("decoder", 3, w[0])
	add("decoder.7.proj.weight", lin(w[0]), w[0], w[0], 1, 1)
	conv("decoder.8", w[1], w[0], false, false)
	memBlocks("decoder", 9, w[1])
	// TGrow(c, 2): each output frame sees two of the three temporal taps.
	add("decoder.13.conv3d.weight", lin(2*w[1]), w[1], w[1], 3, 1, 1)
	conv("decoder.14", w[2], w[1], false, false)
	memBlocks("decoder", 15, w[2])
	add("decoder.19.conv3d.weight", lin(2*w[2]), w[2], w[2], 3, 1, 1)
	conv("decoder.20", w[3], w[2], false, true)
	add("decoder.22.weight", uniformFill(0.25/sqrt32(float32(w[3]*k*k))), d.ReAEChannels, w[3], k, k)
	add("decoder.22.bias", aroundFill(0.5, 0.05), d.ReAEChannels)
	return s
}

// promptSpecs lists the prompt embedding file's tensors.
func promptSpecs(d Dims, dt safetensors.DType) []TensorSpec {
	return []TensorSpec{
		// The empty prompt's one token, then zero padding: the embedding
		// rows past the mask's length are zero, as Diffusers' Wan
		// pipelines pad the text encoder's output.
		{Part: PartPrompt, Name: PromptEmbKey, DType: dt, Shape: []int{1, d.PromptTokens, d.TextDim}, fill: synthFill{kind: fillNormal, std: 1, prefix: d.TextDim}},
		{Part: PartPrompt, Name: PromptMaskKey, DType: "I64", Shape: []int{1, d.PromptTokens}, fill: synthFill{kind: fillFirst}},
		{Part: PartPrompt, Name: PromptIDsKey, DType: "I64", Shape: []int{1, d.PromptTokens}, fill: synthFill{kind: fillFirst}},
	}
}

// ditSpecs lists the transformer tensors in Diffusers WanTransformer3DModel
// names (transformer_wan.py), in module order.
func ditSpecs(d Dims, dt safetensors.DType) []TensorSpec {
	var s []TensorSpec
	add := func(name string, f synthFill, shape ...int) {
		s = append(s, TensorSpec{Part: PartDiT, Name: name, DType: dt, Shape: shape, fill: f})
	}
	bias := uniformFill(0.02)
	linear := func(name string, out, in int, gain float32) {
		add(name+".weight", uniformFill(gain/sqrt32(float32(in))), out, in)
		add(name+".bias", bias, out)
	}
	dim := d.Dim
	pt, ph, pw := d.PatchSize[0], d.PatchSize[1], d.PatchSize[2]
	add("patch_embedding.weight", uniformFill(1/sqrt32(float32(d.InChannels*pt*ph*pw))), dim, d.InChannels, pt, ph, pw)
	add("patch_embedding.bias", bias, dim)
	linear("condition_embedder.time_embedder.linear_1", dim, d.FreqDim, 1)
	linear("condition_embedder.time_embedder.linear_2", dim, dim, 1)
	linear("condition_embedder.time_proj", 6*dim, dim, 0.5)
	linear("condition_embedder.text_embedder.linear_1", dim, d.TextDim, 1)
	linear("condition_embedder.text_embedder.linear_2", dim, dim, 1)
	norm := aroundFill(1, 0.02)
	for b := range d.Layers {
		p := fmt.Sprintf("blocks.%d.", b)
		for _, attn := range []string{"attn1", "attn2"} {
			for _, proj := range []string{"to_q", "to_k", "to_v", "to_out.0"} {
				linear(p+attn+"."+proj, dim, dim, 1)
			}
			add(p+attn+".norm_q.weight", norm, dim)
			add(p+attn+".norm_k.weight", norm, dim)
		}
		add(p+"norm2.weight", norm, dim)
		add(p+"norm2.bias", bias, dim)
		linear(p+"ffn.net.0.proj", d.FFNDim, dim, sqrt32(2))
		linear(p+"ffn.net.2", dim, d.FFNDim, 1)
		add(p+"scale_shift_table", uniformFill(1/sqrt32(float32(dim))), 1, 6, dim)
	}
	add("scale_shift_table", uniformFill(1/sqrt32(float32(dim))), 1, 2, dim)
	linear("proj_out", d.OutChannels*pt*ph*pw, dim, 0.5)
	return s
}

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

// PartCounts holds one number per checkpoint part.
type PartCounts struct {
	ReAE   int64 `json:"reae"`
	Prompt int64 `json:"prompt"`
	DiT    int64 `json:"dit"`
}

// Total is the sum over the parts.
func (p PartCounts) Total() int64 { return p.ReAE + p.Prompt + p.DiT }

// Report describes a checkpoint directory and everything wrong with it.
type Report struct {
	Family  string            `json:"family"`
	Dir     string            `json:"dir"`
	Files   []string          `json:"files"`            // files found, relative to Dir
	Tensors PartCounts        `json:"tensors"`          // tensors per part, as found
	Params  PartCounts        `json:"params"`           // parameters (elements) per part, as found
	DTypes  map[string]string `json:"dtypes,omitempty"` // dtypes per part, e.g. "BF16" or "BF16,I64"
	Dims    Dims              `json:"dims"`             // sizes read from the files (0 where unknown)
	// FP8 counts the DiT's weights in float8 e4m3 with a scale per output
	// channel (vsr checkpoint quantize, LightX2V's fp8 layout).
	FP8      int      `json:"fp8_weights"`
	Config   *Config  `json:"config,omitempty"` // config.json, when it could be read
	Problems []string `json:"problems"`         // empty when the checkpoint is usable
}

// OK reports whether the checkpoint has no problems.
func (r *Report) OK() bool { return len(r.Problems) == 0 }

// Inspect examines the checkpoint in dir without stopping at the first
// problem. It never fails: what it cannot read becomes a Problem.
func Inspect(dir string) *Report {
	l := newCkLoader(dir)
	l.run()
	defer l.close()
	r := &Report{Family: Family, Dir: dir, Files: l.files, Dims: l.dims, DTypes: map[string]string{}, Problems: []string{}}
	if l.cfgOK {
		c := l.cfg
		r.Config = &c
	}
	for _, ps := range []struct {
		part Part
		set  *safetensors.Set
		t, p *int64
	}{{PartReAE, l.ck.ReAE, &r.Tensors.ReAE, &r.Params.ReAE}, {PartPrompt, l.ck.Prompt, &r.Tensors.Prompt, &r.Params.Prompt}, {PartDiT, l.ck.DiT, &r.Tensors.DiT, &r.Params.DiT}} {
		if ps.set == nil {
			continue
		}
		seen := map[string]bool{}
		var dts []string
		for _, n := range ps.set.Names() {
			info, ok := ps.set.Info(n)
			if !ok {
				continue
			}
			*ps.t++
			*ps.p += shapeElems(info.Shape)
			if ps.part == PartDiT && info.DType == safetensors.F8E4M3 {
				r.FP8++
			}
			if !seen[string(info.DType)] {
				seen[string(info.DType)] = true
				dts = append(dts, string(info.DType))
			}
		}
		sort.Strings(dts)
		r.DTypes[string(ps.part)] = strings.Join(dts, ",")
	}
	for _, p := range l.problems {
		r.Problems = append(r.Problems, p.Error())
	}
	return r
}

// String formats the report for a terminal.
func (r *Report) String() string {
	var b strings.Builder
	row := func(k, format string, a ...any) { fmt.Fprintf(&b, "%-10s %s\n", k, fmt.Sprintf(format, a...)) }
	row("family", "%s", r.Family)
	row("dir", "%s", r.Dir)
	if len(r.Files) == 0 {
		row("files", "none")
	}
	for i, f := range r.Files {
		k := ""
		if i == 0 {
			k = "files"
		}
		row(k, "%s", f)
	}
	part := func(name string, t, p int64, dt string) {
		if dt != "" {
			dt = " (" + dt + ")"
		}
		row(name, "%d tensors, %s params%s", t, humanCount(p), dt)
	}
	part("reae", r.Tensors.ReAE, r.Params.ReAE, r.DTypes[string(PartReAE)])
	part("prompt", r.Tensors.Prompt, r.Params.Prompt, r.DTypes[string(PartPrompt)])
	part("dit", r.Tensors.DiT, r.Params.DiT, r.DTypes[string(PartDiT)])
	if r.FP8 > 0 {
		row("fp8", "%d linear weights in float8 e4m3, a float32 scale per output channel (NAME.weight_scale); dequantized at load", r.FP8)
	}
	d := r.Dims
	row("reae dims", "in %d, encoder %d, decoder %d/%d/%d/%d, latent %d", d.ReAEChannels, d.EncoderWidth,
		d.DecoderWidths[0], d.DecoderWidths[1], d.DecoderWidths[2], d.DecoderWidths[3], d.LatentChannels)
	row("dit dims", "dim %d = %d heads x %d, ffn %d, %d layers, text %d, freq %d, patch %dx%dx%d, in %d, out %d, prompt %d tokens",
		d.Dim, d.Heads, d.HeadDim, d.FFNDim, d.Layers, d.TextDim, d.FreqDim, d.PatchSize[0], d.PatchSize[1], d.PatchSize[2],
		d.InChannels, d.OutChannels, d.PromptTokens)
	if len(r.Problems) == 0 {
		row("problems", "none")
	} else {
		row("problems", "%d", len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  - %s\n", p)
		}
	}
	return b.String()
}

func humanCount(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.3fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
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
			msg += "; found diffusion_pytorch_model.bin, a PyTorch pickle, which is never loaded"
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
