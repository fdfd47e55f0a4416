package cdavsr

import (
	"bytes"
	"context"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model"
)

// TestSessionResets: the recurrence restarts on the first frame, every
// reset-every frames, on the key frames of a stream with inter frames (not
// on every frame of an intra-only one) and on scene cuts; one frame per
// Start gives the bytes of whole batches.
func TestSessionResets(t *testing.T) {
	b := cpu.New(0)
	m, err := family{}.Load(b, synthFile(t, t.TempDir(), 2, nil, ""), model.Params{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	frames, _, _ := goldenInputs()
	var rgb []byte
	for _, f := range append(frames, frames[:2]...) { // 6 frames
		for _, v := range f {
			rgb = append(rgb, byte(v*255+0.5))
		}
	}
	const n = 6
	run := func(v model.Video, set model.Values, per int, rgb []byte) ([]byte, int) {
		s, err := m.NewSession(context.Background(), v, model.Params{Set: set, Default: model.Defaults(family{}.Params())})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		bt, err := s.NewBatch(per, gw, gh, backend.RGB24, backend.RGB24)
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for at := 0; at < n; at += per {
			k := min(per, n-at)
			copy(bt.In(), rgb[at*gw*gh*3:(at+k)*gw*gh*3])
			if err := s.Start(context.Background(), bt, k); err != nil {
				t.Fatal(err)
			}
			out = append(out, bt.Out()[:k*gw*gh*3*4]...)
		}
		return out, s.(*session).Resets
	}
	v := model.Video{Width: gw, Height: gh, Frames: n}
	whole, resets := run(v, model.Values{"reset-every": 2}, 6, rgb)
	if resets != 3 {
		t.Errorf("reset-every 2 over 6 frames: %d resets, want 3", resets)
	}
	if one, _ := run(v, model.Values{"reset-every": 2}, 1, rgb); !bytes.Equal(one, whole) {
		t.Error("one frame per Start differs from a batch of 6")
	}
	// Scene cuts: frame 3 is black, so frames 3 and 4 start scenes.
	cut := append([]byte(nil), rgb...)
	clear(cut[3*gw*gh*3 : 4*gw*gh*3])
	whole, resets = run(v, model.Values{"reset-every": 0}, 6, cut)
	if resets != 3 {
		t.Errorf("scene cuts at frames 3 and 4: %d resets, want 3", resets)
	}
	if one, r := run(v, model.Values{"reset-every": 0}, 1, cut); !bytes.Equal(one, whole) || r != resets {
		t.Errorf("scene cut: one frame per Start (%d resets) differs from a batch of 6 (%d)", r, resets)
	}
	v.Keys = []bool{true, false, false, true, false, false}
	if _, r := run(v, model.Values{"reset-every": 0}, 6, rgb); r != 2 {
		t.Errorf("key frames 0 and 3: %d resets, want 2", r)
	}
	v.Keys = []bool{true, true, true, true, true, true}
	if _, r := run(v, model.Values{"reset-every": 0}, 6, rgb); r != 1 {
		t.Errorf("intra-only stream: %d resets, want 1 (its first frame)", r)
	}
	if _, err := m.NewSession(context.Background(), v, model.Params{Set: model.Values{"reset-every": -1}}); err == nil {
		t.Error("reset-every -1 accepted")
	}
}
