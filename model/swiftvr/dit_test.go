package swiftvr

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// synthCheckpoint writes and opens a synthetic checkpoint preset (seed 1),
// or opens the full one at $VSR_FULL_CK.
func synthCheckpoint(t testing.TB, preset string) *Checkpoint {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ck")
	if d := os.Getenv("VSR_FULL_CK"); preset == "full" && d != "" {
		dir = d // made by vsr checkpoint synth --preset full (seed 1)
	} else if err := Synth(dir, preset, 1); err != nil {
		t.Fatal(err)
	}
	ck, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return ck
}

// loadDiT loads ck's DiT onto b (in bf16, or prec if given).
func loadDiT(t testing.TB, b backend.Backend, ck *Checkpoint, prec ...Precision) *DiT {
	t.Helper()
	prompt, err := ck.PromptEmbedding()
	if err != nil {
		t.Fatal(err)
	}
	p := BF16
	if len(prec) > 0 {
		p = prec[0]
	}
	d, err := NewDiT(b, FileSource{ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// synthDiT loads the DiT of a synthetic checkpoint preset onto b.
func synthDiT(t testing.TB, b backend.Backend, preset string) (*DiT, Dims) {
	t.Helper()
	ck := synthCheckpoint(t, preset)
	return loadDiT(t, b, ck), ck.Dims
}

func randLatents(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 5))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}

// forward runs d on host latents of f x h x w x channels.
func forward(t testing.TB, b backend.Backend, d *DiT, x []float32, f, h, w, offset int) []float32 {
	t.Helper()
	xt, err := b.Upload(backend.Shape{N: f, H: h, W: w, C: len(x) / (f * h * w)}, x)
	if err != nil {
		t.Fatal(err)
	}
	defer xt.Free()
	v, err := d.Forward(xt, offset)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Free()
	if v.Shape() != xt.Shape() {
		t.Fatalf("output %v for input %v", v.Shape(), xt.Shape())
	}
	out, err := b.Download(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ditGolden lists the fixtures of scripts/golden_dit.py (testdata/dit):
// the preset, the latent grid and the temporal offset they were made for.
var ditGolden = []ditCase{{"tiny", 2, 40, 72, 3}, {"block", 2, 20, 36, 5}}

type ditCase struct {
	preset       string
	f, h, w, off int
}

// run runs the case's synthetic DiT on b over the fixture's input and
// returns the DiT (for more runs), the input, the prediction and the
// fixture's.
func (c ditCase) run(t *testing.T, b backend.Backend) (d *DiT, x, got, want []float32) {
	t.Helper()
	d, _ = synthDiT(t, b, c.preset)
	x = readF32(t, "../../testdata/dit/"+c.preset+"/dit_in.f32")
	want = readF32(t, "../../testdata/dit/"+c.preset+"/dit_v.f32")
	return d, x, forward(t, b, d, x, c.f, c.h, c.w, c.off), want
}

// TestDiTGolden compares the DiT on the CPU in float32 with the prediction
// of an independent PyTorch implementation (scripts/golden_dit.py) for the
// tiny checkpoint (two blocks, unshifted and shifted windows on a 20x36
// token grid) and for one block at the full width (24 heads of 128, FFN
// 14336, text dim 4096).
//
// Both ways of the cross-attention are checked: merged (the prompt's
// repeated padding rows as one key, see promptKeys) and over every prompt
// row.
func TestDiTGolden(t *testing.T) {
	for _, c := range ditGolden {
		if testing.Short() && c.preset == "block" {
			continue
		}
		for _, merge := range []bool{true, false} {
			withMerge(t, merge)
			d, _, got, want := c.run(t, cpu.New(0))
			if merged := d.blocks[0].keys != nil; merged != merge {
				t.Fatalf("%s: prompt merged %v, want %v", c.preset, merged, merge)
			}
			if e := rel(got, want); e > 1e-4 || math.IsNaN(e) {
				t.Errorf("%s, merged prompt %v: relative error %.3g against PyTorch, bound 1e-4", c.preset, merge, e)
			} else {
				t.Logf("%s, merged prompt %v: relative error %.3g against PyTorch", c.preset, merge, e)
			}
		}
	}
}

// withMerge sets mergePrompt for the rest of the test.
func withMerge(t *testing.T, on bool) {
	old := mergePrompt
	mergePrompt = on
	t.Cleanup(func() { mergePrompt = old })
}

// TestPromptMerge checks the merged cross-attention on a prompt whose
// rows repeat in several groups, against attention over every row, and
// the row grouping itself.
func TestPromptMerge(t *testing.T) {
	ck := synthCheckpoint(t, "tiny")
	prompt, err := ck.PromptEmbedding()
	if err != nil {
		t.Fatal(err)
	}
	td := ck.Dims.TextDim
	// As synthesized: the empty prompt's token, then zero padding.
	rows, count := distinctRows(prompt, td)
	if len(rows) != 2 || !slices.Equal(count, []int{1, ck.Dims.PromptTokens - 1}) || slices.ContainsFunc(rows[1], func(v float32) bool { return v != 0 }) {
		t.Fatalf("synthetic prompt: %d distinct rows, counts %v", len(rows), count)
	}
	// Rows: a, b, a, c, c, c, ... c: three distinct, counts 2, 1, 13.
	src := randLatents(3*td, 9)
	for r, k := range []int{0, 1, 0} {
		copy(prompt[r*td:(r+1)*td], src[k*td:])
	}
	for r := 3; r < ck.Dims.PromptTokens; r++ {
		copy(prompt[r*td:(r+1)*td], src[2*td:])
	}
	rows, count = distinctRows(prompt, td)
	if len(rows) != 3 || !slices.Equal(count, []int{2, 1, ck.Dims.PromptTokens - 3}) || rows[1][0] != src[td] {
		t.Fatalf("distinct rows: %d, counts %v", len(rows), count)
	}
	b := cpu.New(0)
	const f, h, w = 2, 20, 36
	x := randLatents(f*h*w*ck.Dims.InChannels, 4)
	var out [2][]float32
	for i, merge := range []bool{true, false} {
		withMerge(t, merge)
		d, err := NewDiT(b, FileSource{ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt, BF16)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		if (d.blocks[0].keys != nil) != merge {
			t.Fatalf("merge %v not taken", merge)
		}
		out[i] = forward(t, b, d, x, f, h, w, 2)
	}
	if e := rel(out[0], out[1]); e > 1e-5 || math.IsNaN(e) {
		t.Errorf("merged prompt: relative error %.3g against attention over every row", e)
	} else {
		t.Logf("merged prompt: relative error %.3g against attention over every row", e)
	}
}

// TestDiTProperties checks what must hold whatever the weights: the output
// is deterministic, and the global temporal offset changes it only by
// rounding (RoPE is relative and every window spans the whole chunk in
// time); bad latent shapes are refused.
func TestDiTProperties(t *testing.T) {
	b := cpu.New(0)
	d, dims := synthDiT(t, b, "tiny")
	const f, h, w = 2, 40, 72
	x := randLatents(f*h*w*dims.InChannels, 1)
	v0 := forward(t, b, d, x, f, h, w, 0)
	again := forward(t, b, d, x, f, h, w, 0)
	for i := range again {
		if again[i] != v0[i] {
			t.Fatal("not deterministic")
		}
	}
	if e := rel(forward(t, b, d, x, f, h, w, 37), v0); e > 1e-4 {
		t.Errorf("temporal offset 37 changed the output by %.3g (relative)", e)
	}
	// The feed-forward layers in pieces of rows (3 pieces of 512, 512 and
	// 416 of the 1440 tokens) give the result of one pass.
	d.FFNRows = 700
	if e := rel(forward(t, b, d, x, f, h, w, 0), v0); e > 1e-6 {
		t.Errorf("FFN in pieces of 700 rows: relative error %.3g against one pass", e)
	}
	for _, s := range []backend.Shape{{N: 1, H: 7, W: 8, C: 48}, {N: 1, H: 8, W: 8, C: 12}} {
		xt, _ := b.Upload(s, make([]float32, s.Elems()))
		if _, err := d.Forward(xt, 0); err == nil {
			t.Errorf("latents %v accepted", s)
		}
	}
}

// rerunner is the CPU backend with a stand-in for CUDA graphs: recording
// keeps the function and replaying runs it again (for the RoPE offset it
// was recorded with, 0, only). It tests the DiT's bookkeeping of
// recordings where there is no GPU.
type rerunner struct {
	*cpu.Backend
	records, freed int
}

type rerun struct {
	r *rerunner
	f func() error
}

func (r *rerunner) Record(f func() error) (backend.Recording, error) {
	r.records++
	return &rerun{r, f}, nil
}

func (x *rerun) Replay(offset int) error {
	if offset != 0 {
		return fmt.Errorf("rerun: offset %d", offset)
	}
	return x.f()
}

func (x *rerun) Free() { x.r.freed++ }

// TestDiTRecordings checks the DiT's recordings on a stand-in recorder:
// each shape is recorded after its first pass and replayed after that
// with the same output, a replay that fails falls back to running op by
// op for good, and past maxGraphs shapes the oldest recording is freed
// first.
func TestDiTRecordings(t *testing.T) {
	b := &rerunner{Backend: cpu.New(0)}
	d, dims := synthDiT(t, b, "tiny")
	shape := func(i int) (f, h, w int) { return 1, 2 + 2*(i%5), 2 + 2*(i/5) }
	run := func(i, offset int) []float32 {
		f, h, w := shape(i)
		return forward(t, b, d, randLatents(f*h*w*dims.InChannels, uint64(i)), f, h, w, offset)
	}
	want := run(0, 0)
	if b.records != 1 || d.replays != 0 {
		t.Fatalf("first pass: %d recordings, %d replays", b.records, d.replays)
	}
	if got := run(0, 0); !slices.Equal(got, want) || d.replays != 1 {
		t.Errorf("second pass: %d replays, output equal %v", d.replays, slices.Equal(got, want))
	}
	// The stand-in cannot replay offset 3: the DiT runs op by op instead,
	// and does not record that shape again.
	if got := run(0, 3); d.replays != 1 || b.freed != 1 || rel(got, want) > 1e-4 {
		t.Errorf("failed replay: %d replays, %d freed, relative difference %.3g", d.replays, b.freed, rel(got, want))
	}
	run(0, 0)
	if b.records != 1 || d.replays != 1 {
		t.Errorf("after a failed replay: %d recordings, %d replays", b.records, d.replays)
	}
	// Shapes 1..maxGraphs push shape 0 out, oldest first; shape 0 is then
	// recorded anew.
	for i := 1; i <= maxGraphs; i++ {
		run(i, 0)
	}
	_, kept0 := d.graphs[graphKey{backend.Shape{N: 1, H: 2, W: 2, C: dims.InChannels}, d.FFNRows}]
	if len(d.graphs) != maxGraphs || b.records != 1+maxGraphs || kept0 {
		t.Errorf("%d recordings kept (shape 0 among them: %v), %d made", len(d.graphs), kept0, b.records)
	}
	freed := b.freed
	run(0, 0)
	if b.records != 2+maxGraphs || b.freed != freed+1 {
		t.Errorf("shape 0 again: %d recordings made, %d freed", b.records, b.freed-freed)
	}
	// FFN row pieces are part of what a recording depends on.
	d.FFNRows = 1
	run(0, 0)
	if b.records != 3+maxGraphs {
		t.Errorf("other FFN pieces: %d recordings made", b.records)
	}
	d.Graphs = false
	passes, replays := d.passes, d.replays
	run(0, 0)
	if d.passes != passes+1 || d.replays != replays {
		t.Error("a pass with Graphs off replayed")
	}
}
