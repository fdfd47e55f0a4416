package swiftvr

import (
	"fmt"

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
