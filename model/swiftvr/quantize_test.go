package swiftvr

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

// TestQuantize: a checkpoint quantized to fp8 opens as it is; its block
// linear weights are e4m3 with a float32 scale per output channel, every
// weight read back is within e4m3's rounding of the original (half a step:
// 2^-4 of the value, or half the smallest subnormal step of its row), every
// other tensor is unchanged, and the DiT's output stays close to the
// original's.
func TestQuantize(t *testing.T) {
	orig := synthCheckpoint(t, "tiny")
	out := filepath.Join(t.TempDir(), "fp8")
	if err := Quantize(orig.Dir, out); err != nil {
		t.Fatal(err)
	}
	q, err := Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	a, b := FileSource{orig.DiT}, FileSource{q.DiT}
	quantized := 0
	for _, n := range orig.DiT.Names() {
		info, _ := q.DiT.Info(n)
		_, want, err := a.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		_, got, err := b.Tensor(n)
		if err != nil {
			t.Fatal(err)
		}
		if !fp8Quantized(n, info.Shape) {
			if info.DType == safetensors.F8E4M3 || !equalFloats(got, want) {
				t.Errorf("%s changed (%s)", n, info.DType)
			}
			continue
		}
		quantized++
		if info.DType != safetensors.F8E4M3 {
			t.Fatalf("%s is %s", n, info.DType)
		}
		scale, _ := q.DiT.Float32(n + scaleSuffix)
		in := info.Shape[1]
		for i, w := range want {
			s := float64(scale[i/in])
			if d := math.Abs(float64(got[i] - w)); d > math.Abs(float64(w))/16+s/1024+1e-12 {
				t.Fatalf("%s[%d]: %v read back as %v (scale %v)", n, i, w, got[i], s)
			}
		}
	}
	if want := 10 * orig.Dims.Layers; quantized != want {
		t.Errorf("%d weights quantized, want %d (10 per block: 2 x 4 attention projections, 2 feed-forward)", quantized, want)
	}
	if err := Quantize(out, filepath.Join(t.TempDir(), "again")); err == nil || !strings.Contains(err.Error(), "already in fp8") {
		t.Errorf("quantizing twice: %v", err)
	}

	// The DiT on the same latents: close to the original.
	be := cpu.New(0)
	d0, d1 := loadDiT(t, be, orig), loadDiT(t, be, q)
	s := backend.Shape{N: 3, H: 4, W: 6, C: orig.Dims.InChannels}
	x := make([]float32, s.Elems())
	for i := range x {
		x[i] = float32(math.Sin(float64(i)))
	}
	in, _ := be.Upload(s, x)
	defer in.Free()
	run := func(d *DiT) []float32 {
		y, err := d.ForwardShard(in, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer y.Free()
		v, _ := be.Download(y)
		return v
	}
	ref, got := run(d0), run(d1)
	var num, den float64
	for i := range ref {
		num += float64(got[i]-ref[i]) * float64(got[i]-ref[i])
		den += float64(ref[i]) * float64(ref[i])
	}
	rel := math.Sqrt(num / den)
	t.Logf("DiT output, fp8 weights against bf16: relative L2 error %.4f", rel)
	if rel > 0.1 || rel == 0 {
		t.Errorf("relative error %v", rel)
	}
}

func equalFloats(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestQuantizeIndex: a sharded DiT's index names each scale in its
// weight's shard.
func TestQuantizeIndex(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "in.json"), filepath.Join(dir, "out.json")
	os.WriteFile(src, []byte(`{"metadata": {"total_size": 10}, "weight_map": {"blocks.0.ffn.net.2.weight": "b.safetensors", "proj_out.weight": "a.safetensors"}}`), 0o644)
	if err := quantizeIndex(src, dst, []string{"blocks.0.ffn.net.2.weight_scale"}); err != nil {
		t.Fatal(err)
	}
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	b, _ := os.ReadFile(dst)
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	if idx.WeightMap["blocks.0.ffn.net.2.weight_scale"] != "b.safetensors" || len(idx.WeightMap) != 3 {
		t.Errorf("weight map %v", idx.WeightMap)
	}
}

// TestFP8Refused: an fp8 weight without its scale, or with a scale of the
// wrong shape, is refused when the checkpoint opens, naming the tensor.
func TestFP8Refused(t *testing.T) {
	orig := synthCheckpoint(t, "tiny")
	good := filepath.Join(t.TempDir(), "fp8")
	if err := Quantize(orig.Dir, good); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(good, DiTFile)
	f, err := safetensors.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	var ts []safetensors.WriteTensor
	for _, n := range f.Names() {
		if n == "blocks.0.attn1.to_q.weight_scale" {
			continue
		}
		info, _ := f.Info(n)
		b, _ := f.Bytes(n)
		ts = append(ts, safetensors.WriteTensor{Name: n, DType: info.DType, Shape: info.Shape, Data: append([]byte(nil), b...)})
	}
	f.Close()
	if err := safetensors.Write(file, ts, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(good); err == nil || !strings.Contains(err.Error(), "fp8 tensor blocks.0.attn1.to_q.weight has no scale blocks.0.attn1.to_q.weight_scale") {
		t.Errorf("a missing scale: %v", err)
	}
}
