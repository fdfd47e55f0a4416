package compact

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

func bundledFiles(t testing.TB) (string, []byte) {
	p, err := os.ReadFile("../../assets/realesr-animevideov3/realesr-animevideov3-x4.param")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../assets/realesr-animevideov3/realesr-animevideov3-x4.bin")
	if err != nil {
		t.Fatal(err)
	}
	return string(p), b
}

func TestLoadErrors(t *testing.T) {
	param, bin := bundledFiles(t)
	b := cpu.New(1)
	cases := []struct {
		name, param string
		bin         []byte
		want        string
	}{
		{"truncated bin", param, bin[:len(bin)/2], "layer Conv_"},
		{"extra bytes", param, append(append([]byte(nil), bin...), 1, 2, 3, 4), "does not belong"},
		{"empty bin", param, nil, "too short"},
		{"unsupported op", strings.Replace(param, "PReLU                    PRelu_3", "HardSwish                PRelu_3", 1), bin, `layer PRelu_3 (HardSwish): unsupported op "HardSwish"`},
		{"bad interp", strings.Replace(param, "0=1 1=4.000000e+00", "0=7 1=4.000000e+00", 1), bin, "layer Resize_37 (Interp): unsupported resize_type 7"},
		{"missing blob", strings.Replace(param, "1 1 54 56 0=64", "1 1 nosuch 56 0=64", 1), bin, `reads blob "nosuch"`},
		{"garbage", "\x00\x01garbage", bin, "not a text ncnn .param file"},
		{"weights of wrong size", strings.Replace(param, "6=1728", "6=1729", 1), bin, "weight_data_size 1729"},
	}
	for _, c := range cases {
		m, err := LoadFiles(b, "test", []byte(c.param), c.bin)
		if err == nil {
			m.Close()
			t.Errorf("%s: loaded without error", c.name)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: error %q, want one line containing %q", c.name, err, c.want)
		}
	}
}

func FuzzLoad(f *testing.F) {
	param, bin := bundledFiles(f)
	f.Add([]byte("7767517\n3 3\nInput in 0 1 data\nConvolution c 1 1 data x 0=3 1=1 5=1 6=9\nBinaryOp add 2 1 data x out 0=0\n"), 0)
	f.Add([]byte(param), 64)
	f.Fuzz(func(t *testing.T, p []byte, cut int) {
		bb := bin
		if cut >= 0 && cut < len(bb) {
			bb = bb[:cut]
		}
		m, err := LoadFiles(cpu.New(1), "fuzz", p, bb)
		if err == nil {
			m.Close()
		}
	})
}

func loadUnfused(t *testing.T, b backend.Backend, scale int) *Graph {
	t.Helper()
	p, err := os.ReadFile(fmt.Sprintf("../../assets/realesr-animevideov3/realesr-animevideov3-x%d.param", scale))
	if err != nil {
		t.Fatal(err)
	}
	_, bin := bundledFiles(t)
	m, err := LoadWith(b, "unfused", bytes.NewReader(p), bin, Options{SeparateTail: true})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestPointwiseLayers runs Swish, Sigmoid and BinaryOp with a scalar
// (sub, mul) against their definitions, and refuses a BinaryOp whose
// with_scalar is neither 0 nor 1 and a scalar BinaryOp of two inputs.
func TestPointwiseLayers(t *testing.T) {
	b := cpu.New(1)
	graph := func(last string) string {
		return "7767517\n5 5\nInput in 0 1 data\nSwish s 1 1 data a\nSigmoid g 1 1 a b\n" +
			"BinaryOp sub 1 1 b c 0=1 1=1 2=0.5\n" + last + "\n"
	}
	m, err := LoadFiles(b, "test", []byte(graph("BinaryOp mul 1 1 c d 0=2 1=1 2=3")), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	in := []float32{-4, -1, 0, 0.5, 2, 7}
	x, err := b.Upload(backend.Shape{N: 1, H: 1, W: 2, C: 3}, in)
	_, got := forwardTensor(t, b, m, x, err)
	sig := func(v float64) float64 { return 1 / (1 + math.Exp(-v)) }
	for i, v := range in {
		want := 3 * (sig(float64(v)*sig(float64(v))) - 0.5)
		if math.Abs(float64(got[i])-want) > 1e-6 {
			t.Errorf("%g: %g, want %g", v, got[i], want)
		}
	}
	for _, c := range []struct{ last, want string }{
		{"BinaryOp mul 1 1 c d 0=2 1=2 2=3", "bad with_scalar 2"},
		{"BinaryOp mul 2 1 c a d 0=2 1=1 2=3", "want 1 input(s)"},
	} {
		if m, err := LoadFiles(b, "test", []byte(graph(c.last)), nil); err == nil {
			m.Close()
			t.Errorf("%s: loaded", c.last)
		} else if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.last, err, c.want)
		}
	}
}
