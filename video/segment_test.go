package video

import (
	"bytes"
	"testing"
)

// TestStartFrame decodes from frame k on and compares with frames k.. of a
// full decode, for seekable and counted starts, on the real clip and on
// generated clips with B-frames.
func TestStartFrame(t *testing.T) {
	needFFmpeg(t)
	clips := []string{
		"../testdata/video/oa4_launch.webm",
		fixture(t, "bframes.mp4", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=30000/1001:d=2", "-c:v", "libx264", "-bf", "3", "-g", "12", "-pix_fmt", "yuv420p"),
		fixture(t, "mkv25.mkv", "-f", "lavfi", "-i", "testsrc2=s=64x48:r=25:d=2", "-f", "lavfi", "-i", "sine=d=2", "-c:v", "libx264", "-g", "7", "-c:a", "aac"),
	}
	for _, clip := range clips {
		info, err := Probe(testCtx(t), clip)
		if err != nil {
			t.Fatal(err)
		}
		n := min(info.Frames, 60)
		all, _, err := decodeAll(t, info, DecodeOptions{MaxFrames: n})
		if err != nil {
			t.Fatal(err)
		}
		size := len(all) / n
		for _, start := range []int{1, 13, n - 1} {
			for _, force := range []bool{false, true} {
				in := *info
				if force { // defeat seeking: decoders count frames instead
					in.Duration = 0
				}
				got, _, err := decodeAll(t, &in, DecodeOptions{StartFrame: start, MaxFrames: n - start})
				if err != nil {
					t.Fatalf("%s from %d (counted=%v): %v", clip, start, force, err)
				}
				if !bytes.Equal(got, all[start*size:n*size]) {
					t.Errorf("%s from frame %d (counted=%v): frames differ from the full decode", clip, start, force)
				}
			}
		}
	}
}
