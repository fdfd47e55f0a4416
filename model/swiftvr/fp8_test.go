package swiftvr

import (
	"bytes"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/backend/cuda"
	"github.com/vsr-dev/vsr/model"
)

// TestDiTFP8GPU runs the DiT with its blocks' linear layers in fp8 on the
// GPU against the independent PyTorch float32 predictions (testdata/dit:
// the tiny checkpoint and one block at the full width), beside the bf16
// run's error; the fp8 output is the same bitwise run to run and with
// recorded graphs as op by op.
func TestDiTFP8GPU(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	g := gpu(t, cuda.BF16)
	for _, c := range ditGolden {
		ck := synthCheckpoint(t, c.preset)
		x := readF32(t, "../../testdata/dit/"+c.preset+"/dit_in.f32")
		want := readF32(t, "../../testdata/dit/"+c.preset+"/dit_v.f32")
		d8 := loadDiT(t, g, ck, FP8)
		if d8.Precision() != FP8 {
			t.Fatalf("%s: loaded as %v", c.preset, d8.Precision())
		}
		d8.Graphs = false
		ops := forward(t, g, d8, x, c.f, c.h, c.w, c.off)
		again := forward(t, g, d8, x, c.f, c.h, c.w, c.off)
		d8.Graphs = true
		forward(t, g, d8, x, c.f, c.h, c.w, c.off) // records
		replay := forward(t, g, d8, x, c.f, c.h, c.w, c.off)
		if !bytes.Equal(f32bytes(ops), f32bytes(again)) {
			t.Errorf("%s fp8: two runs differ", c.preset)
		}
		if !bytes.Equal(f32bytes(ops), f32bytes(replay)) || d8.replays == 0 {
			t.Errorf("%s fp8: the graph's replay (%d) differs from op by op", c.preset, d8.replays)
		}
		d16 := loadDiT(t, g, ck)
		bf := forward(t, g, d16, x, c.f, c.h, c.w, c.off)
		e8, e16, e816 := rel(ops, want), rel(bf, want), rel(ops, bf)
		t.Logf("%s: relative error against PyTorch float32: fp8 %.3g, bf16 %.3g; fp8 against bf16 %.3g", c.preset, e8, e16, e816)
		if e8 > 0.1 || math.IsNaN(e8) {
			t.Errorf("%s fp8: relative error %.3g against PyTorch float32, bound 0.1", c.preset, e8)
		}
		d8.Close()
		d16.Close()
	}
}

// TestDiTFP8Refused: the CPU backend has no fp8 layers, and says so.
func TestDiTFP8Refused(t *testing.T) {
	ck := synthCheckpoint(t, "tiny")
	prompt, err := ck.PromptEmbedding()
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewDiT(cpu.New(0), FileSource{ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt, FP8)
	if err == nil || !strings.Contains(err.Error(), "compute capability 8.9") {
		t.Fatalf("fp8 on the CPU: %v", err)
	}
}

// TestDiTDTypeRequest: the DiT's number format is set when the model
// loads; a request that asks for another is refused, one that asks for
// the loaded one (or nothing) is not.
func TestDiTDTypeRequest(t *testing.T) {
	dir := synthTiny(t, 3)
	def := model.Defaults(family{}.Params())
	m, err := family{}.Load(cpu.New(0), dir, model.Params{Default: def})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	r := m.(*resident)
	for v, ok := range map[string]bool{"bf16": true, "fp8": false} {
		err := r.Check(model.Params{Set: model.Values{"dit-dtype": v}, Default: def})
		if (err == nil) != ok || (err != nil && !strings.Contains(err.Error(), "set when the model loads")) {
			t.Errorf("dit_dtype %s on a bf16 DiT: %v", v, err)
		}
	}
	if err := r.Check(model.Params{Default: def}); err != nil {
		t.Error(err)
	}
}
