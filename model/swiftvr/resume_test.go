package swiftvr

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
)

// resumable is a session that can resume (Session and Parallel both are).
type resumable interface {
	engine
	model.Resumer
	Close()
}

// resumeCase is one video run by sessions that open makes.
type resumeCase struct {
	frames, w, h, ow, oh int
	open                 func(t *testing.T) resumable
	// points are the batches after which check saves and resumes (nil:
	// every one Checkpoint allows).
	points []int
	// spread, with points nil, takes the first, a middle and the last
	// batch Checkpoint allows instead.
	spread bool
	// warm runs the video once before the runs check times.
	warm bool
}

// frame is an output frame's SHA-256: runs compare their frames by them.
type frame [32]byte

// run runs the batches of e from first on, with the input frames after
// those of the batches before first, one batch at a time; after Start of
// each batch i, before its Wait, it calls at(i) (nil: not) and stops when
// at says so. It returns the output frames' hashes.
func (c resumeCase) run(t *testing.T, e resumable, v []byte, first int, at func(i int) (stop bool)) []frame {
	t.Helper()
	plan, err := e.Plan(c.frames)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.NewBatch(slices.Max(plan), c.w, c.h, backend.RGB24, backend.RGB24)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	fs, read := c.w*c.h*3, 0
	for _, n := range plan[:first] {
		read += n
	}
	var out []frame
	for i := first; i < len(plan); i++ {
		copy(b.In(), v[read*fs:(read+plan[i])*fs])
		read += plan[i]
		if err := e.Start(context.Background(), b, plan[i]); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		stop := at != nil && at(i)
		if err := b.Wait(); err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
		ofs := c.ow * c.oh * 3
		for k := range b.(model.OutCounter).OutFrames() {
			if fo, ok := b.(model.FrameOuter); ok {
				out = append(out, sha256.Sum256(fo.OutFrame(k)))
			} else {
				out = append(out, sha256.Sum256(b.Out()[k*ofs:(k+1)*ofs]))
			}
		}
		if stop {
			break
		}
	}
	return out
}

// check runs the video uninterrupted, then once more saving the state
// after every batch of points (that run must still give the same frames),
// and resumes a new session from each state: the frames before the state
// and those after it are bitwise the uninterrupted run's, and as many as
// Checkpoint says. At the middle state, the run stops there and closes, as
// a killed one would. It logs the states' sizes, and the time of the run
// that saved them against the time of the run that did not.
func (c resumeCase) check(t *testing.T) {
	t.Helper()
	v := video(c.frames, c.w, c.h, uint64(c.frames))
	if c.warm {
		e := c.open(t)
		c.run(t, e, v, 0, nil)
		e.Close()
	}
	e := c.open(t)
	start := time.Now()
	want := c.run(t, e, v, 0, nil)
	whole := time.Since(start)
	plan, _ := e.Plan(c.frames)
	e.Close()
	if len(want) != c.frames {
		t.Fatalf("%d output frames, want %d", len(want), c.frames)
	}
	if len(plan) < 2 {
		t.Fatalf("a plan of %d batches leaves nothing to resume", len(plan))
	}
	points := c.points
	switch {
	case points == nil && c.spread:
		points = slices.Compact([]int{0, (len(plan) - 2) / 2, len(plan) - 2})
	case points == nil:
		for i := range len(plan) - 1 {
			points = append(points, i)
		}
	}
	states := map[int][]byte{}
	var saving time.Duration
	e = c.open(t)
	start = time.Now()
	got := c.run(t, e, v, 0, func(i int) bool {
		if _, ok := e.Checkpoint(c.frames, i); ok && slices.Contains(points, i) {
			var buf bytes.Buffer
			start := time.Now()
			if err := e.SaveState(&buf); err != nil {
				t.Fatalf("save after batch %d: %v", i, err)
			}
			saving += time.Since(start)
			states[i] = buf.Bytes()
		}
		return false
	})
	saved := time.Since(start)
	e.Close()
	if !slices.Equal(got, want) {
		t.Fatal("a run that saved its state gives other frames")
	}
	if len(states) != len(points) {
		t.Fatalf("%d states saved after batches %v", len(states), points)
	}
	for _, i := range points {
		st := states[i]
		out, ok := e.Checkpoint(c.frames, i)
		if !ok || out < 0 || out > c.frames {
			t.Fatalf("Checkpoint(%d, %d) = %d, %v", c.frames, i, out, ok)
		}
		if i == points[len(points)/2] { // killed after saving
			a := c.open(t)
			before := c.run(t, a, v, 0, func(j int) bool {
				if j == i {
					var buf bytes.Buffer
					if err := a.SaveState(&buf); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(buf.Bytes(), st) {
						t.Errorf("the state after batch %d differs between two runs", i)
					}
				}
				return j == i
			})
			a.Close()
			if !slices.Equal(before, want[:out]) {
				t.Errorf("batches 0..%d give %d frames, Checkpoint says %d, or other frames", i, len(before), out)
			}
		}
		b := c.open(t)
		start := time.Now()
		if err := b.LoadState(bytes.NewReader(st)); err != nil {
			t.Fatalf("load the state after batch %d: %v", i, err)
		}
		load := time.Since(start)
		rest := c.run(t, b, v, i+1, nil)
		b.Close()
		if len(rest) != len(want)-out {
			t.Errorf("resumed after batch %d: %d frames, want %d", i, len(rest), c.frames-out)
		} else if !slices.Equal(rest, want[out:]) {
			t.Errorf("resumed after batch %d: other frames than the uninterrupted run's", i)
		}
		t.Logf("after batch %d of %d (frame %d of %d): a state of %d bytes, loaded in %v", i, len(plan), out, c.frames, len(st), load)
	}
	if _, ok := e.Checkpoint(c.frames, len(plan)-1); ok {
		t.Error("Checkpoint allows a state after the last batch")
	}
	t.Logf("the whole run: %v; with %d states saved: %v, of which SaveState %v (it waits for its batch)", whole, len(states), saved, saving)
}

// sessions opens Sessions of the tiny model on one CPU (dit: with its
// DiT).
func sessions(r *ReAE, d *DiT, w, h, frames int, opt Options) func(t *testing.T) resumable {
	return func(t *testing.T) resumable {
		e, err := NewSession(r, d, w, h, frames, opt)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// parallels opens Parallels of the tiny model over ranks.
func parallels(ranks []Replica, w, h, frames int, opt Options) func(t *testing.T) resumable {
	return func(t *testing.T) resumable {
		e, err := NewParallel(ranks, w, h, frames, opt)
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

// TestResumeSession: a Session of the tiny checkpoint stopped after any
// batch and resumed from its state in a new session gives bitwise the
// frames of a run never stopped, with the DiT and its history (dit_overlap
// 1 and 2, the last chunk filled up with history), without it, with a
// last chunk of padding only, in ReAE bands and with the encode proxy.
func TestResumeSession(t *testing.T) {
	r, dit := tinyModel(t, cpu.New(0))
	const w, h = 40, 24
	for _, c := range []struct {
		name   string
		frames int
		dit    bool
		opt    Options
	}{
		{"DiT, overlap 1", 53, true, Options{Width: 64, Height: 32, ClipLen: 8, DiTOverlap: 1}},
		{"DiT, overlap 2", 37, true, Options{Width: 64, Height: 32, ClipLen: 8, DiTOverlap: 2}},
		{"no DiT", 45, false, Options{Width: 48, Height: 32, ClipLen: 8}},
		{"last chunk padding only", 20, true, Options{Width: 64, Height: 32, ClipLen: 8, DiTOverlap: 1}},
		{"2 bands", 29, true, Options{Width: 64, Height: 64, ClipLen: 8, DiTOverlap: 1, Bands: 2}},
		{"encode proxy", 29, true, Options{Width: 64, Height: 32, ClipLen: 8, EncodeProxy: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := dit
			if !c.dit {
				d = nil
			}
			resumeCase{frames: c.frames, w: w, h: h, ow: c.opt.Width, oh: c.opt.Height, open: sessions(r, d, w, h, c.frames, c.opt)}.check(t)
		})
	}
}

// TestResumeParallel: chunk parallelism over 2 and 3 CPU ranks and
// sequence parallelism (2 ranks in one group of 2, 4 in two groups of 2)
// resume after any wave, bitwise as a run never stopped.
func TestResumeParallel(t *testing.T) {
	var models []Replica
	for range 4 {
		r, d := tinyModel(t, cpu.New(1))
		models = append(models, Replica{R: r, DiT: d})
	}
	const w, h = 40, 24
	for _, c := range []struct {
		ranks, seq, frames int
		dit                bool
		oh                 int
	}{
		{2, 1, 53, true, 32},
		{3, 1, 45, false, 32},
		{2, 2, 29, true, 64},
		{4, 2, 45, true, 64},
	} {
		t.Run(fmt.Sprintf("%d ranks in groups of %d, DiT %v", c.ranks, c.seq, c.dit), func(t *testing.T) {
			ranks := append([]Replica(nil), models[:c.ranks]...)
			if !c.dit {
				for i := range ranks {
					ranks[i].DiT = nil
				}
			}
			opt := Options{Width: 64, Height: c.oh, ClipLen: 8, DiTOverlap: 1, Sequence: c.seq}
			resumeCase{frames: c.frames, w: w, h: h, ow: 64, oh: c.oh, open: parallels(ranks, w, h, c.frames, opt)}.check(t)
		})
	}
}

// TestResumeRefusals: LoadState refuses a state of another size, model
// setting or device layout (naming what differs), a truncated or damaged
// one, and a session that has started; a refused load leaves the session
// able to run from the start.
func TestResumeRefusals(t *testing.T) {
	r, dit := tinyModel(t, cpu.New(0))
	r2, dit2 := tinyModel(t, cpu.New(0))
	const w, h, frames = 40, 24, 37
	opt := Options{Width: 64, Height: 32, ClipLen: 8, DiTOverlap: 1}
	c := resumeCase{frames: frames, w: w, h: h, ow: 64, oh: 32, open: sessions(r, dit, w, h, frames, opt)}
	v := video(frames, w, h, 5)
	save := func(e resumable, after int) []byte {
		var buf bytes.Buffer
		c.run(t, e, v, 0, func(i int) bool {
			if i == after {
				if err := e.SaveState(&buf); err != nil {
					t.Fatal(err)
				}
			}
			return i == after
		})
		e.Close()
		return buf.Bytes()
	}
	st := save(c.open(t), 1)
	refused := func(what string, state []byte, e resumable, want string) {
		t.Helper()
		err := e.LoadState(bytes.NewReader(state))
		switch {
		case err == nil:
			t.Errorf("%s: loaded", what)
		case !strings.Contains(err.Error(), want):
			t.Errorf("%s: %v, want it to say %q", what, err, want)
		}
	}
	other := opt
	other.Width = 96
	e := c.open(t)
	for _, x := range []struct {
		what  string
		state []byte
		e     resumable
		want  string
	}{
		{"another output size", st, sessions(r, dit, w, h, frames, other)(t), "output width 64, this session has 96"},
		{"another video length", st, sessions(r, dit, w, h, frames+8, opt)(t), "frames 37, this session has 45"},
		{"without the DiT", st, sessions(r, nil, w, h, frames, opt)(t), "dit 1, this session has 0"},
		{"another overlap", st, sessions(r, dit, w, h, frames, Options{Width: 64, Height: 32, ClipLen: 8})(t), "dit overlap 1"},
		{"in bands", st, sessions(r, dit, w, h, frames, Options{Width: 64, Height: 32, ClipLen: 8, DiTOverlap: 1, Bands: 2})(t), "band layout"},
		{"on 2 ranks", st, parallels([]Replica{{r, dit}, {r2, dit2}}, w, h, frames, opt)(t), "which this session's batches do not end at"},
		{"empty", nil, e, "not a SwiftVR state"},
		{"not a state", []byte("PK\x03\x04 a zip file, say, and more bytes"), e, "not a SwiftVR state"},
		{"truncated in the header", st[:40], e, "not a SwiftVR state"},
		{"truncated in a tensor", st[:len(st)/2], e, "unexpected EOF"},
		{"without its checksum", st[:len(st)-4], e, "EOF"},
		{"a flipped bit", flip(st, len(st)*2/3), e, "checksum"},
		{"another format version", flip(st, 8), e, "format version"},
	} {
		refused(x.what, x.state, x.e, x.want)
		if x.e != e {
			x.e.Close()
		}
	}
	// The refused loads left e as new: it runs the whole video.
	a := c.open(t)
	want := c.run(t, a, v, 0, nil)
	a.Close()
	if !slices.Equal(c.run(t, e, v, 0, nil), want) {
		t.Error("a session that refused states runs other frames than a new one")
	}
	refused("a session that has started", st, e, "before its first batch")
	e.Close()
	// A Parallel's state goes only into a Parallel of its layout.
	ranks := []Replica{{r, dit}, {r2, dit2}}
	pst := save(parallels(ranks, w, h, frames, opt)(t), 0)
	s := c.open(t)
	refused("a Parallel's state in a Session", pst, s, "batches do not end at")
	s.Close()
	seq := opt
	seq.Sequence = 2
	p := parallels(ranks, w, h, frames, seq)(t)
	refused("a Parallel's state in sequence parallelism", pst, p, "band layout 0, this session has 2")
	p.Close()
	if err := (&Session{live: true}).SaveState(&bytes.Buffer{}); err == nil {
		t.Error("a live session saved its state")
	}
}

// flip returns p with bit 0 of byte i flipped.
func flip(p []byte, i int) []byte {
	q := bytes.Clone(p)
	q[i] ^= 1
	return q
}

// TestStateBytes: StateBytes is the size of the tensors of a saved
// state, for whole frames on the CPU (4-byte values) at two sizes, with and
// without the DiT's history.
func TestStateBytes(t *testing.T) {
	r, dit := tinyModel(t, cpu.New(0))
	ck := synthCheckpoint(t, "tiny")
	const w, h, frames = 40, 24, 29
	for _, c := range []struct {
		ow, oh int
		dit    *DiT
	}{{64, 32, dit}, {96, 80, dit}, {96, 80, nil}} {
		opt := Options{Width: c.ow, Height: c.oh, ClipLen: 8, DiTOverlap: 2}
		rc := resumeCase{frames: frames, w: w, h: h, ow: c.ow, oh: c.oh, open: sessions(r, c.dit, w, h, frames, opt)}
		e := rc.open(t).(*Session)
		var buf bytes.Buffer
		rc.run(t, e, video(frames, w, h, 1), 0, func(i int) bool {
			if err := e.SaveState(&buf); err != nil {
				t.Fatal(err)
			}
			return true
		})
		hist := e.history(e.chunks[e.next])
		e.Close()
		s, err := readState(bytes.NewReader(buf.Bytes()), e.loadable)
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		for _, band := range s.bands {
			for _, x := range band {
				got += int64(len(x.data))
			}
		}
		if s.hist != nil {
			got += int64(len(s.hist.data))
		}
		if want := StateBytes(ck.Dims, c.ow, c.oh, hist, 4); got != want || (c.dit != nil) != (hist > 0) {
			t.Errorf("%dx%d, %d history latents: the state's tensors hold %d bytes, StateBytes says %d", c.ow, c.oh, hist, got, want)
		}
		t.Logf("%dx%d: a state of %d bytes, %d of them tensors", c.ow, c.oh, buf.Len(), got)
	}
}

// TestStateValuesAsStored: a device that stores bf16 values has them saved
// in 2 bytes each, the stored bits, and loaded back unchanged (zeros of
// both signs, subnormals, the largest, infinities); a state's tensor of
// another value type is refused.
func TestStateValuesAsStored(t *testing.T) {
	g := memGPU{Backend: cpu.New(1)}
	bits := []uint16{0x0000, 0x8000, 0x0001, 0x807f, 0x3f80, 0xbf81, 0x7f7f, 0xff7f, 0x7f80, 0xff80, 0x4049}
	v := make([]float32, len(bits))
	for i, b := range bits {
		v[i] = math.Float32frombits(uint32(b) << 16)
	}
	s := backend.Shape{N: 1, H: 1, W: len(v), C: 1}
	x, err := g.Upload(s, v)
	if err != nil {
		t.Fatal(err)
	}
	h, err := toHost(g, x)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range bits {
		if got := binary.LittleEndian.Uint16(h.data[2*i:]); got != b || h.value != valueBF16 {
			t.Errorf("value %d: saved %#04x (%v), stored %#04x", i, got, h.value, b)
		}
	}
	y, err := h.upload(g)
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := g.Download(y); !slices.Equal(f32bytes(w), f32bytes(v)) {
		t.Errorf("loaded %v, saved %v", w, v)
	}
	if _, err := h.upload(cpu.New(1)); err == nil || !strings.Contains(err.Error(), "bf16 values for a device that stores f32") {
		t.Errorf("bf16 values on an f32 device: %v", err)
	}
}

// TestResumeAutoBands: a session whose bands were chosen for the memory
// free (AutoBands) resumes from a state saved in other bands, or on whole
// frames, in the state's bands, bitwise as the run that saved it; a
// session whose bands were asked for refuses it.
func TestResumeAutoBands(t *testing.T) {
	r, dit := tinyModel(t, cpu.New(0))
	const w, h, ow, oh, frames = 40, 24, 64, 64, 29
	v := video(frames, w, h, 2)
	opt := func(bands int, auto bool) Options {
		return Options{Width: ow, Height: oh, ClipLen: 8, DiTOverlap: 1, Bands: bands, AutoBands: auto}
	}
	for _, c := range []struct{ saved, loads int }{{2, 1}, {1, 3}, {3, 2}} {
		rc := resumeCase{frames: frames, w: w, h: h, ow: ow, oh: oh, open: sessions(r, dit, w, h, frames, opt(c.saved, true))}
		a := rc.open(t)
		var st bytes.Buffer
		want := rc.run(t, a, v, 0, func(i int) bool {
			if i == 1 {
				if err := a.SaveState(&st); err != nil {
					t.Fatal(err)
				}
			}
			return false
		})
		a.Close()
		out, _ := a.Checkpoint(frames, 1)
		b := sessions(r, dit, w, h, frames, opt(c.loads, true))(t)
		if err := b.LoadState(bytes.NewReader(st.Bytes())); err != nil {
			t.Fatalf("saved in %d bands, loaded with %d chosen: %v", c.saved, c.loads, err)
		}
		if n := len(b.(*Session).states()); n != c.saved {
			t.Errorf("saved in %d bands, loaded with %d chosen: runs in %d", c.saved, c.loads, n)
		}
		if got := rc.run(t, b, v, 2, nil); !slices.Equal(got, want[out:]) {
			t.Errorf("saved in %d bands, loaded with %d chosen: other frames", c.saved, c.loads)
		}
		b.Close()
		asked := sessions(r, dit, w, h, frames, opt(c.loads, false))(t)
		if err := asked.LoadState(bytes.NewReader(st.Bytes())); err == nil || !strings.Contains(err.Error(), "band") {
			t.Errorf("saved in %d bands, loaded with %d asked for: %v", c.saved, c.loads, err)
		}
		asked.Close()
	}
}
