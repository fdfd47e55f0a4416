package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
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
	// MaxLatency and IdleTimeout are in seconds (IdleTimeout default 10).
	MaxLatency  float64 `json:"max_latency,omitempty"`
	IdleTimeout float64 `json:"idle_timeout,omitempty"`
	// Overload is wait (default) or drop.
	Overload  string `json:"overload,omitempty"`
	Reconnect bool   `json:"reconnect,omitempty"`
}

// LiveSession is a live session's parameters as a runner gets them.
type LiveSession struct {
	Request StreamRequest
	// Protocols are the only protocols ffmpeg may open for each URL.
	InputProtocols, OutputProtocols []string
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

// streamProtocols are the ffmpeg protocols each scheme of an allowed URL
// may use, and no others: a playlist or manifest cannot make ffmpeg open
// a file or another kind of URL.
var streamProtocols = map[string][]string{
	"udp": {"udp"}, "tcp": {"tcp"}, "srt": {"srt"}, "rtp": {"rtp", "udp"},
	"rtmp": {"rtmp", "tcp"}, "rtmps": {"rtmps", "tcp", "tls"},
	"rtsp": {"rtsp", "rtp", "udp", "tcp"},
	"http": {"http", "tcp"}, "https": {"https", "http", "tcp", "tls", "crypto"},
}

// allowRule is one entry of Config.StreamAllow: scheme://host[:port],
// host "*" for any.
type allowRule struct{ scheme, host, port string }

// parseAllow reads the entries of --stream-allow.
func parseAllow(list []string) ([]allowRule, error) {
	var rules []allowRule
	for _, e := range list {
		u, err := url.Parse(e)
		if err != nil || u.Scheme == "" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			return nil, fmt.Errorf("--stream-allow %q: want scheme://host or scheme://host:port (host * for any)", e)
		}
		s := strings.ToLower(u.Scheme)
		if streamProtocols[s] == nil {
			return nil, fmt.Errorf("--stream-allow %q: scheme %s is not a stream protocol vsr allows (%s)", e, s, strings.Join(schemes(), ", "))
		}
		rules = append(rules, allowRule{s, strings.ToLower(u.Hostname()), u.Port()})
	}
	return rules, nil
}

func schemes() []string {
	var s []string
	for k := range streamProtocols {
		s = append(s, k)
	}
	slices.Sort(s)
	return s
}

// allowed checks a stream URL against the rules and returns the ffmpeg
// protocols it may use.
func (s *Service) allowed(field, raw string) ([]string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("field %q: %q is not a URL (scheme://host:port)", field, raw)
	}
	scheme, host, port := strings.ToLower(u.Scheme), strings.ToLower(u.Hostname()), u.Port()
	for _, r := range s.allow {
		if r.scheme == scheme && (r.host == "*" || r.host == host || net.ParseIP(r.host).Equal(net.ParseIP(host)) && net.ParseIP(host) != nil) &&
			(r.port == "" || r.port == port) {
			return streamProtocols[scheme], nil
		}
	}
	if len(s.allow) == 0 {
		return nil, fmt.Errorf("field %q: %s is not allowed: this server allows no stream URLs (start it with --stream-allow scheme://host)", field, raw)
	}
	return nil, fmt.Errorf("field %q: %s is not allowed (--stream-allow lets in %s)", field, raw, s.allowList())
}

func (s *Service) allowList() string {
	var l []string
	for _, r := range s.allow {
		e := r.scheme + "://" + r.host
		if r.port != "" {
			e += ":" + r.port
		}
		l = append(l, e)
	}
	return strings.Join(l, ", ")
}

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

func (s *Service) handleStreamCreate(w http.ResponseWriter, r *http.Request) {
	sr, ok := s.runner.(StreamRunner)
	if !ok || s.cfg.Remote {
		writeError(w, http.StatusServiceUnavailable, "live sessions run where the devices are, and this server has none (--workers 0: vsr worker processes take file tasks only): send streams to a vsr serve that runs on GPUs")
		return
	}
	var q StreamRequest
	// As a task's: a body trickled in too slowly is refused (408).
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.cfg.BodyTimeout))
	if code, err := decodeRequest(http.MaxBytesReader(w, r.Body, maxJSON), &q); err != nil {
		writeError(w, code, err.Error())
		return
	}
	in, err := s.allowed("input", q.Input)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	out, err := s.allowed("output", q.Output)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case q.Overload != "" && q.Overload != "wait" && q.Overload != "drop":
		err = fmt.Errorf("field \"overload\": %q: want wait or drop", q.Overload)
	case q.MaxLatency < 0 || q.IdleTimeout < 0:
		err = errors.New("fields \"max_latency\" and \"idle_timeout\" are seconds, not negative")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ls := &liveStream{ID: newStreamID(), Status: "running", Request: q, Started: time.Now().UTC(), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	ls.cancel = cancel
	run, err := sr.Stream(ctx, LiveSession{Request: q, InputProtocols: in, OutputProtocols: out, Stats: func(st pipeline.LiveStats) {
		s.live.mu.Lock()
		ls.Stats = st
		s.live.mu.Unlock()
	}})
	if err != nil {
		cancel()
		code := http.StatusBadRequest
		if errors.Is(err, ErrBusy) {
			code = http.StatusServiceUnavailable
		}
		writeError(w, code, err.Error())
		return
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		cancel()
		go run() // ends at once and frees its device
		writeError(w, http.StatusServiceUnavailable, "the server is shutting down")
		return
	}
	s.live.mu.Lock()
	if s.live.byID == nil {
		s.live.byID = map[string]*liveStream{}
	}
	s.live.byID[ls.ID] = ls
	s.live.mu.Unlock()
	s.workers.Add(1) // Close waits for it
	s.mu.Unlock()
	go func() {
		defer s.workers.Done()
		defer close(ls.done)
		defer cancel()
		err := run()
		now := time.Now().UTC()
		s.live.mu.Lock()
		defer s.live.mu.Unlock()
		ls.Ended = &now
		switch {
		case ls.stopAsked:
			ls.Status = "stopped"
		case err != nil:
			ls.Status, ls.Error = "failed", oneLine(err.Error())
		default:
			ls.Status = "finished"
		}
		s.log.Info("live session ended", "stream", ls.ID, "status", ls.Status, "error", ls.Error)
	}()
	s.log.Info("live session started", "stream", ls.ID, "input", redacted(q.Input), "output", redacted(q.Output))
	writeJSON(w, http.StatusCreated, s.streamView(ls))
}

// redacted is a URL for the log: a password in it is replaced by xxxxx.
func redacted(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}

func newStreamID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "s-" + hex.EncodeToString(b)
}

// streamView copies a session under the lock.
func (s *Service) streamView(ls *liveStream) liveStream {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	v := *ls
	v.cancel, v.done = nil, nil
	return v
}

func (s *Service) stream(id string) *liveStream {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	return s.live.byID[id]
}

func (s *Service) handleStreamGet(w http.ResponseWriter, r *http.Request) {
	ls := s.stream(r.PathValue("id"))
	if ls == nil {
		writeError(w, http.StatusNotFound, "stream not found")
		return
	}
	writeJSON(w, http.StatusOK, s.streamView(ls))
}

func (s *Service) handleStreamList(w http.ResponseWriter, r *http.Request) {
	s.live.mu.Lock()
	var all []*liveStream
	for _, ls := range s.live.byID {
		all = append(all, ls)
	}
	s.live.mu.Unlock()
	slices.SortFunc(all, func(a, b *liveStream) int { return a.Started.Compare(b.Started) })
	views := []liveStream{}
	for _, ls := range all {
		views = append(views, s.streamView(ls))
	}
	writeJSON(w, http.StatusOK, map[string]any{"streams": views})
}

// handleStreamStop stops a session: its output is finished (an HLS
// playlist gets its end tag) and its device freed.
func (s *Service) handleStreamStop(w http.ResponseWriter, r *http.Request) {
	ls := s.stream(r.PathValue("id"))
	if ls == nil {
		writeError(w, http.StatusNotFound, "stream not found")
		return
	}
	s.live.mu.Lock()
	if ls.Ended == nil {
		ls.stopAsked = true
	}
	s.live.mu.Unlock()
	ls.cancel()
	select {
	case <-ls.done:
	case <-time.After(s.cfg.CancelWait):
	}
	writeJSON(w, http.StatusOK, s.streamView(ls))
}

// stopStreams stops every session (at shutdown).
func (s *Service) stopStreams() {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	for _, ls := range s.live.byID {
		if ls.Ended == nil {
			ls.stopAsked = true
		}
		ls.cancel()
	}
}
