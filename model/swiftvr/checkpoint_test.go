package swiftvr

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"github.com/vsr-dev/vsr/tensor/half"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

func countParts(specs []TensorSpec) (n, params map[Part]int64) {
	n, params = map[Part]int64{}, map[Part]int64{}
	for i := range specs {
		n[specs[i].Part]++
		params[specs[i].Part] += specs[i].Elems()
	}
	return n, params
}

func specMap(specs []TensorSpec) map[string]TensorSpec {
	m := map[string]TensorSpec{}
	for _, s := range specs {
		m[string(s.Part)+":"+s.Name] = s
	}
	return m
}

var blockIndex = regexp.MustCompile(`^blocks\.\d+\.`)

// namePattern is the set of names with block indices removed.
func namePattern(specs []TensorSpec) []string {
	seen := map[string]bool{}
	for _, s := range specs {
		seen[string(s.Part)+":"+blockIndex.ReplaceAllString(s.Name, "blocks.N.")] = true
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestLayoutFull(t *testing.T) {
	specs, cfg := Layout("full")
	n, params := countParts(specs)
	if n[PartReAE] != 128 || n[PartDiT] != 825 || n[PartPrompt] != 3 {
		t.Fatalf("tensor counts reae %d dit %d prompt %d, want 128 825 3", n[PartReAE], n[PartDiT], n[PartPrompt])
	}
	if p := params[PartReAE]; p < 40.5e6 || p > 41.5e6 {
		t.Errorf("ReAE params %d, want about 41M", p)
	}
	if p := params[PartDiT]; p < 4.95e9 || p > 5.05e9 {
		t.Errorf("DiT params %d, want about 5B", p)
	}
	t.Logf("full: ReAE %d params, DiT %d params, prompt %d elements", params[PartReAE], params[PartDiT], params[PartPrompt])
	m := specMap(specs)
	want := map[string][]int{
		"dit:patch_embedding.weight":                           {3072, 48, 1, 2, 2},
		"dit:patch_embedding.bias":                             {3072},
		"dit:condition_embedder.time_embedder.linear_1.weight": {3072, 256},
		"dit:condition_embedder.time_embedder.linear_2.weight": {3072, 3072},
		"dit:condition_embedder.time_proj.weight":              {18432, 3072},
		"dit:condition_embedder.time_proj.bias":                {18432},
		"dit:condition_embedder.text_embedder.linear_1.weight": {3072, 4096},
		"dit:condition_embedder.text_embedder.linear_2.bias":   {3072},
		"dit:blocks.0.attn1.to_q.weight":                       {3072, 3072},
		"dit:blocks.0.attn1.norm_q.weight":                     {3072},
		"dit:blocks.7.attn2.to_out.0.bias":                     {3072},
		"dit:blocks.29.attn2.norm_k.weight":                    {3072},
		"dit:blocks.0.norm2.weight":                            {3072},
		"dit:blocks.0.norm2.bias":                              {3072},
		"dit:blocks.0.ffn.net.0.proj.weight":                   {14336, 3072},
		"dit:blocks.0.ffn.net.0.proj.bias":                     {14336},
		"dit:blocks.29.ffn.net.2.weight":                       {3072, 14336},
		"dit:blocks.3.scale_shift_table":                       {1, 6, 3072},
		"dit:scale_shift_table":                                {1, 2, 3072},
		"dit:proj_out.weight":                                  {192, 3072},
		"dit:proj_out.bias":                                    {192},
		"reae:encoder.0.weight":                                {64, 12, 3, 3},
		"reae:encoder.2.conv.weight":                           {64, 128, 1, 1},
		"reae:encoder.3.weight":                                {64, 64, 3, 3},
		"reae:encoder.4.conv.0.weight":                         {64, 128, 3, 3},
		"reae:encoder.4.conv.4.bias":                           {64},
		"reae:encoder.12.conv.weight":                          {64, 64, 1, 1},
		"reae:encoder.17.weight":                               {48, 64, 3, 3},
		"reae:decoder.1.weight":                                {512, 48, 3, 3},
		"reae:decoder.5.conv.0.weight":                         {512, 1024, 3, 3},
		"reae:decoder.7.proj.weight":                           {512, 512, 1, 1},
		"reae:decoder.8.weight":                                {256, 512, 3, 3},
		"reae:decoder.13.conv3d.weight":                        {256, 256, 3, 1, 1},
		"reae:decoder.19.conv3d.weight":                        {128, 128, 3, 1, 1},
		"reae:decoder.20.weight":                               {64, 128, 3, 3},
		"reae:decoder.22.weight":                               {12, 64, 3, 3},
		"reae:decoder.22.bias":                                 {12},
		"prompt:prompt_emb":                                    {1, 512, 4096},
		"prompt:attention_mask":                                {1, 512},
		"prompt:input_ids":                                     {1, 512},
	}
	for name, shape := range want {
		s, ok := m[name]
		if !ok {
			t.Errorf("%s missing", name)
		} else if !slices.Equal(s.Shape, shape) {
			t.Errorf("%s shape %v, want %v", name, s.Shape, shape)
		}
	}
	for _, absent := range []string{"reae:encoder.3.bias", "reae:decoder.8.bias", "reae:decoder.7.proj.bias", "dit:blocks.0.norm1.weight", "dit:norm_out.weight"} {
		if _, ok := m[absent]; ok {
			t.Errorf("%s should not exist", absent)
		}
	}
	for _, s := range specs {
		wantDT := map[Part]safetensors.DType{PartReAE: "F32", PartDiT: "BF16"}[s.Part]
		if s.Part == PartPrompt {
			wantDT = map[string]safetensors.DType{PromptEmbKey: "BF16", PromptMaskKey: "I64", PromptIDsKey: "I64"}[s.Name]
		}
		if s.DType != wantDT {
			t.Errorf("%s:%s dtype %s, want %s", s.Part, s.Name, s.DType, wantDT)
		}
	}

	// config.json: the Wan2.2-TI2V-5B values, every Diffusers field.
	if cfg.ClassName != "WanTransformer3DModel" || !slices.Equal(cfg.PatchSize, []int{1, 2, 2}) || cfg.NumAttentionHeads != 24 ||
		cfg.AttentionHeadDim != 128 || cfg.InChannels != 48 || cfg.OutChannels != 48 || cfg.TextDim != 4096 || cfg.FreqDim != 256 ||
		cfg.FFNDim != 14336 || cfg.NumLayers != 30 || !cfg.CrossAttnNorm || cfg.QKNorm != "rms_norm_across_heads" || cfg.Eps != 1e-6 ||
		cfg.RopeMaxSeqLen != 1024 || cfg.ImageDim != nil || cfg.AddedKVProjDim != nil || cfg.PosEmbedSeqLen != nil {
		t.Errorf("full config %+v", cfg)
	}
	b, _ := json.Marshal(cfg)
	var raw map[string]any
	json.Unmarshal(b, &raw)
	for _, k := range []string{"_class_name", "_diffusers_version", "added_kv_proj_dim", "attention_head_dim", "cross_attn_norm", "eps",
		"ffn_dim", "freq_dim", "image_dim", "in_channels", "num_attention_heads", "num_layers", "out_channels", "patch_size",
		"pos_embed_seq_len", "qk_norm", "rope_max_seq_len", "text_dim"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("config.json lacks %q", k)
		}
	}
	if len(raw) != 18 {
		t.Errorf("config.json has %d keys, want 18: %s", len(raw), b)
	}
}

func TestLayoutTinySameStructure(t *testing.T) {
	full, _ := Layout("full")
	tiny, cfg := Layout("tiny")
	n, params := countParts(tiny)
	if n[PartReAE] != 128 || n[PartDiT] != 27*2+15 || n[PartPrompt] != 3 {
		t.Fatalf("tiny counts reae %d dit %d prompt %d", n[PartReAE], n[PartDiT], n[PartPrompt])
	}
	if !slices.Equal(namePattern(full), namePattern(tiny)) {
		t.Errorf("tiny and full name patterns differ:\n%v\n%v", namePattern(full), namePattern(tiny))
	}
	fm, tm := specMap(full), specMap(tiny)
	for k, s := range tm {
		if f, ok := fm[k]; !ok || len(f.Shape) != len(s.Shape) || f.DType != s.DType {
			t.Errorf("%s: tiny %v %s vs full %v %s", k, s.Shape, s.DType, f.Shape, f.DType)
		}
	}
	if cfg.NumLayers != 2 || cfg.NumAttentionHeads != 2 || cfg.AttentionHeadDim != 128 || cfg.FFNDim != 512 || cfg.TextDim != 64 {
		t.Errorf("tiny config %+v", cfg)
	}
	if s := tm["reae:decoder.1.weight"]; !slices.Equal(s.Shape, []int{32, 48, 3, 3}) {
		t.Errorf("tiny decoder.1.weight %v", s.Shape)
	}
	t.Logf("tiny: ReAE %d params, DiT %d params, prompt %d elements", params[PartReAE], params[PartDiT], params[PartPrompt])
	if specs, _ := Layout("huge"); specs != nil {
		t.Error("unknown presetSpec returned a layout")
	}
}

func synthTiny(t *testing.T, seed uint64) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ck")
	if err := Synth(dir, "tiny", seed); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestSynthTinyOpens(t *testing.T) {
	dir := synthTiny(t, 7)
	if !IsCheckpointDir(dir) {
		t.Fatal("IsCheckpointDir false")
	}
	for _, f := range []string{ReAEFile, PromptFile, ConfigFile, DiTFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	p, _ := presetFor("tiny")
	if ck.Dims != p.dims {
		t.Errorf("dims %+v, want %+v", ck.Dims, p.dims)
	}
	if got := len(ck.ReAE.Names()); got != 128 {
		t.Errorf("ReAE %d tensors", got)
	}
	if got := len(ck.Prompt.Names()); got != 3 {
		t.Errorf("prompt %d tensors", got)
	}
	if got := len(ck.DiT.Names()); got != 69 {
		t.Errorf("DiT %d tensors", got)
	}
	_, cfg := Layout("tiny")
	if ck.Config.NumLayers != cfg.NumLayers || ck.Config.FFNDim != cfg.FFNDim || ck.Config.QKNorm != cfg.QKNorm {
		t.Errorf("config %+v", ck.Config)
	}
	emb, err := ck.PromptEmbedding()
	if err != nil || len(emb) != 16*64 {
		t.Fatalf("prompt embedding %d values, %v", len(emb), err)
	}
	// The empty prompt's token, then zero padding.
	checkStats(t, "prompt_emb", emb[:64], 0, 1)
	if slices.ContainsFunc(emb[64:], func(v float32) bool { return v != 0 }) {
		t.Error("prompt_emb: padding rows are not zero")
	}

	// The weights have the intended statistics.
	stats := []struct {
		set       *safetensors.Set
		name      string
		mean, std float64
	}{
		{ck.DiT, "blocks.0.attn1.to_q.weight", 0, 1 / math.Sqrt(256)},
		{ck.DiT, "blocks.1.ffn.net.0.proj.weight", 0, math.Sqrt(2.0 / 256)},
		{ck.DiT, "blocks.1.attn2.norm_k.weight", 1, 0.02},
		{ck.DiT, "condition_embedder.time_proj.weight", 0, 0.5 / 16},
		{ck.ReAE, "decoder.9.conv.0.weight", 0, math.Sqrt(2.0 / (32 * 9))},
		{ck.ReAE, "encoder.2.conv.weight", 0, 1 / math.Sqrt(32)},
	}
	for _, s := range stats {
		v, err := s.set.Float32(s.name)
		if err != nil {
			t.Fatal(err)
		}
		checkStats(t, s.name, v, s.mean, s.std)
	}
	mask, _ := ck.Prompt.Bytes(PromptMaskKey)
	if mask[0] != 1 || bytes.Count(mask, []byte{0}) != len(mask)-1 {
		t.Errorf("attention_mask % x", mask[:16])
	}

	r := Inspect(dir)
	if !r.OK() {
		t.Fatalf("problems: %v", r.Problems)
	}
	if r.Tensors != (PartCounts{128, 3, 69}) || r.Family != "swiftvr" || r.DTypes["dit"] != "BF16" || r.DTypes["prompt"] != "BF16,I64" || r.DTypes["reae"] != "F32" {
		t.Errorf("report %+v", r)
	}
	if !strings.Contains(r.String(), "problems   none") {
		t.Errorf("report text:\n%s", r)
	}
	if _, err := json.Marshal(r); err != nil {
		t.Error(err)
	}
	t.Logf("\n%s", r)
}

func checkStats(t *testing.T, name string, v []float32, mean, std float64) {
	t.Helper()
	var s, s2 float64
	for _, x := range v {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			t.Fatalf("%s: non-finite value", name)
		}
		s += float64(x)
		s2 += float64(x) * float64(x)
	}
	m := s / float64(len(v))
	sd := math.Sqrt(s2/float64(len(v)) - m*m)
	if math.Abs(m-mean) > 0.1*std+0.01*math.Abs(mean) || math.Abs(sd-std) > 0.1*std {
		t.Errorf("%s: mean %.4f std %.4f, want %.4f %.4f", name, m, sd, mean, std)
	}
}

func TestSynthDeterministic(t *testing.T) {
	a, b, c := synthTiny(t, 42), synthTiny(t, 42), synthTiny(t, 43)
	for _, f := range []string{ReAEFile, PromptFile, ConfigFile, DiTFile} {
		ba, err := os.ReadFile(filepath.Join(a, f))
		if err != nil {
			t.Fatal(err)
		}
		bb, _ := os.ReadFile(filepath.Join(b, f))
		bc, _ := os.ReadFile(filepath.Join(c, f))
		if !bytes.Equal(ba, bb) {
			t.Errorf("%s differs between two runs with the same seed", f)
		}
		if f != ConfigFile && bytes.Equal(ba, bc) {
			t.Errorf("%s is the same for seeds 42 and 43", f)
		}
	}
}

// TestShardedDiT writes the tiny DiT as two shards plus an index, the full
// preset's layout, and opens it.
func TestShardedDiT(t *testing.T) {
	dir := synthTiny(t, 1)
	specs, _ := Layout("tiny")
	var dit []TensorSpec
	for _, s := range specs {
		if s.Part == PartDiT {
			dit = append(dit, s)
		}
	}
	os.Remove(filepath.Join(dir, DiTFile))
	if err := writeShards(filepath.Join(dir, TransformerDir), dit, 2, 1, nil); err != nil {
		t.Fatal(err)
	}
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	if n := len(ck.DiT.Files()); n != 2 || len(ck.DiT.Names()) != 69 {
		t.Errorf("%d shards, %d tensors", n, len(ck.DiT.Names()))
	}
	r := Inspect(dir)
	if !r.OK() || !slices.Contains(r.Files, "transformer/diffusion_pytorch_model-00002-of-00002.safetensors") {
		t.Errorf("report %v %v", r.Files, r.Problems)
	}
}

// rewriteReAE replaces reae.safetensors with the tiny ReAE where one tensor
// has another shape.
func rewriteReAE(t *testing.T, dir, name string, shape []int) {
	t.Helper()
	specs, _ := Layout("tiny")
	var reae []TensorSpec
	for _, s := range specs {
		if s.Part == PartReAE {
			if s.Name == name {
				s.Shape = shape
			}
			reae = append(reae, s)
		}
	}
	p := filepath.Join(dir, ReAEFile)
	os.Remove(p)
	if err := writeSafetensors(p, reae, 1, nil); err != nil {
		t.Fatal(err)
	}
}

func writePickle(t *testing.T, p string) {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.Create("archive/data.pkl")
	w.Write([]byte("\x80\x02}q\x00.")) // an empty dict; never looked at
	zw.Close()
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOpenBadCheckpoints(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   []string
		isErr  error
	}{
		{"missing reae", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, ReAEFile)) },
			[]string{"reae.safetensors: missing"}, nil},
		{"missing config", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, ConfigFile)) },
			[]string{"transformer/config.json: missing"}, nil},
		{"missing transformer weights", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, DiTFile)) },
			[]string{"diffusion_pytorch_model.safetensors", "missing"}, nil},
		{"wrong shape", func(t *testing.T, dir string) { rewriteReAE(t, dir, "decoder.9.conv.2.weight", []int{16, 16, 1, 1}) },
			[]string{"decoder.9.conv.2.weight", "[16, 16, 1, 1]", "expected [16, 16, 3, 3]"}, nil},
		{"truncated", func(t *testing.T, dir string) {
			p := filepath.Join(dir, DiTFile)
			st, _ := os.Stat(p)
			if err := os.Truncate(p, st.Size()-1000); err != nil {
				t.Fatal(err)
			}
		}, []string{"diffusion_pytorch_model.safetensors", "past the end"}, nil},
		{"pickle", func(t *testing.T, dir string) { writePickle(t, filepath.Join(dir, ReAEFile)) },
			[]string{"reae.safetensors", "pickle"}, safetensors.ErrPickle},
		{"bad config", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"num_layers": 2, "qk_norm": "rms_norm"}`), 0o644)
		}, []string{"config.json", "qk_norm"}, nil},
		{"config disagrees with weights", func(t *testing.T, dir string) {
			_, cfg := Layout("tiny")
			cfg.FFNDim = 1024
			b, _ := json.Marshal(cfg)
			os.WriteFile(filepath.Join(dir, ConfigFile), b, 0o644)
		}, []string{"ffn.net.0.proj.weight", "[512, 256]", "expected [1024, 256]"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := synthTiny(t, 3)
			c.break_(t, dir)
			ck, err := Open(dir)
			if err == nil {
				ck.Close()
				t.Fatal("Open accepted a broken checkpoint")
			}
			msg := err.Error()
			if strings.Contains(msg, "\n") {
				t.Errorf("error is not one line: %q", msg)
			}
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not mention %q", msg, w)
				}
			}
			if c.isErr != nil && !errors.Is(err, c.isErr) {
				t.Errorf("error %q does not wrap %v", msg, c.isErr)
			}
			if r := Inspect(dir); r.OK() {
				t.Error("Inspect found no problem")
			}
			t.Log(msg)
		})
	}
}

func TestInspectListsEveryProblem(t *testing.T) {
	dir := synthTiny(t, 5)
	rewriteReAE(t, dir, "encoder.9.conv.4.bias", []int{17})
	os.Remove(filepath.Join(dir, PromptFile))
	r := Inspect(dir)
	if len(r.Problems) != 2 {
		t.Fatalf("%d problems, want 2: %q", len(r.Problems), r.Problems)
	}
	all := strings.Join(r.Problems, "\n")
	for _, w := range []string{"encoder.9.conv.4.bias has shape [17], expected [16]", "prompt_embedding.safetensors: missing"} {
		if !strings.Contains(all, w) {
			t.Errorf("problems %q lack %q", r.Problems, w)
		}
	}
	if r.Tensors.ReAE != 128 || r.Tensors.DiT != 69 || r.Tensors.Prompt != 0 {
		t.Errorf("counts %+v", r.Tensors)
	}
	_, err := Open(dir)
	if err == nil || !strings.Contains(err.Error(), "and 1 more problem") {
		t.Errorf("Open: %v", err)
	}
	if s := r.String(); !strings.Contains(s, "problems   2") {
		t.Errorf("report text:\n%s", s)
	}
}

func TestSynthRefuses(t *testing.T) {
	base := t.TempDir()
	if err := Synth(filepath.Join(base, "no", "such", "ck"), "tiny", 1); err == nil || !strings.Contains(err.Error(), "parent") {
		t.Errorf("missing parent: %v", err)
	}
	full := filepath.Join(base, "full")
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "x"), nil, 0o644)
	if err := Synth(full, "tiny", 1); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty dir: %v", err)
	}
	if err := Synth(filepath.Join(base, "p"), "medium", 1); err == nil {
		t.Error("unknown presetSpec accepted")
	}
	empty := filepath.Join(base, "empty")
	os.Mkdir(empty, 0o755)
	if err := Synth(empty, "tiny", 1); err != nil {
		t.Errorf("empty dir: %v", err)
	}
	ents, _ := os.ReadDir(base)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("left %s behind", e.Name())
		}
	}
}

// TestSynthOutliers: with --outliers 20, every OutlierEvery-th output
// channel of the blocks' linear layers is 20 times the plain checkpoint's,
// and every other value is unchanged.
func TestSynthOutliers(t *testing.T) {
	plain := synthTiny(t, 7)
	dir := filepath.Join(t.TempDir(), "ck")
	if err := SynthOutliers(dir, "tiny", 7, 20); err != nil {
		t.Fatal(err)
	}
	a, err := Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, name := range []string{"blocks.0.ffn.net.0.proj.weight", "blocks.1.attn1.to_q.weight", "patch_embedding.weight", "blocks.0.ffn.net.0.proj.bias"} {
		shape, x, err := FileSource{F: a.DiT}.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		_, y, err := FileSource{F: b.DiT}.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		cols := shape[len(shape)-1]
		outliers := strings.HasPrefix(name, "blocks.") && len(shape) == 2
		n := 0
		for i := range x {
			want := x[i]
			if outliers && (i/cols)%OutlierEvery == 0 {
				want = half.FromBF16(half.ToBF16(20 * x[i]))
				n++
			}
			if y[i] != want {
				t.Fatalf("%s[%d] = %g, want %g (plain %g)", name, i, y[i], want, x[i])
			}
		}
		if outliers != (n > 0) {
			t.Errorf("%s: %d outlier values", name, n)
		}
	}
}
