package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAllowPlaylists: restore refuses a playlist input, in one line naming
// the demuxer and --allow-playlists, and writes nothing; with the flag it
// restores the video the playlist names, audio included.
func TestAllowPlaylists(t *testing.T) {
	needFFmpeg(t)
	dir := t.TempDir()
	seg := filepath.Join(dir, "seg.ts")
	ffmpeg(t, "-f", "lavfi", "-i", "testsrc2=size=24x16:rate=10:duration=0.5", "-f", "lavfi", "-i", "sine=duration=0.5",
		"-c:v", "libx264", "-pix_fmt", "yuv420p", "-c:a", "aac", seg)
	list := filepath.Join(dir, "in.m3u8")
	if err := os.WriteFile(list, []byte("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:0.5,\nfile://"+seg+"\n#EXT-X-ENDLIST\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.mkv")
	_, err := vsr(t, "restore", list, "-o", out, "--progress", "none", "--device", "cpu")
	if err == nil || !strings.Contains(err.Error(), "hls demuxer") || !strings.Contains(err.Error(), "--allow-playlists") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("restore of a playlist: %v; want one line naming the hls demuxer and --allow-playlists", err)
	}
	if _, err := os.Stat(out); err == nil {
		t.Fatal("a refused playlist left an output")
	}
	// A folder holding a playlist under a video's name refuses it too.
	folder := filepath.Join(dir, "folder")
	os.Mkdir(folder, 0o755)
	data, _ := os.ReadFile(list)
	os.WriteFile(filepath.Join(folder, "a.mp4"), data, 0o644)
	_, err = vsr(t, "restore", folder, "-o", filepath.Join(dir, "outs"), "--progress", "none", "--device", "cpu")
	if err == nil || !strings.Contains(err.Error(), "1 of the 1 files") {
		t.Errorf("restore of a folder with a playlist: %v", err)
	}
	if _, err := vsr(t, "probe", list); err == nil || !strings.Contains(err.Error(), "--allow-playlists") {
		t.Errorf("probe of a playlist: %v", err)
	}
	if o, err := vsr(t, "probe", list, "--allow-playlists"); err != nil || !strings.Contains(o, "hls") {
		t.Errorf("probe --allow-playlists: %v\n%s", err, o)
	}
	if _, err := vsr(t, "restore", list, "-o", out, "--allow-playlists", "--progress", "none", "--device", "cpu", "--segments", "2"); err != nil {
		t.Fatalf("restore --allow-playlists: %v", err)
	}
	checkOutput(t, out, 5, 96, 64)
	if info := probe(t, out); !info.HasAudio {
		t.Error("the output of a playlist has no audio")
	}
}
