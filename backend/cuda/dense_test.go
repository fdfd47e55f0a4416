package cuda

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/compact"
)

// loadGraph loads an ncnn graph from files onto b.
func loadGraph(t testing.TB, b backend.Backend, param, bin string) *compact.Graph {
	return loadGraphWith(t, b, param, bin, compact.Options{})
}

// loadGraphWith is loadGraph with options.
func loadGraphWith(t testing.TB, b backend.Backend, param, bin string, opt compact.Options) *compact.Graph {
	t.Helper()
	p, err := os.ReadFile(param)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	m, err := compact.LoadWith(b, filepath.Base(param), bytes.NewReader(p), w, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func forward(t testing.TB, b backend.Backend, m *compact.Graph, rgb []byte, n, h, w int) []float32 {
	t.Helper()
	x, err := b.FromRGB8(rgb, n, h, w)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	y, err := m.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	v, err := b.Download(y)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// x4plus returns the paths of realesrgan-x4plus in the models folder, or
// skips.
func x4plus(t testing.TB) (string, string) {
	f, _ := compact.FindFetchable("realesrgan-x4plus")
	dir, err := compact.ModelsDir()
	if err != nil || f.Installed(dir) != nil {
		t.Skip("realesrgan-x4plus is not in the models folder (vsr models fetch realesrgan-x4plus)")
	}
	return f.Param(dir), filepath.Join(dir, "realesrgan-x4plus.bin")
}

// TestDenseAgainstCPU runs the small dense-block graphs and
// realesrgan-x4plus, if fetched, on the GPU against the CPU, with the
// dense blocks' concatenations as views of one buffer (dense-16 and
// x4plus in fp16: the fused kernel's dense-block build) and as copies.
func TestDenseAgainstCPU(t *testing.T) {
	rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	type graph struct{ name, param, bin string }
	graphs := []graph{}
	for _, g := range []int{8, 4, 16} {
		base := fmt.Sprintf("../../testdata/compact/dense-%d", g)
		graphs = append(graphs, graph{fmt.Sprintf("dense-%d", g), base + ".param", base + ".bin"})
	}
	if _, err := os.Stat(os.Getenv("VSR_MODELS")); err == nil {
		p, b := x4plus(t)
		graphs = append(graphs, graph{"x4plus", p, b})
	}
	c := cpu.New(0)
	for _, gr := range graphs {
		want := forward(t, c, loadGraph(t, c, gr.param, gr.bin), rgb, 1, 32, 48)
		for _, dt := range allTypes {
			g := open(t, dt)
			for _, copies := range []bool{false, true} {
				m := loadGraphWith(t, g, gr.param, gr.bin, compact.Options{CopyConcat: copies})
				got := forward(t, g, m, rgb, 1, 32, 48)
				if e := relErr(got, want); !(e <= bound(dt)) {
					t.Errorf("%s %v (concatenations copied: %v): relative error %.3g against the CPU, want <= %.3g", gr.name, dt, copies, e, bound(dt))
				} else {
					t.Logf("%s %v (concatenations copied: %v): relative error %.3g against the CPU", gr.name, dt, copies, e)
				}
			}
		}
	}
}

// BenchmarkX4plus times realesrgan-x4plus on batches of 640x360 frames:
// fp16 with the dense blocks' buffers (the fused kernel's dense-block
// build) and with their concatenations copied (cuDNN), and bf16 (cuDNN).
func BenchmarkX4plus(bb *testing.B) {
	param, bin := x4plus(bb)
	const n, h, w = 4, 360, 640
	rgb := make([]byte, n*h*w*3)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range rgb {
		rgb[i] = byte(r.IntN(256))
	}
	for _, c := range []struct {
		name   string
		dt     DType
		copies bool
	}{{"f16", F16, false}, {"f16-copies", F16, true}, {"bf16", BF16, false}} {
		dt := c.dt
		bb.Run(c.name, func(bb *testing.B) {
			g := open(bb, dt)
			m := loadGraphWith(bb, g, param, bin, compact.Options{CopyConcat: c.copies})
			x, err := g.FromRGB8(rgb, n, h, w)
			if err != nil {
				bb.Fatal(err)
			}
			defer x.Free()
			sec := perOp(bb, g, func() {
				y, err := m.Forward(x)
				if err != nil {
					bb.Fatal(err)
				}
				y.Free()
			})
			bb.ReportMetric(n/sec, "frames/s")
			bb.ReportMetric(m.FLOPs(w, h)*n/sec/1e12, "TFLOP/s")
		})
	}
}
