package cdavsr

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/internal/testutil"
)

// The golden sequence: 4 steps (I, then P, P, P) of 24x16 frames at x4
// with the synthetic checkpoint of seed 1.
const (
	gw, gh, gsteps = 24, 16, 4
	gdir           = "../../testdata/cdavsr"
)

// synthFile writes the synthetic checkpoint of seed 1 (as `vsr checkpoint
// synth --family cdavsr --seed 1`) into dir.
func synthFile(t testing.TB, dir string, scale int, meta map[string]string, prefix string) string {
	t.Helper()
	ts := Synthesize(scale, 1)
	for i := range ts {
		ts[i].Name = prefix + ts[i].Name
	}
	if meta == nil {
		meta = map[string]string{MetaResidualUnit: ResidualUnit}
	}
	path := filepath.Join(dir, "cdavsr.safetensors")
	if err := safetensors.Write(path, ts, meta); err != nil {
		t.Fatal(err)
	}
	return path
}

// goldenInputs makes the sequence's inputs: a real crop of the test clip
// brightened a little more at each step, motion fields of quarter-pel
// vectors (many on .5 after the step to nearest) with some far outside
// the frame, and small residuals.
func goldenInputs() (frames, mvs, ress [][]float32) {
	rgb, err := os.ReadFile("../../testdata/compact/frame0_48x32.rgb")
	if err != nil {
		panic(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	for k := 0; k < gsteps; k++ {
		f := make([]float32, gw*gh*3)
		for y := 0; y < gh; y++ {
			for x := 0; x < gw; x++ {
				for c := 0; c < 3; c++ {
					f[(y*gw+x)*3+c] = min(float32(rgb[(y*48+x+k)*3+c])/255+0.02*float32(k), 1)
				}
			}
		}
		mv := make([]float32, gw*gh*2)
		for i := range mv {
			switch r.IntN(10) {
			case 0:
				mv[i] = float32(r.IntN(81) - 40) // far, often outside
			default:
				mv[i] = float32(r.IntN(25)-12) / 4 // quarter-pel in [-3, 3]
			}
		}
		res := make([]float32, gw*gh)
		for i := range res {
			res[i] = 0.05 * float32(r.NormFloat64())
		}
		frames, mvs, ress = append(frames, f), append(mvs, mv), append(ress, res)
	}
	return
}

func writeF32(path string, v []float32) error {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return os.WriteFile(path, b, 0o644)
}

var (
	readF32 = testutil.ReadF32
	relErr  = testutil.RelErr[float32]
)

// runSequence runs the golden inputs through an instance on b.
func runSequence(t *testing.T, b backend.Backend, net *Net) [][]float32 {
	t.Helper()
	frames, mvs, ress := goldenInputs()
	in, err := net.Open(gw, gh)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var outs [][]float32
	for k := range frames {
		x, mv, res := uploadStep(net, frames[k], mvs[k], ress[k])
		y, err := in.Step(x, mv, res, false)
		if err != nil {
			t.Fatalf("step %d: %v", k, err)
		}
		v, _ := b.Download(y)
		outs = append(outs, v)
		for _, t := range []backend.Tensor{x, mv, res, y} {
			t.Free()
		}
	}
	return outs
}

// uploadStep makes a step's inputs of gw x gh for net (Net.Upload).
func uploadStep(net *Net, frame, mv, res []float32) (x, m, r backend.Tensor) {
	x, _ = net.Upload(backend.Shape{N: 1, H: gh, W: gw, C: 3}, frame)
	m, _ = net.Upload(backend.Shape{N: 1, H: gh, W: gw, C: 2}, mv)
	r, _ = net.Upload(backend.Shape{N: 1, H: gh, W: gw, C: 1}, res)
	return x, m, r
}

// TestGoldenInputs keeps testdata/cdavsr's inputs equal to goldenInputs
// (VSR_UPDATE_TESTDATA=1 rewrites them): scripts/golden_cdavsr.py reads
// them.
func TestGoldenInputs(t *testing.T) {
	frames, mvs, ress := goldenInputs()
	for k := range frames {
		for name, v := range map[string][]float32{"x": frames[k], "mv": mvs[k], "res": ress[k]} {
			path := filepath.Join(gdir, fmt.Sprintf("%s%d.f32", name, k))
			if os.Getenv("VSR_UPDATE_TESTDATA") != "" {
				if err := writeF32(path, v); err != nil {
					t.Fatal(err)
				}
			}
			if e := relErr(readF32(t, path), v); e != 0 {
				t.Errorf("%s differs from goldenInputs (regenerate with VSR_UPDATE_TESTDATA=1)", path)
			}
		}
	}
}

// TestGolden compares an I step and three P steps on the CPU with an
// independent PyTorch implementation (scripts/golden_cdavsr.py, see
// testdata/cdavsr/README.md).
func TestGolden(t *testing.T) {
	b := cpu.New(0)
	net, err := Load(b, synthFile(t, t.TempDir(), 4, nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	outs := runSequence(t, b, net)
	for k, got := range outs {
		want := readF32(t, filepath.Join(gdir, fmt.Sprintf("out%d.f32", k)))
		if e := relErr(got, want); !(e < 1e-5) {
			t.Errorf("step %d: relative error %.3g against PyTorch, want < 1e-5", k, e)
		} else {
			t.Logf("step %d: relative error %.3g against PyTorch", k, e)
		}
	}
}
