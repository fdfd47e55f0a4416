package cuda

import (
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
func loadGraph(t testing.TB, b backend.Backend, param, bin string) *compact.Model {
	t.Helper()
	p, err := os.ReadFile(param)
	if err != nil {
		t.Fatal(err)
	}
	w, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	m, err := compact.LoadFiles(b, filepath.Base(param), p, w)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func forward(t testing.TB, b backend.Backend, m *compact.Model, rgb []byte, n, h, w int) []float32 {
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
// realesrgan-x4plus, if fetched, on the GPU against the CPU.
func TestDenseAgainstCPU(t *testing.T) {
	rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		t.Fatal(err)
	}
	type graph struct{ name, param, bin string }
	graphs := []graph{}
	for _, g := range []int{8, 4} {
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
			got := forward(t, g, loadGraph(t, g, gr.param, gr.bin), rgb, 1, 32, 48)
			if e := relErr(got, want); !(e <= bound(dt)) {
				t.Errorf("%s %v: relative error %.3g against the CPU, want <= %.3g", gr.name, dt, e, bound(dt))
			} else {
				t.Logf("%s %v: relative error %.3g against the CPU", gr.name, dt, e)
			}
		}
	}
}

// BenchmarkX4plus times realesrgan-x4plus on batches of 640x360 frames.
func BenchmarkX4plus(bb *testing.B) {
	param, bin := x4plus(bb)
	const n, h, w = 4, 360, 640
	rgb := make([]byte, n*h*w*3)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range rgb {
		rgb[i] = byte(r.IntN(256))
	}
	for _, dt := range []DType{F16, BF16} {
		bb.Run(dt.String(), func(bb *testing.B) {
			g := open(bb, dt)
			m := loadGraph(bb, g, param, bin)
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
