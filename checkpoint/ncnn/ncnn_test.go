package ncnn

import (
	"encoding/binary"
	"math"
	"os"
	"strings"
	"testing"
)

func TestParseBundled(t *testing.T) {
	for _, s := range []string{"x2", "x3", "x4"} {
		f, err := os.Open("../../assets/realesr-animevideov3/realesr-animevideov3-" + s + ".param")
		if err != nil {
			t.Fatal(err)
		}
		net, err := ParseParam(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		want := map[string]int{"x2": 41, "x3": 41, "x4": 40}[s]
		if len(net.Layers) != want {
			t.Errorf("%s: %d layers, want %d", s, len(net.Layers), want)
		}
		c := net.Layers[2]
		if c.Type != "Convolution" || c.Int(0, 0) != 64 || c.Int(1, 0) != 3 || c.Int(6, 0) != 1728 {
			t.Errorf("%s: conv layer parsed as %+v", s, c)
		}
		if s != "x4" {
			l := net.Layers[len(net.Layers)-1]
			if l.Type != "Interp" || l.Int(0, 0) != 3 {
				t.Errorf("%s: last layer %+v", s, l)
			}
		}
	}
}

func TestParseErrors(t *testing.T) {
	cases := map[string]string{
		"":                                      "empty",
		"7767518\n1 1\n":                        "magic",
		"7767517\n":                             "counts",
		"7767517\nx y\n":                        "counts",
		"7767517\n2 2\nInput in 0 1 data\n":     "ends after 1 layers",
		"7767517\n1 1\nInput in 0 1\n":          "names 0 blobs",
		"7767517\n1 1\nInput in 0 1 data 0\n":   "not key=value",
		"7767517\n1 1\nInput in 0 1 data a=1\n": "bad parameter key",
		"7767517\n1 1\nInput in 0 1 data 0=z\n": "bad integer",
		"7767517\n1 1\nInput in 0 1 data -23300=3,1,2\n":    "array says 3 values",
		"7767517\n1 1\nInput in 0 1 data 0=1 0=2\n":         "given twice",
		"7767517\n2 2\nInput in 0 1 a\nInput in 0 1 b\n":    "duplicate layer name",
		"7767517\n1 1\nInput in 0 1 data\nExtra x 0 0\n":    "unexpected content",
		"7767517\n1 1\nConvolution c -1 1 data\n":           "bad bottom/top counts",
		"\xdd\xcc\xbb\xaa\x00":                              "binary",
		"7767517\n1 1\nInput in 0 1 data 0=1.5e99999\n":     "bad float",
		"7767517\n1 1\nInput in 0 1 data -23300=99999999\n": "bad array length",
	}
	for in, want := range cases {
		_, err := ParseParam(strings.NewReader(in))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseParam(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

func TestParams(t *testing.T) {
	net, err := ParseParam(strings.NewReader("7767517\n1 1\nInterp r 1 1 a b 0=3 1=5.000000e-01 -23303=2,1,2.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	l := net.Layers[0]
	if l.Int(0, 0) != 3 || l.Float(1, 0) != 0.5 || l.Int(9, 7) != 7 || !l.Params[3].IsArray || l.Params[3].Floats[1] != 2.5 {
		t.Errorf("params parsed as %+v", l.Params)
	}
}

func TestWeights(t *testing.T) {
	var b []byte
	le := binary.LittleEndian
	b = le.AppendUint32(b, tagFP16)
	for _, h := range []uint16{0x3c00, 0xc000, 0x0001, 0x7bff, 0x8000} { // 1, -2, min subnormal, max, -0
		b = le.AppendUint16(b, h)
	}
	b = append(b, 0, 0) // align to 4
	b = le.AppendUint32(b, math.Float32bits(0.25))
	b = le.AppendUint32(b, 0) // untagged fp32
	b = le.AppendUint32(b, math.Float32bits(-3))
	r := NewWeightReader(b)
	h, err := r.Tagged(5, "w")
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, -2, float32(math.Ldexp(1, -24)), 65504, float32(math.Copysign(0, -1))}
	for i := range want {
		if h[i] != want[i] || math.Signbit(float64(h[i])) != math.Signbit(float64(want[i])) {
			t.Errorf("fp16 %d = %g, want %g", i, h[i], want[i])
		}
	}
	if f, err := r.Raw(1, "b"); err != nil || f[0] != 0.25 {
		t.Errorf("raw = %v %v", f, err)
	}
	if f, err := r.Tagged(1, "c"); err != nil || f[0] != -3 {
		t.Errorf("fp32 = %v %v", f, err)
	}
	if r.Remaining() != 0 {
		t.Errorf("%d bytes left", r.Remaining())
	}
	if _, err := r.Raw(1, "d"); err == nil || !strings.Contains(err.Error(), "too short") {
		t.Errorf("read past end: %v", err)
	}
	int8w := le.AppendUint32(nil, tagInt8)
	if _, err := NewWeightReader(int8w).Tagged(1, "q"); err == nil || !strings.Contains(err.Error(), "int8") {
		t.Errorf("int8: %v", err)
	}
	nan := le.AppendUint32(le.AppendUint32(nil, 0), 0x7fc00000)
	if _, err := NewWeightReader(nan).Tagged(1, "n"); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("NaN weight: %v", err)
	}
}

func FuzzParseParam(f *testing.F) {
	for _, s := range []string{"x2", "x4"} {
		if b, err := os.ReadFile("../../assets/realesr-animevideov3/realesr-animevideov3-" + s + ".param"); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("7767517\n1 1\nInput in 0 1 data -23300=2,1,2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		net, err := ParseParam(strings.NewReader(string(b)))
		if err == nil && (net == nil || len(net.Layers) == 0) {
			t.Fatal("nil net without error")
		}
	})
}

func FuzzWeights(f *testing.F) {
	f.Add([]byte{0x47, 0x6b, 0x30, 0x01, 0, 0x3c, 0, 0}, 1)
	f.Add([]byte{1, 2, 3, 4}, 3)
	f.Fuzz(func(t *testing.T, b []byte, n int) {
		r := NewWeightReader(b)
		if w, err := r.Tagged(n, "w"); err == nil && len(w) != n {
			t.Fatalf("got %d values, want %d", len(w), n)
		}
		if r.Remaining() < 0 {
			t.Fatal("read past end")
		}
	})
}
