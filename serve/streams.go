package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/pipeline"
)

// StreamRequest is the body of POST /v1/streams: a live session from an
// input URL to an output URL.
type StreamRequest struct {
	Input  string         `json:"input"`
	Output string         `json:"output"`
	Model  string         `json:"model,omitempty"`
	Params map[string]any `json:"params,omitempty"`
	// Container is the output's (-f): default from the URL's scheme.
	Container string `json:"container,omitempty"`
	Codec     string `json:"codec,omitempty"`
	CRF       *int   `json:"crf,omitempty"`
	Preset    string `json:"preset,omitempty"`
	// MaxLatency (0..maxLatency) and IdleTimeout (0..maxIdleTimeout) are
	// in seconds (IdleTimeout default 10).
	MaxLatency  float64 `json:"max_latency,omitempty"`
	IdleTimeout float64 `json:"idle_timeout,omitempty"`
	// Overload is wait (default) or drop.
	Overload  string `json:"overload,omitempty"`
	Reconnect bool   `json:"reconnect,omitempty"`
}

// LiveSession is a live session's parameters as a runner gets them,
// checked: Request's Input and Output are the URLs rebuilt from their
// checked parts (what ffmpeg must be given), its Container the output's
// (never empty), its durations bounded.
type LiveSession struct {
	Request StreamRequest
	// Protocols are the only protocols ffmpeg may open for each URL.
	InputProtocols, OutputProtocols []string
	// InputFormats are the only demuxers ffmpeg may use for the input
	// (-format_whitelist); InputOptions more input options, as key=value
	// (max_redirects=0 for an http source of a rule that names its host).
	InputFormats, InputOptions []string
	// MaxOutputPixels bounds the output's frames, width x height
	// (Config.MaxOutputPixels): a session whose source restores to more
	// fails when its frames' size is known.
	MaxOutputPixels int64
	// Stats receives the statistics as they come.
	Stats func(pipeline.LiveStats)
}

// StreamRunner is implemented by runners that run live sessions on their
// devices. Stream checks s and reserves a device for it, failing at once
// with ErrBusy when none is free (file tasks use the devices no session
// holds); run then streams until ctx is done or the source ends, and
// frees the device.
type StreamRunner interface {
	Stream(ctx context.Context, s LiveSession) (run func() error, err error)
}

// ErrBusy is a StreamRunner's answer when every device is taken.
var ErrBusy = errors.New("every device is busy (a live session holds a device for as long as it runs; file tasks hold one each while they run): stop a session or try later")

// liveStream is a session the service runs.
type liveStream struct {
	ID        string             `json:"stream_id"`
	Status    string             `json:"status"` // running, finished, stopped, failed
	Request   StreamRequest      `json:"request"`
	Started   time.Time          `json:"started_at"`
	Ended     *time.Time         `json:"ended_at,omitempty"`
	Error     string             `json:"error,omitempty"`
	Stats     pipeline.LiveStats `json:"stats"`
	cancel    context.CancelFunc
	done      chan struct{}
	stopAsked bool
}

// streams holds the live sessions of this process (they do not outlive
// it: a live source cannot be replayed).
type streams struct {
	mu   sync.Mutex
	byID map[string]*liveStream
}

// Bounds of a live session's durations, in seconds.
const (
	maxLatency     = 60
	maxIdleTimeout = 3600
)

// checkStream checks a live session's request as a task's is checked
// (model, params, codec, crf and preset, the encoder tried in the
// container's file format, the size asked for against the pixel budget)
// and its URLs against the allow rules, and returns what a runner gets,
// the request as answers show it (the URLs rebuilt without their secrets)
// and what takes the secrets out of any other text shown (redactor).
func (a *api) checkStream(ctx context.Context, q StreamRequest) (ls LiveSession, shown StreamRequest, redact func(string) string, err error) {
	in, err := a.allowed("input", q.Input)
	if err != nil {
		return ls, shown, nil, err
	}
	out, err := a.allowed("output", q.Output)
	if err != nil {
		return ls, shown, nil, err
	}
	containers := streamContainers[out.scheme]
	switch {
	case q.Container == "":
		q.Container = containers[0]
	case !slices.Contains(containers, q.Container):
		return ls, shown, nil, fmt.Errorf("field \"container\": %q: a %s output takes %s", q.Container, out.scheme, strings.Join(containers, ", "))
	}
	if err := playlistURL(out, q.Container); err != nil {
		return ls, shown, nil, err
	}
	switch {
	case q.Overload != "" && q.Overload != "wait" && q.Overload != "drop":
		err = fmt.Errorf("field \"overload\": %q: want wait or drop", q.Overload)
	case !(q.MaxLatency >= 0 && q.MaxLatency <= maxLatency):
		err = fmt.Errorf("field \"max_latency\": %g: want seconds in 0..%d (0: one second)", q.MaxLatency, maxLatency)
	case !(q.IdleTimeout >= 0 && q.IdleTimeout <= maxIdleTimeout):
		err = fmt.Errorf("field \"idle_timeout\": %g: want seconds in 0..%d (0: 10)", q.IdleTimeout, maxIdleTimeout)
	default:
		r := &Request{Model: q.Model, Params: q.Params, Codec: q.Codec, CRF: q.CRF, Preset: q.Preset,
			SaveResultPath: "stream" + containerExt[q.Container]}
		if err = a.check(ctx, r); err == nil && len(r.Size) == 2 && overBudget(r.Size[1], r.Size[0], a.cfg.MaxOutputPixels) {
			// The size asked for; the model's output for the source's
			// frames is checked when they come (MaxOutputPixels).
			err = &budgetError{w: r.Size[1], h: r.Size[0], limit: a.cfg.MaxOutputPixels}
		}
	}
	if err != nil {
		return ls, shown, nil, err
	}
	shown = q
	shown.Input, shown.Output = in.Redacted(), out.Redacted()
	q.Input, q.Output = in.String(), out.String()
	ls = LiveSession{Request: q, InputProtocols: streamProtocols[in.scheme], OutputProtocols: streamProtocols[out.scheme],
		InputFormats: streamDemuxers[in.scheme], MaxOutputPixels: a.cfg.MaxOutputPixels}
	if in.scheme == "http" || in.scheme == "https" {
		if in.rule.host == "*" && in.rule.port == 0 {
			ls.InputFormats = append(slices.Clip(ls.InputFormats), "hls", "dash")
		} else {
			ls.InputOptions = []string{"max_redirects=0"} // no other host
		}
	}
	return ls, shown, redactor(in.streamURL, out.streamURL), nil
}

// playlistExt is the extension of the playlist of each container that
// writes segments beside it.
var playlistExt = map[string]string{"hls": ".m3u8", "dash": ".mpd"}

// playlistURL checks the output URL of an HLS or DASH session: its path's
// last element is the playlist (name.m3u8, name.mpd), the segments are
// named from it and go to its folder on its host and port, and it has no
// user:password (which the segments' URLs would carry).
func playlistURL(out checkedURL, container string) error {
	ext := playlistExt[container]
	if ext == "" {
		return nil
	}
	name := out.path[strings.LastIndexByte(out.path, '/')+1:]
	switch {
	case len(name) <= len(ext) || !strings.HasSuffix(strings.ToLower(name), ext):
		return fmt.Errorf("field \"output\": %s: a %s output needs a path whose last element is its playlist, name%s (%s://host:port/folder/name%s): its segments are named from it and go beside it", out.Redacted(), container, ext, out.scheme, ext)
	case out.user != "":
		return fmt.Errorf("field \"output\": %s: a %s output takes no user:password@ (its segments' URLs would carry it)", out.Redacted(), container)
	}
	return nil
}

// redactor returns a function that replaces, in a message, the URLs as
// ffmpeg got them by their Redacted form, then every secret left
// (passwords, passphrases, rtmp stream keys, quoted on their own) by
// xxxxx.
func redactor(urls ...*streamURL) func(string) string {
	var pairs, secrets []string
	for _, u := range urls {
		pairs = append(pairs, u.String(), u.Redacted())
		secrets = append(secrets, u.secrets()...)
	}
	whole := strings.NewReplacer(pairs...)
	return func(msg string) string {
		msg = whole.Replace(msg)
		for _, x := range secrets {
			msg = strings.ReplaceAll(msg, x, "xxxxx")
		}
		return msg
	}
}

func (a *api) handleStreamCreate(w http.ResponseWriter, r *http.Request) {
	sr, ok := a.place.streamRunner()
	if !ok {
		writeError(w, http.StatusServiceUnavailable, "live sessions run where the devices are, and this server has none (--workers 0: vsr worker processes take file tasks only): send streams to a vsr serve that runs on GPUs")
		return
	}
	var q StreamRequest
	// As a task's: a body trickled in too slowly is refused (408).
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(a.cfg.BodyTimeout))
	if code, err := decodeRequest(http.MaxBytesReader(w, r.Body, maxJSON), &q); err != nil {
		writeError(w, code, err.Error())
		return
	}
	session, q, redact, err := a.checkStream(r.Context(), q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ls := &liveStream{ID: newStreamID(), Status: "running", Request: q, Started: time.Now().UTC(), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	ls.cancel = cancel
	session.Stats = func(st pipeline.LiveStats) {
		a.live.mu.Lock()
		ls.Stats = st
		a.live.mu.Unlock()
	}
	run, err := sr.Stream(ctx, session)
	if err != nil {
		cancel()
		code := http.StatusBadRequest
		if errors.Is(err, ErrBusy) {
			code = http.StatusServiceUnavailable
		}
		writeError(w, code, redact(err.Error()))
		return
	}
	added := func() {
		a.live.mu.Lock()
		if a.live.byID == nil {
			a.live.byID = map[string]*liveStream{}
		}
		a.live.byID[ls.ID] = ls
		a.live.mu.Unlock()
	}
	started := a.svc.launch(added, func() { // Close waits for it
		defer close(ls.done)
		defer cancel()
		err := run()
		now := time.Now().UTC()
		a.live.mu.Lock()
		defer a.live.mu.Unlock()
		ls.Ended = &now
		switch {
		case ls.stopAsked:
			ls.Status = "stopped"
		case err != nil:
			ls.Status, ls.Error = "failed", redact(oneLine(err.Error()))
		default:
			ls.Status = "finished"
		}
		a.log.Info("live session ended", "stream", ls.ID, "status", ls.Status, "error", ls.Error)
	})
	if !started {
		cancel()
		go run() // ends at once and frees its device
		writeError(w, http.StatusServiceUnavailable, "the server is shutting down")
		return
	}
	a.log.Info("live session started", "stream", ls.ID, "input", q.Input, "output", q.Output)
	writeJSON(w, http.StatusCreated, a.live.view(ls))
}

func newStreamID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "s-" + hex.EncodeToString(b)
}

// view copies a session under the lock.
func (l *streams) view(ls *liveStream) liveStream {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := *ls
	v.cancel, v.done = nil, nil
	return v
}

// get returns session id (nil: none).
func (l *streams) get(id string) *liveStream {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byID[id]
}

func (a *api) handleStreamGet(w http.ResponseWriter, r *http.Request) {
	ls := a.live.get(r.PathValue("id"))
	if ls == nil {
		writeError(w, http.StatusNotFound, "stream not found")
		return
	}
	writeJSON(w, http.StatusOK, a.live.view(ls))
}

func (a *api) handleStreamList(w http.ResponseWriter, r *http.Request) {
	a.live.mu.Lock()
	var all []*liveStream
	for _, ls := range a.live.byID {
		all = append(all, ls)
	}
	a.live.mu.Unlock()
	slices.SortFunc(all, func(x, y *liveStream) int { return x.Started.Compare(y.Started) })
	views := []liveStream{}
	for _, ls := range all {
		views = append(views, a.live.view(ls))
	}
	writeJSON(w, http.StatusOK, map[string]any{"streams": views})
}

// handleStreamStop stops a session: its output is finished (an HLS
// playlist gets its end tag) and its device freed.
func (a *api) handleStreamStop(w http.ResponseWriter, r *http.Request) {
	ls := a.live.get(r.PathValue("id"))
	if ls == nil {
		writeError(w, http.StatusNotFound, "stream not found")
		return
	}
	a.live.mu.Lock()
	if ls.Ended == nil {
		ls.stopAsked = true
	}
	a.live.mu.Unlock()
	ls.cancel()
	select {
	case <-ls.done:
	case <-time.After(a.cfg.CancelWait):
	}
	writeJSON(w, http.StatusOK, a.live.view(ls))
}

// stop stops every session (at shutdown).
func (l *streams) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, ls := range l.byID {
		if ls.Ended == nil {
			ls.stopAsked = true
		}
		ls.cancel()
	}
}
