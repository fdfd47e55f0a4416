package serve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/internal/decimal"
	"github.com/vsr-dev/vsr/video"
)

// GET /v1/tasks/{id}/preview?t=SECONDS&which=input|output renders one
// frame of a completed task as PNG, for the page's before/after slider
// (GET /v1/tasks/{id}/preview/info tells the output's frames and span):
// the output's frame at t, or the input's at t upscaled with bicubic to
// the output's size. ffmpeg (video.Still, video.Probe) reads the files
// opened inside their roots, with the demuxers of inputs only (no name
// from the request reaches the file system), at most
// previewRuns at once, each for previewTimeout; a frame larger than
// previewMaxPixels is scaled down (both alike), a PNG over previewMaxBytes
// is refused. Rendered frames are cached, previewCacheBytes in all.
//
// The input of an uploaded task is removed when the task ends; a
// completed task's upload is kept instead in DATA/previews, under a name
// made from a hash of the task id, for the previewKeep latest such tasks
// (previewKeepBytes in all).

const (
	previewMaxPixels  = 3840 * 2160
	previewMaxBytes   = 32 << 20
	previewCacheBytes = 64 << 20
	previewTimeout    = 20 * time.Second
	previewRuns       = 2
	previewKeep       = 16
	previewKeepBytes  = 4 << 30
)

// previews is the cache of rendered frames and the bound on ffmpeg runs.
type previews struct {
	runs chan struct{}

	mu    sync.Mutex
	png   map[string][]byte
	order []string // keys, oldest first
	size  int
}

func newPreviews() *previews {
	return &previews{runs: make(chan struct{}, previewRuns), png: map[string][]byte{}}
}

func (p *previews) get(key string) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.png[key]
	return b, ok
}

// put caches b, dropping the oldest frames past previewCacheBytes.
func (p *previews) put(key string, b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.png[key]; ok {
		return
	}
	p.png[key], p.size, p.order = b, p.size+len(b), append(p.order, key)
	for p.size > previewCacheBytes && len(p.order) > 1 {
		old := p.order[0]
		p.order = p.order[1:]
		p.size -= len(p.png[old])
		delete(p.png, old)
	}
}

// previewDir is where the inputs of completed uploaded tasks are kept.
func (s *Service) previewDir() string { return filepath.Join(s.cfg.Data, "previews") }

// previewInputName is the name of task id's kept input in previewDir.
func previewInputName(id string) string {
	h := sha256.Sum256([]byte(id))
	return "input-" + hex.EncodeToString(h[:16])
}

// keepPreviewInput moves the upload of completed task t into previewDir
// (removing it if that fails), then removes the oldest kept inputs while
// there are more than previewKeep or over previewKeepBytes in all.
func (s *Service) keepPreviewInput(t *Task) {
	dir := s.previewDir()
	if err := os.MkdirAll(dir, 0o700); err != nil || os.Rename(t.Input, filepath.Join(dir, previewInputName(t.ID))) != nil {
		os.Remove(t.Input)
		return
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	type kept struct {
		name string
		mod  time.Time
		size int64
	}
	var all []kept
	var total int64
	for _, e := range ents {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			all = append(all, kept{e.Name(), info.ModTime(), info.Size()})
			total += info.Size()
		}
	}
	slices.SortFunc(all, func(a, b kept) int { return a.mod.Compare(b.mod) })
	for len(all) > 0 && (len(all) > previewKeep || total > previewKeepBytes) {
		os.Remove(filepath.Join(dir, all[0].name))
		total -= all[0].size
		all = all[1:]
	}
}

// previewError is a refusal of a preview: its HTTP status and message.
type previewError struct {
	code int
	msg  string
}

func (e *previewError) Error() string { return e.msg }

func (a *api) handlePreview(w http.ResponseWriter, r *http.Request) {
	png, err := a.preview(r)
	var pe *previewError
	switch {
	case errors.As(err, &pe):
		writeError(w, pe.code, pe.msg)
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "private, max-age=3600")
	w.Header().Set("Content-Length", strconv.Itoa(len(png)))
	w.Write(png)
}

// preview returns the PNG that r asks for.
func (a *api) preview(r *http.Request) ([]byte, error) {
	q := r.URL.Query()
	which := q.Get("which")
	if which != "input" && which != "output" {
		return nil, &previewError{http.StatusBadRequest, `which: want "input" or "output"`}
	}
	sec, err := decimal.Parse(q.Get("t"))
	if err != nil || math.IsNaN(sec) || sec < 0 || sec > 1e6 {
		return nil, &previewError{http.StatusBadRequest, fmt.Sprintf("t: want a time in seconds from 0, got %q", q.Get("t"))}
	}
	sec = math.Round(sec*1000) / 1000 // one frame per millisecond at most: the cache's key
	return a.rendered(r, which, fmt.Sprintf("%.3f", sec), func(ctx context.Context, t *Task, path string) ([]byte, error) {
		w, h := previewSize(t.Width, t.Height)
		return renderFrame(ctx, path, sec, w, h)
	})
}

// previewInfo is the answer of GET /v1/tasks/{id}/preview/info: the
// output's frames, their rate and the clip's span, for the page's choice
// of a time.
type previewInfo struct {
	Frames   int     `json:"frames"`
	FPS      float64 `json:"fps"`
	Duration float64 `json:"duration_seconds"` // from the first frame's start to the last one's end
	Width    int     `json:"width"`
	Height   int     `json:"height"`
}

func (a *api) handlePreviewInfo(w http.ResponseWriter, r *http.Request) {
	b, err := a.rendered(r, "output", "info", func(ctx context.Context, t *Task, path string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, previewTimeout)
		defer cancel()
		info, err := video.Probe(ctx, path)
		if err != nil {
			return nil, &previewError{http.StatusUnprocessableEntity, oneLine(err.Error())}
		}
		return json.Marshal(previewInfo{Frames: info.Frames, FPS: info.FPS.Float(), Duration: info.Span(info.Frames), Width: info.Width, Height: info.Height})
	})
	var pe *previewError
	switch {
	case errors.As(err, &pe):
		writeError(w, pe.code, pe.msg)
	case err != nil:
		writeError(w, http.StatusInternalServerError, err.Error())
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Write(b)
	}
}

// rendered returns what render makes of the which file of the
// completed task that r names, from the cache (under what) or rendered now:
// render gets the file's path as ffmpeg names it, and runs while no more
// than previewRuns others do.
func (a *api) rendered(r *http.Request, which, what string, render func(context.Context, *Task, string) ([]byte, error)) ([]byte, error) {
	t, ok := a.svc.get(r.PathValue("id"))
	if !ok {
		return nil, &previewError{http.StatusNotFound, "task not found"}
	}
	if t.Status != Completed {
		return nil, &previewError{http.StatusNotFound, fmt.Sprintf("task not completed (status %s)", t.Status)}
	}
	if t.Result != "" || a.place.checkResult(t) != nil || t.Width <= 0 || t.Height <= 0 {
		return nil, &previewError{http.StatusConflict, "no preview of this task: its result is not in this server's output root"}
	}
	key := fmt.Sprintf("%s\x00%d\x00%s\x00%s", t.ID, t.Ended.UnixNano(), which, what)
	if b, ok := a.previews.get(key); ok {
		return b, nil
	}
	f, err := a.previewSource(t, which)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	select {
	case a.previews.runs <- struct{}{}:
		defer func() { <-a.previews.runs }()
	case <-r.Context().Done():
		return nil, r.Context().Err()
	}
	b, err := render(r.Context(), t, video.FDPath(f, f.Name()))
	if err != nil {
		return nil, err
	}
	a.previews.put(key, b)
	return b, nil
}

// previewSource opens the file a preview of task t reads: its output, or
// its input (an upload's kept copy).
func (a *api) previewSource(t *Task, which string) (*os.File, error) {
	var f *os.File
	var err error
	switch {
	case which == "output":
		f, err = openIn(a.cfg.OutputRoot, t.Output)
	case t.Upload:
		f, err = os.Open(filepath.Join(a.svc.previewDir(), previewInputName(t.ID)))
	default:
		f, err = openIn(a.cfg.InputRoot, t.Input)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &previewError{http.StatusNotFound, fmt.Sprintf("the task's %s file is no longer there", which)}
	}
	if err != nil {
		return nil, &previewError{http.StatusForbidden, fmt.Sprintf("the task's %s file cannot be opened inside its root", which)}
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, &previewError{http.StatusNotFound, fmt.Sprintf("the task's %s file is no regular file", which)}
	}
	return f, nil
}

// previewSize is w x h scaled down to previewMaxPixels, even.
func previewSize(w, h int) (int, int) {
	if w*h > previewMaxPixels {
		f := math.Sqrt(float64(previewMaxPixels) / float64(w*h))
		w, h = int(float64(w)*f), int(float64(h)*f)
	}
	return max(w&^1, 2), max(h&^1, 2)
}

// renderFrame renders the frame of path at sec, scaled with bicubic to
// w x h, as PNG (video.Still), within previewTimeout and previewMaxBytes.
func renderFrame(ctx context.Context, path string, sec float64, w, h int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, previewTimeout)
	defer cancel()
	b, err := video.Still(ctx, path, sec, w, h, previewMaxBytes)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, context.DeadlineExceeded):
		return nil, &previewError{http.StatusServiceUnavailable, fmt.Sprintf("rendering the frame took over %s", previewTimeout)}
	case errors.Is(err, video.ErrNoFFmpeg):
		return nil, &previewError{http.StatusServiceUnavailable, err.Error()}
	case errors.Is(err, video.ErrNoFrameAt):
		return nil, &previewError{http.StatusUnprocessableEntity, fmt.Sprintf("no frame at %.3f s: the video is shorter", sec)}
	case errors.Is(err, video.ErrStillTooLarge):
		return nil, &previewError{http.StatusUnprocessableEntity, fmt.Sprintf("the frame's PNG is over %d bytes", previewMaxBytes)}
	}
	return nil, &previewError{http.StatusUnprocessableEntity, oneLine("the frame could not be rendered: " + err.Error())}
}
