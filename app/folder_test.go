package app_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

// folderRun is a Folder of src into dst with the stand-in family, whose
// hooks record the loads and failures.
func folderRun(t *testing.T, src, dst string) (*app.Folder, *int, *[]string) {
	t.Helper()
	devs, err := app.OpenDevices("cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devs[0].Close() })
	params := model.Values{"level": 200}
	loads := new(int)
	failed := new([]string)
	f := &app.Folder{
		Dir: src, Output: dst, Params: params,
		Load: func() (*app.Loaded, error) {
			*loads++
			ld, err := app.Load(devs[0], "level:x", params, nil)
			if err == nil {
				t.Cleanup(ld.Close)
			}
			return ld, err
		},
		Prepare: func(ctx context.Context, in, out string) (video.EncodeOptions, *video.Info, error) {
			enc := video.EncodeOptions{Codec: "ffv1", PixFmt: "gbrp"}
			if app.IsImage(filepath.Ext(out)) {
				var err error
				if enc, err = app.ImageEncode(filepath.Ext(out), video.EncodeOptions{}); err != nil {
					return enc, nil, err
				}
			}
			info, err := video.Probe(ctx, in)
			return enc, info, err
		},
		Video: func(ctx context.Context, ld *app.Loaded, info *video.Info, out string, enc video.EncodeOptions) (*pipeline.Result, error) {
			return ld.Run(ctx, app.Job{Input: info.Path, Output: out, Info: info, Params: params, Encode: enc})
		},
		Failed: func(e *app.FolderFile) { *failed = append(*failed, e.Error) },
	}
	return f, loads, failed
}

// TestFolder: a folder's images and videos are restored into another
// folder under their names (an image in the Format asked for), other
// files left alone; a file that fails is reported, named once, and the
// others go on; two inputs that would write one output, and a folder
// into a file, are refused before any work.
func TestFolder(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	src := filepath.Join(t.TempDir(), "in")
	os.Mkdir(src, 0o755)
	img := filepath.Join(src, "a.png")
	if out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=24x16", "-frames:v", "1", img).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	clip(t, filepath.Join(src, "v.mkv"))
	bad := filepath.Join(src, "bad.png")
	os.WriteFile(bad, []byte("\x89PNG\r\n\x1a\nnot really"), 0o644)
	os.WriteFile(filepath.Join(src, "notes.txt"), []byte("x"), 0o644)
	dst := filepath.Join(t.TempDir(), "out") // made by Run

	f, loads, failed := folderRun(t, src, dst)
	f.Format = "tif"
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stopped || rep.Failed != 1 || len(rep.Files) != 3 || *loads != 1 {
		t.Fatalf("report %+v, %d loads", rep, *loads)
	}
	want := []struct{ in, out string }{{"a.png", "a.tif"}, {"bad.png", "bad.tif"}, {"v.mkv", "v.mkv"}}
	for i, w := range want {
		if e := rep.Files[i]; e.Input != filepath.Join(src, w.in) || e.Output != filepath.Join(dst, w.out) {
			t.Errorf("file %d: %s -> %s, want %s -> %s", i, e.Input, e.Output, w.in, w.out)
		}
	}
	if a := rep.Files[0]; a.Error != "" || a.Result == nil || a.Frames != 1 || a.Width != 24 {
		t.Errorf("a.png: %+v", a)
	}
	if b := rep.Files[1]; b.Result != nil || strings.Count(b.Error, bad) != 1 || len(*failed) != 1 || (*failed)[0] != b.Error {
		t.Errorf("bad.png: %+v, failures told %q", b, *failed)
	}
	if v := rep.Files[2]; v.Error != "" || v.Result == nil || v.Frames != 6 {
		t.Errorf("v.mkv: %+v", v)
	}
	wantLevel(t, frames(t, filepath.Join(src, "v.mkv")), frames(t, filepath.Join(dst, "v.mkv")), 200)
	if ents, _ := os.ReadDir(dst); len(ents) != 2 {
		t.Errorf("%d files in the output folder, want a.tif and v.mkv", len(ents))
	}

	// A cancelled run stops before the videos, marking them.
	f, _, _ = folderRun(t, src, filepath.Join(t.TempDir(), "out"))
	ctx, cancel := context.WithCancel(context.Background())
	f.Prepare = func(ctx context.Context, in, out string) (video.EncodeOptions, *video.Info, error) {
		cancel()
		return video.EncodeOptions{}, nil, errors.New("no")
	}
	f.Dir = filepath.Join(t.TempDir(), "videos")
	os.Mkdir(f.Dir, 0o755)
	clip(t, filepath.Join(f.Dir, "v.mkv"))
	if rep, err := f.Run(ctx); err != nil || !rep.Stopped || rep.Files[0].Error != "interrupted" {
		t.Errorf("cancelled: %+v, %v", rep, err)
	}

	// Refusals, before any work.
	os.WriteFile(filepath.Join(src, "a.jpg"), []byte("x"), 0o644)
	for _, c := range []struct {
		out, format, want string
	}{
		{filepath.Join(t.TempDir(), "x"), "png", "would both be written"},
		{img, "", "must be a folder too"},
		{filepath.Join(t.TempDir(), "x.mp4"), "", "named as a .mp4 file"},
	} {
		f, loads, _ := folderRun(t, src, c.out)
		f.Format = c.format
		if _, err := f.Run(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) || *loads != 0 {
			t.Errorf("-> %s (format %q): %v, want %q", c.out, c.format, err, c.want)
		}
	}
}

// TestFolderHooks: a Folder without a required hook is refused before
// any work; a Load that fails fails that video only, and is tried again
// for the next one until it succeeds.
func TestFolderHooks(t *testing.T) {
	src := t.TempDir()
	for _, name := range []string{"a.mkv", "b.mkv", "c.mkv"} {
		os.WriteFile(filepath.Join(src, name), []byte("x"), 0o644)
	}
	loads := 0
	f := &app.Folder{
		Dir: src, Output: filepath.Join(t.TempDir(), "out"),
		Load: func() (*app.Loaded, error) {
			if loads++; loads == 1 {
				return nil, errors.New("out of memory")
			}
			return &app.Loaded{}, nil
		},
		Prepare: func(ctx context.Context, in, out string) (video.EncodeOptions, *video.Info, error) {
			return video.EncodeOptions{}, &video.Info{Path: in, Frames: 1}, nil
		},
		Video: func(ctx context.Context, ld *app.Loaded, info *video.Info, out string, enc video.EncodeOptions) (*pipeline.Result, error) {
			if ld == nil {
				t.Errorf("%s: no model", info.Path)
			}
			return &pipeline.Result{Frames: 1, Output: out}, nil
		},
	}
	for _, unset := range []func(g *app.Folder){
		func(g *app.Folder) { g.Load = nil },
		func(g *app.Folder) { g.Prepare = nil },
		func(g *app.Folder) { g.Video = nil },
	} {
		g := *f
		unset(&g)
		if _, err := g.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "required") {
			t.Errorf("a nil hook: %v", err)
		}
	}
	if _, err := os.Stat(f.Output); !os.IsNotExist(err) {
		t.Errorf("the output folder was made for a refused run: %v", err)
	}
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 1 || !strings.Contains(rep.Files[0].Error, "out of memory") || rep.Files[1].Result == nil || rep.Files[2].Result == nil || loads != 2 {
		t.Errorf("report %+v, %d loads", rep, loads)
	}
}

// TestFolderSkipExisting: with SkipExisting, a file whose output exists
// as a regular file is skipped (not a failure, Prepare not called); a
// leftover private directory (".STEM.vsr-*") is no output, so its file is
// redone; a symbolic link at an output's name fails that file, naming
// it. Without it, the existing outputs go to Prepare as before.
func TestFolderSkipExisting(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	src := filepath.Join(t.TempDir(), "in")
	os.Mkdir(src, 0o755)
	if out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=24x16", "-frames:v", "1", filepath.Join(src, "a.png")).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	clip(t, filepath.Join(src, "v.mkv"))
	clip(t, filepath.Join(src, "w.mkv"))
	dst := filepath.Join(t.TempDir(), "out")

	f, _, _ := folderRun(t, src, dst)
	f.SkipExisting = true // nothing exists yet: all restored
	rep, err := f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 0 || rep.Skipped != 0 {
		t.Fatalf("first run: %+v", rep)
	}
	for _, e := range rep.Files {
		if e.Status != app.StatusRestored || e.Result == nil {
			t.Errorf("first run: %+v", e)
		}
	}
	stat := func(name string) os.FileInfo {
		st, err := os.Stat(filepath.Join(dst, name))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	before := map[string]os.FileInfo{"a.png": stat("a.png"), "v.mkv": stat("v.mkv"), "w.mkv": stat("w.mkv")}

	// Again: all skipped, the model never loaded, nothing prepared.
	f, loads, failed := folderRun(t, src, dst)
	f.SkipExisting = true
	prepared := 0
	prepare := f.Prepare
	f.Prepare = func(ctx context.Context, in, out string) (video.EncodeOptions, *video.Info, error) {
		prepared++
		return prepare(ctx, in, out)
	}
	var told []string
	f.Skipped = func(e *app.FolderFile) { told = append(told, filepath.Base(e.Output)) }
	rep, err = f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 0 || rep.Skipped != 3 || *loads != 0 || prepared != 0 || len(*failed) != 0 || strings.Join(told, ",") != "a.png,v.mkv,w.mkv" {
		t.Fatalf("second run: %+v, %d loads, %d prepared, told %v", rep, *loads, prepared, told)
	}
	for _, e := range rep.Files {
		if e.Status != app.StatusSkipped || e.Result != nil || e.Error != "" {
			t.Errorf("second run: %+v", e)
		}
	}
	for name, st := range before {
		if !os.SameFile(st, stat(name)) || !st.ModTime().Equal(stat(name).ModTime()) {
			t.Errorf("%s was rewritten", name)
		}
	}

	// v.mkv removed, a private directory an interrupted run left in its
	// place, and a symbolic link where w.mkv was: v.mkv redone, w.mkv
	// failed, a.png skipped.
	os.Remove(filepath.Join(dst, "v.mkv"))
	tmp := filepath.Join(dst, ".v.vsr-123456")
	os.Mkdir(tmp, 0o700)
	os.WriteFile(filepath.Join(tmp, "v.mkv"), []byte("half"), 0o644)
	w := filepath.Join(dst, "w.mkv")
	os.Remove(w)
	if err := os.Symlink(filepath.Join(src, "w.mkv"), w); err != nil {
		t.Fatal(err)
	}
	f, loads, failed = folderRun(t, src, dst)
	f.SkipExisting = true
	rep, err = f.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed != 1 || rep.Skipped != 1 || *loads != 1 || len(*failed) != 1 {
		t.Fatalf("third run: %+v, %d loads, failures %q", rep, *loads, *failed)
	}
	if a := rep.Files[0]; a.Status != app.StatusSkipped {
		t.Errorf("a.png: %+v", a)
	}
	if v := rep.Files[1]; v.Status != app.StatusRestored || v.Result == nil || v.Frames != 6 {
		t.Errorf("v.mkv: %+v", v)
	}
	wantLevel(t, frames(t, filepath.Join(src, "v.mkv")), frames(t, filepath.Join(dst, "v.mkv")), 200)
	if e := rep.Files[2]; e.Status != app.StatusFailed || !strings.Contains(e.Error, "symbolic link") || strings.Count(e.Error, w) != 1 {
		t.Errorf("w.mkv, a symbolic link: %+v", e)
	}
	if st, err := os.Lstat(w); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symbolic link was replaced: %v", err)
	}

	// Without SkipExisting, existing outputs are Prepare's (which here
	// restores them again, as -y would).
	f, _, _ = folderRun(t, src, dst)
	os.Remove(w)
	rep, err = f.Run(context.Background())
	if err != nil || rep.Skipped != 0 || rep.Failed != 0 {
		t.Fatalf("without SkipExisting: %+v, %v", rep, err)
	}

	// An interrupted run marks what it did not reach, not what it skipped.
	f, _, _ = folderRun(t, src, dst)
	f.SkipExisting = true
	os.Remove(filepath.Join(dst, "w.mkv"))
	ctx, cancel := context.WithCancel(context.Background())
	f.Prepare = func(ctx context.Context, in, out string) (video.EncodeOptions, *video.Info, error) {
		cancel()
		return video.EncodeOptions{}, nil, errors.New("no")
	}
	rep, err = f.Run(ctx)
	if err != nil || !rep.Stopped || rep.Files[0].Status != app.StatusSkipped || rep.Files[1].Status != app.StatusSkipped ||
		rep.Files[2].Status != app.StatusInterrupted || rep.Files[2].Error != "interrupted" {
		t.Errorf("interrupted: %+v, %v", rep, err)
	}
}
