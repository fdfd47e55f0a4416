package video

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestCheckEncodeCached: a failing encoder check runs ffmpeg once for
// repeated requests with the same bad preset (and a passing one once); a
// failure is checked again after failedCheckTTL.
func TestCheckEncodeCached(t *testing.T) {
	needFFmpeg(t)
	var runs atomic.Int32
	defer func(old func(context.Context, string, ...string) result) { runCheck = old }(runCheck)
	runCheck = func(ctx context.Context, bin string, args ...string) result {
		runs.Add(1)
		return runTool(ctx, bin, args...)
	}
	ctx := context.Background()
	bad := EncodeOptions{Codec: "libx264", Preset: "no-such-preset-" + time.Now().Format("150405.000")}
	for i := range 5 {
		if err := CheckEncode(ctx, ".mp4", bad); err == nil {
			t.Fatalf("check %d of a bad preset passed", i)
		}
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("5 checks of one bad preset ran ffmpeg %d times, want 1", n)
	}
	good := EncodeOptions{Codec: "libx264", Preset: "veryfast", CRF: 31}
	for i := range 3 {
		if err := CheckEncode(ctx, ".mkv", good); err != nil {
			t.Fatalf("check %d of good settings: %v", i, err)
		}
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("3 checks of good settings after the bad ones: ffmpeg ran %d times in all, want 2", n)
	}
	// An expired failure is checked again.
	encodeChecks.mu.Lock()
	for _, e := range encodeChecks.m {
		e.at = e.at.Add(-2 * failedCheckTTL)
	}
	encodeChecks.mu.Unlock()
	CheckEncode(ctx, ".mp4", bad)
	if n := runs.Load(); n != 3 {
		t.Errorf("an expired failure: ffmpeg ran %d times in all, want 3", n)
	}
}
