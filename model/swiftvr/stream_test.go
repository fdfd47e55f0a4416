package swiftvr

import "testing"

func TestPlanChunks(t *testing.T) {
	cs, err := PlanChunks(361, 24)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 15 || cs[0].N != 28 || cs[1].N != 24 || cs[13].N != 24 || cs[14].N != 21 || !cs[14].Last || cs[14].Start != 340 {
		t.Errorf("361 frames: %+v", cs)
	}
	for _, f := range []int{1, 2, 5, 24, 25, 26, 27, 28, 29, 30, 52, 53, 100, 361} {
		for _, clip := range []int{4, 8, 24} {
			cs, err := PlanChunks(f, clip)
			if err != nil {
				t.Fatal(err)
			}
			next, out := 0, 0
			for i, c := range cs {
				if c.Start != next || c.Last != (i == len(cs)-1) {
					t.Fatalf("%d frames, clip %d: chunk %d %+v", f, clip, i, c)
				}
				if c.Last && (c.N-1)%4 != 0 || !c.Last && c.N%4 != 0 {
					t.Fatalf("%d frames, clip %d: chunk %+v has a bad length", f, clip, c)
				}
				from, to := c.OutputRange(f)
				if from != out && to > from {
					t.Fatalf("%d frames, clip %d: chunk %d writes from %d, expected %d", f, clip, i, from, out)
				}
				out = max(out, to)
				next += c.N
			}
			if next != PaddedFrames(f) || out != f {
				t.Errorf("%d frames, clip %d: chunks cover %d of %d padded frames, write %d outputs", f, clip, next, PaddedFrames(f), out)
			}
		}
	}
	if _, err := PlanChunks(10, 6); err == nil {
		t.Error("clip length 6 accepted")
	}
}

func TestOutputSize(t *testing.T) {
	for _, c := range []struct {
		w, h   int
		ratio  float64
		sw, sh int
		ow, oh int
	}{{640, 360, 2, 0, 0, 1280, 720}, {641, 363, 2, 0, 0, 1280, 720}, {100, 50, 1.5, 0, 0, 144, 72}, {640, 360, 2, 2560, 1440, 2560, 1440}, {33, 17, 3, 0, 0, 96, 48}} {
		ow, oh, err := OutputSize(c.w, c.h, c.ratio, c.sw, c.sh)
		if err != nil || ow != c.ow || oh != c.oh {
			t.Errorf("%+v: got %dx%d %v", c, ow, oh, err)
		}
	}
	for _, c := range [][4]int{{5, 5, 0, 0}, {64, 64, 31, 20}, {64, 64, 30, 0}} {
		if _, _, err := OutputSize(c[0], c[1], 2, c[2], c[3]); err == nil {
			t.Errorf("%v accepted", c)
		}
	}
}

func TestDiTInput(t *testing.T) {
	cs, _ := PlanChunks(361, 24)
	// First chunk: 7 latents at offset 0; middle chunk i starts at latent
	// 7 + 6*(i-1); the last chunk (21 frames, 6 latents) borrows one latent.
	if d := cs[0].DiTInput(24, 0); d != (DiTInput{Offset: 0}) {
		t.Errorf("first: %+v", d)
	}
	if d := cs[1].DiTInput(24, 0); d != (DiTInput{Offset: 7}) {
		t.Errorf("second: %+v", d)
	}
	if d := cs[3].DiTInput(24, 2); d != (DiTInput{Prefix: 2, Offset: 19 - 2}) {
		t.Errorf("overlap 2: %+v", d)
	}
	if d := cs[14].DiTInput(24, 0); d != (DiTInput{Prefix: 1, Offset: 85 - 1}) || cs[14].LatentCount() != 6 {
		t.Errorf("last: %+v (%d latents)", d, cs[14].LatentCount())
	}
	// A single short chunk is filled with zeros.
	one, _ := PlanChunks(9, 24)
	if d := one[0].DiTInput(24, 0); d != (DiTInput{Prefix: 4, ZeroPrefix: true, Offset: 0}) {
		t.Errorf("single chunk of 9 frames: %+v", d)
	}
}

// TestMaxOut checks the bound of a batch's output frames against every
// video length up to 200 frames: the chunks of a batch (see Session.Plan:
// chunks made only of padding go into the batch before them) write their
// output ranges into one slot.
func TestMaxOut(t *testing.T) {
	for _, clip := range []int{4, 8, 24} {
		e := &Session{opt: Options{ClipLen: clip}}
		most := 0
		for frames := 1; frames <= 200; frames++ {
			cs, err := PlanChunks(frames, clip)
			if err != nil {
				t.Fatal(err)
			}
			var batches []int
			for _, c := range cs {
				from, to := c.OutputRange(frames)
				if c.realFrames(frames) > 0 || len(batches) == 0 {
					batches = append(batches, 0)
				}
				batches[len(batches)-1] += max(0, to-from)
			}
			for i, n := range batches {
				if n > e.maxOut() {
					t.Errorf("clip %d, %d frames: batch %d writes %d frames, more than %d", clip, frames, i, n, e.maxOut())
				}
				most = max(most, n)
			}
		}
		if most != e.maxOut() {
			t.Errorf("clip %d: batches write at most %d frames; the bound %d is loose", clip, most, e.maxOut())
		}
	}
}
