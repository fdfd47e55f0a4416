package compact

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/tensor/npy"
)

// The golden fixtures of testdata/pth (README.md there says how they were
// made): torch.save files of small models with random weights, the input
// and the output of an independent PyTorch implementation of each
// architecture.

// pthDir is testdata/pth.
var pthDir = filepath.Join("..", "..", "testdata", "pth")

// pthCase is one case of testdata/pth/manifest.json: the fields these
// tests read.
type pthCase struct {
	Name  string `json:"name"`
	Arch  string `json:"arch"`
	Scale int    `json:"scale"`
	Files []struct {
		Path   string `json:"path"`
		Format string `json:"format"`
	} `json:"files"`
	Input       string         `json:"input"`
	InputShape  []int          `json:"input_shape"`
	Output      string         `json:"output"`
	OutputShape []int          `json:"output_shape"`
	Detect      map[string]any `json:"detect"`
	TensorElems int64          `json:"tensor_elems"`
}

// pthCases reads the manifest's cases.
func pthCases(t *testing.T) []pthCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pthDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Tolerance struct {
			CPUF32Rel float64 `json:"cpu_f32_rel"`
		} `json:"tolerance"`
		Cases []pthCase `json:"cases"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Tolerance.CPUF32Rel != pthTolerance || len(m.Cases) == 0 {
		t.Fatalf("manifest: tolerance %g, %d cases; want %g and some", m.Tolerance.CPUF32Rel, len(m.Cases), pthTolerance)
	}
	return m.Cases
}

// pthTolerance is the bound for the CPU in float32: the relative
// error ||out-ref|| / ||ref||.
const pthTolerance = 1e-5

// nchwToNHWC reorders a (1, c, h, w) array as vsr's (1, h, w, c).
func nchwToNHWC(v []float32, c, h, w int) []float32 {
	out := make([]float32, len(v))
	for ch := range c {
		for i := range h * w {
			out[i*c+ch] = v[ch*h*w+i]
		}
	}
	return out
}

// pthGolden runs the case's input through the graph model m on b and
// returns the relative error against the reference output.
func pthGolden(t *testing.T, b backend.Backend, m model.Model, c pthCase) float64 {
	t.Helper()
	gm, ok := m.(*graphModel)
	if !ok {
		t.Fatalf("%s loads as a %T, not a graph", c.Name, m)
	}
	in, err := npy.Read(filepath.Join(pthDir, c.Input), c.InputShape)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := npy.Read(filepath.Join(pthDir, c.Output), c.OutputShape)
	if err != nil {
		t.Fatal(err)
	}
	ic, ih, iw := c.InputShape[1], c.InputShape[2], c.InputShape[3]
	oc, oh, ow := c.OutputShape[1], c.OutputShape[2], c.OutputShape[3]
	x, err := b.Upload(backend.Shape{N: 1, H: ih, W: iw, C: ic}, nchwToNHWC(in, ic, ih, iw))
	if err != nil {
		t.Fatal(err)
	}
	defer x.Free()
	y, err := gm.g.Forward(x)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Free()
	if s := y.Shape(); s != (backend.Shape{N: 1, H: oh, W: ow, C: oc}) {
		t.Fatalf("%s: output %v, want %v", c.Name, s, c.OutputShape)
	}
	got, err := b.Download(y)
	if err != nil {
		t.Fatal(err)
	}
	return relErr(got, nchwToNHWC(ref, oc, oh, ow))
}

// loadPth finds the family of path and loads it on b as --model would.
func loadPth(b backend.Backend, path string) (model.Model, error) {
	f, err := model.Find(path)
	if err != nil {
		return nil, err
	}
	if f.Name() != "compact" {
		return nil, fmt.Errorf("%s is taken by the %s family", path, f.Name())
	}
	return f.Load(b, path, model.Params{Default: model.Defaults(f.Params())})
}

// detectFacts compares what detection found in path with the manifest's
// detect entry: channels, width, depth, growth, pixel unshuffle,
// activation, Real-CUGAN's pro, and the elements of every tensor.
func detectFacts(t *testing.T, c pthCase, path string) *arch.Info {
	t.Helper()
	info, _, ok := arch.Sniff(path)
	if !ok {
		t.Fatalf("%s: not recognised", path)
	}
	want := map[string]any{"arch": c.Arch, "scale": c.Scale, "params": c.TensorElems}
	got := map[string]any{"arch": info.Arch, "scale": info.Scale, "params": info.Params}
	for k, v := range c.Detect {
		f, isNum := v.(float64)
		switch k {
		case "in_channels":
			got[k] = info.In
		case "out_channels":
			got[k] = info.Out
		case "features", "width":
			got[k] = info.Features
		case "blocks", "convs":
			got[k] = info.Blocks
		case "growth":
			got[k] = info.Growth
		case "unshuffle":
			got[k] = info.Unshuffle
		case "act":
			got[k] = info.Activation
		case "pro":
			got[k] = strings.Contains(info.Variant, "pro")
		default:
			continue // facts Info does not hold (the key layout, SPAN's norm, RealPLKSR's kernel)
		}
		want[k] = v
		if isNum {
			want[k] = int(f)
		}
	}
	for k := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(want[k]) {
			t.Errorf("%s: %s %v, want %v", path, k, got[k], want[k])
		}
	}
	return info
}

// TestPthGolden loads every file of every ESRGAN and SRVGGNetCompact case
// of testdata/pth (zip, legacy and shared-storage .pth files, safetensors;
// plain, params_ema, params and module.-prefixed state dicts; F32, F16
// and BF16 tensors) as --model does, checks what detection finds, and
// runs the case's input on the CPU in float32 against the reference
// output within 1e-5 relative. The cases of the architectures vsr
// recognises but does not run yet (SPAN, Real-CUGAN, RealPLKSR) are
// detected with the manifest's facts and refused as such.
//
// An SRVGGNetCompact with LeakyReLU cannot be told from its weights (no
// file of the case says it): it is detected as ReLU, and runs against the
// reference once its state dict carries act_type=leakyrelu.
func TestPthGolden(t *testing.T) {
	b := cpu.New(0)
	for _, c := range pthCases(t) {
		for _, f := range c.Files {
			t.Run(filepath.Base(f.Path), func(t *testing.T) {
				path := filepath.Join(pthDir, f.Path)
				if c.Detect["act"] == "leakyrelu" {
					path = leakyCopy(t, path)
				}
				info := detectFacts(t, c, path)
				m, err := loadPth(b, path)
				switch c.Arch {
				case "ESRGAN", "SRVGGNetCompact":
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					if e := pthGolden(t, b, m, c); e > pthTolerance || math.IsNaN(e) {
						t.Errorf("relative error %.3g against the reference, want <= %g", e, pthTolerance)
					}
				default:
					if err == nil {
						m.Close()
						t.Fatalf("a %s ran", c.Arch)
					}
					if want := "recognised; running it needs ops not yet in vsr"; info.Support != arch.NeedsOps || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
						t.Errorf("%v (support %q), want one line saying %q", err, info.Support, want)
					}
				}
			})
		}
	}
}

// leakyCopy checks that the SRVGGNetCompact at path, whose activation
// has no weights, is detected as ReLU and says the weights cannot tell,
// and returns a .safetensors copy whose metadata says LeakyReLU.
func leakyCopy(t *testing.T, path string) string {
	t.Helper()
	d, err := arch.Open(path, false)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.Detect(d)
	if err != nil {
		t.Fatal(err)
	}
	if info.Activation != "relu" || !strings.Contains(strings.Join(info.Evidence, "; "), "cannot tell ReLU from LeakyReLU") {
		t.Errorf("%s: activation %q, evidence %q: want relu and that the weights cannot tell", path, info.Activation, info.Evidence)
	}
	d.Metadata = map[string]string{"act_type": "leakyrelu"}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))+".safetensors")
	if err := arch.Write(out, d, nil); err != nil {
		t.Fatal(err)
	}
	return out
}
