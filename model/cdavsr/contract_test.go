package cdavsr

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
)

// write writes tensors edited by edit (which may rename, drop or add) with
// meta.
func write(t *testing.T, meta map[string]string, edit func([]safetensors.WriteTensor) []safetensors.WriteTensor) string {
	t.Helper()
	ts := Synthesize(4, 1)
	if edit != nil {
		ts = edit(ts)
	}
	path := filepath.Join(t.TempDir(), "c.safetensors")
	if err := safetensors.Write(path, ts, meta); err != nil {
		t.Fatal(err)
	}
	return path
}

var okMeta = map[string]string{MetaResidualUnit: ResidualUnit}

func rename(prefix string) func([]safetensors.WriteTensor) []safetensors.WriteTensor {
	return func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
		for i := range ts {
			ts[i].Name = prefix + ts[i].Name
		}
		return ts
	}
}

// TestContract: every refusal of the contract, with its message, from the
// header alone; what the contract accepts (any one prefix, tensors outside
// the set, the sigmoid gate).
func TestContract(t *testing.T) {
	f16 := func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
		for i := range ts {
			if ts[i].Name == "conv_h.bias" {
				ts[i].DType, ts[i].Data = safetensors.F16, make([]byte, 2*64)
			}
		}
		return ts
	}
	reshape := func(name string, shape []int) func([]safetensors.WriteTensor) []safetensors.WriteTensor {
		return func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
			for i := range ts {
				if ts[i].Name == name {
					n := 4
					for _, d := range shape {
						n *= d
					}
					ts[i].Shape, ts[i].Data = shape, make([]byte, n)
				}
			}
			return ts
		}
	}
	drop := func(name string) func([]safetensors.WriteTensor) []safetensors.WriteTensor {
		return func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
			var out []safetensors.WriteTensor
			for _, t := range ts {
				if t.Name != name {
					out = append(out, t)
				}
			}
			return out
		}
	}
	add := func(name string) func([]safetensors.WriteTensor) []safetensors.WriteTensor {
		return func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
			return append(ts, safetensors.WriteTensor{Name: name, DType: safetensors.F32, Shape: []int{1}, Data: make([]byte, 4)})
		}
	}
	both := func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
		a := rename("params.")(Synthesize(4, 1))
		return append(a, rename("params_ema.")(ts)...)
	}
	for _, c := range []struct {
		name string
		meta map[string]string
		edit func([]safetensors.WriteTensor) []safetensors.WriteTensor
		want string // "" accepted
	}{
		{"plain", okMeta, nil, ""},
		{"params_ema prefix", okMeta, rename("params_ema."), ""},
		{"module prefix and an unrelated tensor", okMeta, func(ts []safetensors.WriteTensor) []safetensors.WriteTensor {
			return add("optimizer.step")(rename("module.")(ts))
		}, ""},
		{"sigmoid gate", map[string]string{MetaResidualUnit: ResidualUnit, MetaGate: GateSigmoid}, nil, ""},
		{"no metadata", nil, nil, `metadata cda_vsr.residual_unit is missing; the contract needs "luma-range"`},
		{"other unit", map[string]string{MetaResidualUnit: "255"}, nil, `metadata cda_vsr.residual_unit is "255"; the contract accepts only "luma-range"`},
		{"other gate", map[string]string{MetaResidualUnit: ResidualUnit, MetaGate: "tanh"}, nil, `metadata cda_vsr.gate is "tanh"; accepted: "sigmoid", or no key for aligned*(1+w)`},
		{"two sets", okMeta, both, `2 weight sets (prefixes "params.", "params_ema."); the contract takes exactly one`},
		{"no set", okMeta, func([]safetensors.WriteTensor) []safetensors.WriteTensor {
			return []safetensors.WriteTensor{add("x")(nil)[0]}
		}, "no weight set: none of the 1 tensors has a CDA-VSR name"},
		{"bad scale", okMeta, reshape("upconv1.weight", []int{47, 64, 3, 3}), "upconv1.weight has shape [47 64 3 3]; expected [3*s*s 64 3 3] with s a positive integer"},
		{"f16", okMeta, f16, "conv_h.bias is F16; the contract takes float32"},
		{"shape", okMeta, reshape("convs.0.weight", []int{64, 191, 3, 3}), "convs.0.weight has shape [64 191 3 3]; expected [64 192 3 3]"},
		{"extra", okMeta, add("reconstruction_P.12.conv1.weight"), "reconstruction_P.12.conv1.weight is not a CDA-VSR tensor"},
		{"missing", okMeta, drop("deform_align.dcn.weight"), "missing deform_align.dcn.weight (the contract has 179 tensors)"},
	} {
		path := write(t, c.meta, c.edit)
		ct, err := Inspect(path, 0, 0)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.want == "" {
			if ct.Err() != nil || ct.Tensors != 179 || ct.Scale != 4 {
				t.Errorf("%s: refused (%v), %d tensors, scale %d", c.name, ct.Err(), ct.Tensors, ct.Scale)
			}
			continue
		}
		err = ct.Err()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want it to say %q", c.name, err, c.want)
		}
		// Load refuses with the same message, before any tensor is read.
		if _, err := Load(cpu.New(1), path); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Load: %v", c.name, err)
		}
	}
	// Files that are not safetensors at all.
	dir := t.TempDir()
	pkl := filepath.Join(dir, "best.pth")
	os.WriteFile(pkl, []byte{0x80, 0x02, 'K', 0x01, '.'}, 0o644)
	if _, err := Inspect(pkl, 0, 0); err == nil || !strings.Contains(err.Error(), "PyTorch pickle") {
		t.Errorf("pickle: %v", err)
	}
	engine := filepath.Join(dir, "cdavsr.engine")
	os.WriteFile(engine, []byte("ftrt\x00\x00\x00\x00garbage"), 0o644)
	if _, err := Inspect(engine, 0, 0); err == nil || !strings.Contains(err.Error(), "not a safetensors file") {
		t.Errorf("engine: %v", err)
	}
	if ct, _ := Inspect(write(t, okMeta, nil), 640, 360); ct.StateBytes != 2*128*4*640*360 {
		t.Errorf("state bytes %d", ct.StateBytes)
	}
}

// FuzzInspect: damaged headers never panic.
func FuzzInspect(f *testing.F) {
	var hdr bytes.Buffer
	json := `{"__metadata__":{"cda_vsr.residual_unit":"luma-range"},"params.upconv1.weight":{"dtype":"F32","shape":[48,64,3,3],"data_offsets":[0,4]}}`
	binary.Write(&hdr, binary.LittleEndian, uint64(len(json)))
	hdr.WriteString(json)
	hdr.Write(make([]byte, 4))
	f.Add(hdr.Bytes())
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.safetensors")
		os.WriteFile(path, data, 0o644)
		if c, err := Inspect(path, 8, 8); err == nil {
			_ = c.Err()
		}
		Sniff(path)
	})
}

// foreign is a tensor of no backend vsr has.
type foreign struct{ s backend.Shape }

func (f foreign) Shape() backend.Shape { return f.s }
func (f foreign) Free()                {}

// TestInstance: a reset step equals a fresh instance's first step; two
// instances interleaved on one backend equal each alone; bad inputs are
// refused without touching the history.
func TestInstance(t *testing.T) {
	b := cpu.New(0)
	net, err := Load(b, synthFile(t, t.TempDir(), 4, nil, ""))
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	frames, mvs, ress := goldenInputs()
	up := func(v []float32, c int) backend.Tensor {
		x, err := b.Upload(backend.Shape{N: 1, H: gh, W: gw, C: c}, v)
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	step := func(in *Instance, k int, reset bool) []float32 {
		x, mv, res := up(frames[k], 3), up(mvs[k], 2), up(ress[k], 1)
		defer x.Free()
		defer mv.Free()
		defer res.Free()
		y, err := in.Step(x, mv, res, reset)
		if err != nil {
			t.Fatal(err)
		}
		defer y.Free()
		v, _ := b.Download(y)
		return v
	}
	same := func(what string, a, c []float32) {
		t.Helper()
		if relErr(a, c) != 0 {
			t.Errorf("%s: outputs differ", what)
		}
	}
	a, _ := net.Open(gw, gh)
	defer a.Close()
	alone := [][]float32{step(a, 0, false), step(a, 1, false), step(a, 2, false)}
	// Reset: the I path on frame 3, as a fresh instance's first step.
	fresh, _ := net.Open(gw, gh)
	same("reset vs fresh", step(a, 3, true), step(fresh, 3, false))
	fresh.Close()
	// Interleaved with another instance fed other frames.
	p, _ := net.Open(gw, gh)
	q, _ := net.Open(gw, gh)
	defer p.Close()
	defer q.Close()
	for k := 0; k < 3; k++ {
		step(q, 3-k, false)
		same("interleaved", step(p, k, false), alone[k])
	}
	// Bad inputs: refused, and the history is as before.
	c, _ := net.Open(gw, gh)
	defer c.Close()
	step(c, 0, false)
	wrong := up(frames[0][:gw*gh], 1)
	defer wrong.Free()
	x, mv := up(frames[1], 3), up(mvs[1], 2)
	defer x.Free()
	defer mv.Free()
	for _, args := range [][3]backend.Tensor{{wrong, mv, wrong}, {x, wrong, wrong}, {x, mv, nil}, {x, nil, wrong}} {
		if _, err := c.Step(args[0], args[1], args[2], false); err == nil {
			t.Error("a step with a wrong input was taken")
		}
	}
	// A tensor of another device: refused by name.
	if _, err := c.Step(foreign{backend.Shape{N: 1, H: gh, W: gw, C: 3}}, mv, wrong, false); err == nil ||
		!strings.Contains(err.Error(), "frame is not a tensor of cpu, where the instance runs") {
		t.Errorf("a frame of another device: %v", err)
	}
	same("after refused steps", step(c, 1, false), alone[1])
	c.Close()
	c.Close()
	if _, err := c.Step(x, mv, nil, true); err == nil {
		t.Error("a step on a closed instance")
	}
}
