package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

// videoExts are the video files a folder restore takes (besides the
// images IsImage takes).
var videoExts = map[string]bool{".mp4": true, ".mkv": true, ".webm": true, ".mov": true, ".m4v": true, ".avi": true, ".ts": true, ".flv": true, ".mpg": true, ".mpeg": true, ".ogv": true}

// Folder restores every image and video of the directory Dir into the
// directory Output (created if missing), keeping the names; an image takes
// the extension of Format when it is set. Images go first, all together
// (the model takes those of one size in batches), then the videos one by
// one. A file that fails is reported and the others go on. With
// SkipExisting, a file whose output an earlier run finished is skipped.
//
// The hooks are the caller's: what it checks and prints around each file.
// Prepare, Video and Load are required; the others may be nil.
type Folder struct {
	Dir, Output string
	// Format is the image format (png, jpg, webp, bmp or tif) every image
	// is written in; "" writes each in its own.
	Format string
	// Params and Batch are the images' (Loaded.RunImages).
	Params model.Values
	Batch  int
	// SkipExisting skips a file whose output exists as a regular file:
	// one an earlier run finished, since vsr writes an output in a private
	// directory and renames it into place when it is complete (that
	// directory, ".STEM.vsr-*", is never an output). Anything else at the
	// output's name (a symbolic link, a directory) is not a finished
	// output: that file fails, saying what is there. Without it, existing
	// outputs are Prepare's to refuse or replace.
	SkipExisting bool

	// Load loads the model when the first file that gets past Prepare
	// needs it, and again for each next file until it succeeds: a failure
	// ends the run when the images need it, and fails only that video when
	// a video does. The caller frees what it returns.
	Load func() (*Loaded, error)
	// Prepare checks a file's output and probes its input: the output's
	// encoder settings and the input's Info.
	Prepare func(ctx context.Context, in, out string) (video.EncodeOptions, *video.Info, error)
	// Check, if set, refuses an image before the images run (its output
	// size, say); the image then fails.
	Check func(ld *Loaded, info *video.Info) error
	// Video restores one video.
	Video func(ctx context.Context, ld *Loaded, info *video.Info, out string, enc video.EncodeOptions) (*pipeline.Result, error)
	// Progress, if set, is called before the images run with their count:
	// what it returns is told of each image written and of the end.
	Progress func(total int) (update func(done, total int), finish func(ok bool))
	// Warn, if set, is told what an image's output cannot keep.
	Warn func(string)
	// Message, if set, turns a file's error into its message (else
	// err.Error()); the file's path is prefixed unless it names it.
	Message func(error) string
	// Failed, if set, is told of each file that fails, its Error set.
	Failed func(*FolderFile)
	// Skipped, if set, is told of each file SkipExisting skips.
	Skipped func(*FolderFile)
}

// The Status of a FolderFile.
const (
	StatusRestored    = "restored"    // its Result is set
	StatusFailed      = "failed"      // its Error says why
	StatusSkipped     = "skipped"     // its output existed (SkipExisting)
	StatusInterrupted = "interrupted" // the run stopped before it was done
)

// FolderFile is one file of a folder restore: its result, or why it
// failed, or that it was skipped. Its JSON is one entry of restore's
// --json document.
type FolderFile struct {
	Input  string `json:"input"`
	Output string `json:"output"`
	// Status is restored, failed, skipped or interrupted (the Status
	// constants).
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	*pipeline.Result
}

// FolderReport is what Folder.Run did.
type FolderReport struct {
	// Files are the folder's images and videos, in the directory's order.
	Files []FolderFile
	// Failed counts the Files with an Error.
	Failed int
	// Skipped counts the Files skipped because their output existed
	// (SkipExisting); they are not failures.
	Skipped int
	// Stopped is set when the context ended the run: the files not
	// finished then have the Error "interrupted".
	Stopped bool
}

// Run restores the folder. It returns an error, and no report, when the
// run cannot start (a required hook is nil, the output is a file, the
// folder holds nothing to restore, two inputs would write one output),
// when the model does not load for the images, or when the context ends
// while an image is prepared; a file's failure is in the report.
func (f *Folder) Run(ctx context.Context) (*FolderReport, error) {
	if f.Load == nil || f.Prepare == nil || f.Video == nil {
		return nil, errors.New("app.Folder: the hooks Load, Prepare and Video are required")
	}
	dir := f.Dir
	st, err := os.Stat(f.Output)
	if err == nil && !st.IsDir() {
		return nil, fmt.Errorf("input %q is a folder, so the output must be a folder too, but %q is a file", dir, f.Output)
	}
	if ext := strings.ToLower(filepath.Ext(f.Output)); err != nil && (IsImage(ext) || videoExts[ext]) {
		return nil, fmt.Errorf("input %q is a folder, so the output must be a folder too, but %q is named as a %s file: give a folder, such as %s", dir, f.Output, ext, strings.TrimSuffix(f.Output, filepath.Ext(f.Output)))
	}
	if err := os.MkdirAll(f.Output, 0o755); err != nil {
		return nil, fmt.Errorf("output folder %q: %v", f.Output, err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	type item struct {
		in, out string
		e       *FolderFile // its entry in the report
	}
	var items []item
	for _, e := range ents {
		name, ext := e.Name(), strings.ToLower(filepath.Ext(e.Name()))
		if strings.HasPrefix(name, ".") || !e.Type().IsRegular() || !(IsImage(ext) || videoExts[ext]) {
			continue
		}
		out := filepath.Join(f.Output, name)
		if IsImage(ext) && f.Format != "" {
			out = filepath.Join(f.Output, strings.TrimSuffix(name, filepath.Ext(name))+"."+strings.TrimPrefix(strings.ToLower(f.Format), "."))
		}
		items = append(items, item{in: filepath.Join(dir, name), out: out})
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("folder %q holds no images (.png, .jpg, .webp, .bmp, .tif) or videos (.mp4, .mkv, .webm, .mov, ...)", dir)
	}
	from := map[string]string{}
	for _, it := range items {
		if o, dup := from[it.out]; dup {
			return nil, fmt.Errorf("%s and %s would both be written as %s: leave out -f, or rename one", filepath.Base(o), filepath.Base(it.in), it.out)
		}
		from[it.out] = it.in
	}
	rep := &FolderReport{Files: make([]FolderFile, len(items))}
	doc := rep.Files
	for i := range items {
		doc[i] = FolderFile{Input: items[i].in, Output: items[i].out}
		items[i].e = &doc[i]
	}
	var ld *Loaded
	fail := func(it item, err error) {
		rep.Failed++
		it.e.Status = StatusFailed
		msg := err.Error()
		if f.Message != nil {
			msg = f.Message(err)
		}
		it.e.Error = naming(it.in, msg)
		if f.Failed != nil {
			f.Failed(it.e)
		}
	}
	// stopped ends an interrupted run: the files not finished marked so.
	stopped := func() (*FolderReport, error) {
		for i := range doc {
			if doc[i].Status == "" {
				doc[i].Status, doc[i].Error = StatusInterrupted, "interrupted"
			}
		}
		rep.Stopped = true
		return rep, nil
	}
	// skip reports whether the file's output is one an earlier run
	// finished, and skips it; a symbolic link or other non-file there
	// fails the file.
	skip := func(it item) bool {
		if !f.SkipExisting {
			return false
		}
		st, err := os.Lstat(it.out)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return false
		case err != nil:
			fail(it, fmt.Errorf("output %q: %v", it.out, err))
		case st.Mode().IsRegular():
			rep.Skipped++
			it.e.Status = StatusSkipped
			if f.Skipped != nil {
				f.Skipped(it.e)
			}
		case st.Mode()&fs.ModeSymlink != 0:
			fail(it, fmt.Errorf("output %q is a symbolic link, not an output vsr finished: remove it, or choose another output folder", it.out))
		default:
			fail(it, fmt.Errorf("output %q exists and is not a regular file (%s), so not an output vsr finished: remove it, or choose another output folder", it.out, fileKind(st.Mode())))
		}
		return true
	}
	load := func() error {
		if ld == nil {
			var err error
			ld, err = f.Load()
			return err
		}
		return nil
	}
	// Images first, all together: the model takes those of one size in
	// batches.
	var imgs []Image
	var imgItems []item
	for _, it := range items {
		if !IsImage(filepath.Ext(it.in)) || skip(it) {
			continue
		}
		enc, info, err := f.Prepare(ctx, it.in, it.out)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			fail(it, err)
			continue
		}
		imgs = append(imgs, Image{Info: info, Output: it.out, Encode: enc, Warn: f.Warn})
		imgItems = append(imgItems, it)
	}
	if len(imgs) > 0 {
		if err := load(); err != nil {
			return nil, err
		}
		n := 0
		for i, im := range imgs {
			if f.Check != nil {
				if err := f.Check(ld, im.Info); err != nil {
					fail(imgItems[i], err)
					continue
				}
			}
			imgs[n], imgItems[n] = im, imgItems[i]
			n++
		}
		imgs, imgItems = imgs[:n], imgItems[:n]
	}
	if len(imgs) > 0 {
		var update func(done, total int)
		var finish func(ok bool)
		if f.Progress != nil {
			update, finish = f.Progress(len(imgs))
		}
		res, errs := ld.RunImages(ctx, imgs, f.Params, f.Batch, update)
		if finish != nil {
			finish(ctx.Err() == nil)
		}
		if ctx.Err() != nil {
			return stopped()
		}
		for i, err := range errs {
			if err != nil {
				fail(imgItems[i], err)
				continue
			}
			imgItems[i].e.Result, imgItems[i].e.Status = res[i], StatusRestored
		}
	}
	for _, it := range items {
		if IsImage(filepath.Ext(it.in)) {
			continue
		}
		if ctx.Err() != nil {
			return stopped()
		}
		if skip(it) {
			continue
		}
		enc, info, err := f.Prepare(ctx, it.in, it.out)
		if err == nil {
			err = load()
		}
		var res *pipeline.Result
		if err == nil {
			res, err = f.Video(ctx, ld, info, it.out, enc)
		}
		if err != nil {
			if ctx.Err() != nil {
				return stopped()
			}
			fail(it, err)
			continue
		}
		it.e.Result, it.e.Status = res, StatusRestored
	}
	return rep, nil
}

// fileKind names what a non-regular file's mode says it is.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// naming is msg about the file at path, naming it once: prefixed with the
// path unless msg names it already.
func naming(path, msg string) string {
	if strings.Contains(msg, path) {
		return msg
	}
	return path + ": " + msg
}
