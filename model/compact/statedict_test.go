package compact

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/assets"
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/ncnn"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model"
)

// ncnnTensor is one weight tensor of an ncnn graph, in file order.
type ncnnTensor struct {
	shape []int
	v     []float32
}

// ncnnTensors reads the weights of an ncnn graph's Convolution and PReLU
// layers in order: per convolution its weights [out in k k] and its bias.
func ncnnTensors(t *testing.T, param, bin []byte) []ncnnTensor {
	t.Helper()
	net, err := ncnn.ParseParam(bytes.NewReader(param))
	if err != nil {
		t.Fatal(err)
	}
	wr := ncnn.NewWeightReader(bin)
	var out []ncnnTensor
	for _, l := range net.Layers {
		switch l.Type {
		case "Convolution":
			o, k, n := l.Int(0, 0), l.Int(1, 0), l.Int(6, 0)
			w, err := wr.Tagged(n, "weights")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ncnnTensor{[]int{o, n / (o * k * k), k, k}, w})
			if l.Int(5, 0) != 0 {
				b, err := wr.Raw(o, "bias")
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, ncnnTensor{[]int{o}, b})
			}
		case "PReLU":
			s, err := wr.Raw(l.Int(0, 0), "slopes")
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, ncnnTensor{[]int{len(s)}, s})
		}
	}
	return out
}

// writeStateDict writes tensors under names as a float32 safetensors file
// and returns its path.
func writeStateDict(t *testing.T, names []string, ts []ncnnTensor, meta map[string]string) string {
	t.Helper()
	if len(names) != len(ts) {
		t.Fatalf("%d names for %d tensors", len(names), len(ts))
	}
	var wts []safetensors.WriteTensor
	for i, n := range names {
		wts = append(wts, safetensors.WriteTensor{Name: n, DType: safetensors.F32, Shape: ts[i].shape, Data: safetensors.Float32Bytes(ts[i].v)})
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := safetensors.Write(path, wts, meta); err != nil {
		t.Fatal(err)
	}
	return path
}

// wb names a convolution's weight and bias.
func wb(key string) []string { return []string{key + ".weight", key + ".bias"} }

// forwardRGB8 runs g on b on one w x h frame of 8-bit RGB and returns the
// output's shape and values.
func forwardRGB8(t *testing.T, b backend.Backend, g *Graph, rgb []byte, w, h int) (backend.Shape, []float32) {
	t.Helper()
	x, err := b.FromRGB8(rgb, 1, h, w)
	return forwardTensor(t, b, g, x, err)
}

// forwardTensor runs g on b on x, the result of a call that gave err,
// frees it, and returns the output's shape and values.
func forwardTensor(t *testing.T, b backend.Backend, g *Graph, x backend.Tensor, err error) (backend.Shape, []float32) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	y, err := g.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	v, err := b.Download(y)
	if err != nil {
		t.Fatal(err)
	}
	return y.Shape(), v
}

// loadPair loads the ncnn graph param/bin and the state dict at path on b
// (both closed at the end of the test) and returns the ncnn graph and the
// model of the state dict.
func loadPair(t *testing.T, b backend.Backend, param, bin []byte, path string) (*Graph, *graphModel) {
	t.Helper()
	ref, err := LoadFiles(b, "ncnn", param, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ref.Close)
	m, err := family{}.Load(b, path, model.Params{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return ref, m.(*graphModel)
}

// forwardBoth runs the same frame through two graphs and fails unless the
// outputs are bitwise the same.
func forwardBoth(t *testing.T, b backend.Backend, want, got *Graph, w, h int) {
	t.Helper()
	rgb, err := os.ReadFile(filepath.Join("..", "..", "testdata", "compact", "frame0_48x32.rgb"))
	if err != nil {
		t.Fatal(err)
	}
	crop := make([]byte, 0, w*h*3)
	for y := 0; y < h; y++ {
		crop = append(crop, rgb[y*48*3:][:w*3]...)
	}
	_, a := forwardRGB8(t, b, want, crop, w, h)
	_, c := forwardRGB8(t, b, got, crop, w, h)
	if len(a) != len(c) {
		t.Fatalf("outputs of %d and %d values", len(a), len(c))
	}
	for i := range a {
		if a[i] != c[i] {
			t.Fatalf("value %d: the state dict's graph gives %g, the ncnn file's %g", i, c[i], a[i])
		}
	}
}

// TestStateDictX4plus rearranges realesrgan-x4plus's ncnn weights into a
// Real-ESRGAN RRDBNet state dict (BasicSR's key names), loads it as
// --model FILE.safetensors, and checks that the graph vsr builds from it
// has the ncnn file's dense-block buffers and halo and gives the same
// output bit for bit.
func TestStateDictX4plus(t *testing.T) {
	dir := fetched(t, "realesrgan-x4plus")
	param, err := os.ReadFile(filepath.Join(dir, "realesrgan-x4plus.param"))
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(filepath.Join(dir, "realesrgan-x4plus.bin"))
	if err != nil {
		t.Fatal(err)
	}
	names := wb("conv_first")
	for b := 0; b < 23; b++ {
		for k := 1; k <= 3; k++ {
			for c := 1; c <= 5; c++ {
				names = append(names, wb(fmt.Sprintf("body.%d.rdb%d.conv%d", b, k, c))...)
			}
		}
	}
	for _, k := range []string{"conv_body", "conv_up1", "conv_up2", "conv_hr", "conv_last"} {
		names = append(names, wb(k)...)
	}
	path := writeStateDict(t, names, ncnnTensors(t, param, bin), nil)
	b := cpu.New(0)
	ref, m := loadPair(t, b, param, bin, path)
	g := m.g
	if n, c := countOps(g, opBuffer), countOps(g, opConcat); n != 69 || c != 0 {
		t.Errorf("%d dense-block buffers and %d concatenations, want 69 (23 RRDBs of 3 blocks) and 0", n, c)
	}
	if g.Halo() != ref.Halo() || g.Scale() != 4 {
		t.Errorf("halo %d, scale %g; the ncnn file's: %d, 4", g.Halo(), g.Scale(), ref.Halo())
	}
	if d := m.Describe(); d["architecture"] != "ESRGAN (Real-ESRGAN keys)" {
		t.Errorf("Describe: %v", d)
	}
	_, ag, err := StateDictGraph(path)
	if err != nil {
		t.Fatal(err)
	}
	sameLayers(t, param, ag.Param)
	forwardBoth(t, b, ref, g, 20, 12)
}

// sameLayers checks that two ncnn graphs have the same layers, Split
// layers aside: types, input counts and parameters (a parameter one
// leaves at its default may be written in the other).
func sameLayers(t *testing.T, want, got []byte) {
	t.Helper()
	layers := func(p []byte) []*ncnn.Layer {
		net, err := ncnn.ParseParam(bytes.NewReader(p))
		if err != nil {
			t.Fatal(err)
		}
		var out []*ncnn.Layer
		for _, l := range net.Layers {
			if l.Type != "Split" {
				out = append(out, l)
			}
		}
		return out
	}
	a, c := layers(want), layers(got)
	if len(a) != len(c) {
		t.Fatalf("%d layers, want %d", len(c), len(a))
	}
	for i := range a {
		if a[i].Type != c[i].Type || len(a[i].Bottoms) != len(c[i].Bottoms) {
			t.Fatalf("layer %d: %s with %d inputs, want %s with %d", i, c[i], len(c[i].Bottoms), a[i], len(a[i].Bottoms))
		}
		for k := range 24 {
			pa, pc := a[i].Params[k], c[i].Params[k]
			if a[i].Int(k, 0) != c[i].Int(k, 0) || a[i].Float(k, 0) != c[i].Float(k, 0) || fmt.Sprint(pa.Floats) != fmt.Sprint(pc.Floats) && pa.IsArray {
				t.Fatalf("layer %d (%s): parameter %d is %v, want %v", i, c[i], k, pc, pa)
			}
		}
	}
}

// bundledTensors reads the bundled realesr-animevideov3 x4 graph's
// weights.
func bundledTensors(t *testing.T) ([]byte, []byte, []ncnnTensor) {
	t.Helper()
	param, err := fs.ReadFile(assets.FS, bundledDir+"/"+bundledDir+"-x4.param")
	if err != nil {
		t.Fatal(err)
	}
	bin, err := fs.ReadFile(assets.FS, bundledDir+"/"+bundledDir+"-x4.bin")
	if err != nil {
		t.Fatal(err)
	}
	return param, bin, ncnnTensors(t, param, bin)
}

// TestStateDictCompact rearranges the bundled realesr-animevideov3 (an
// SRVGGNetCompact) into its PyTorch state dict (body.0 the first
// convolution, body.1 its PReLU, ...) and checks that the graph built
// from it gives the bundled graph's output bit for bit, whole and tiled.
func TestStateDictCompact(t *testing.T) {
	param, bin, ts := bundledTensors(t)
	var names []string
	for i := 0; len(names) < len(ts); i++ {
		names = append(names, fmt.Sprintf("body.%d.weight", i))
		if len(ts[len(names)-1].shape) == 4 {
			names = append(names, fmt.Sprintf("body.%d.bias", i))
		}
	}
	path := writeStateDict(t, names, ts, nil)
	b := cpu.New(0)
	ref, m := loadPair(t, b, param, bin, path)
	g := m.g
	if g.Halo() != ref.Halo() || g.Scale() != 4 {
		t.Errorf("halo %d, scale %g; the bundled graph's: %d, 4", g.Halo(), g.Scale(), ref.Halo())
	}
	forwardBoth(t, b, ref, g, 48, 32)
	if !(family{}).Detect(path) {
		t.Error("the family does not detect an SRVGGNetCompact state dict")
	}
}
