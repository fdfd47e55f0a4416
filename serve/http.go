package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vsr-dev/vsr/video"
)

// maxJSON bounds a JSON request body.
const maxJSON = 1 << 20

// api is the HTTP API of a Service (Handler): the handlers of its routes,
// the checks of the requests they take, uploads and live sessions. It
// holds what they read (the Service's configuration, runner, placement
// and work queue, its upload budget, stream allow rules, the host names
// it answers to and live sessions) and reaches the rest of the Service
// only through svc's scheduler methods: submit, cancel, get, list,
// queuePos, snapshot and launch (scheduler.go).
type api struct {
	cfg      *Config // the Service's, with its defaults
	runner   Runner
	place    placement // what differs between New and NewRemote (placement.go)
	log      *slog.Logger
	wq       WorkQueue // the store's WorkQueue capability, or nil
	svc      *Service
	uploads  *uploadBudget
	allow    []allowRule
	hosts    []hostName
	live     *streams
	metrics  http.Handler
	events   *eventHub
	previews *previews
}

// newAPI returns the HTTP API of s.
func (s *Service) newAPI() *api {
	return &api{
		cfg: &s.cfg, runner: s.runner, place: s.placement, log: s.log, wq: s.wq, svc: s,
		uploads: &s.uploads, allow: s.allow, hosts: s.hosts, live: &s.live,
		metrics: promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}),
		events:  s.events, previews: s.previews,
	}
}

// Handler returns the service's HTTP API.
func (s *Service) Handler() http.Handler {
	a := s.newAPI()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/tasks/video/{$}", a.handleCreate)
	mux.HandleFunc("POST /v1/tasks/video", a.handleCreate) // without the slash: LightX2V redirects, vsr serves it
	mux.HandleFunc("POST /v1/tasks/{$}", a.handleCreate)   // LightX2V's deprecated alias
	mux.HandleFunc("POST "+uploadPath, a.handleUpload)
	mux.HandleFunc("GET /v1/tasks/{$}", a.handleList)
	mux.HandleFunc("GET /v1/tasks/queue/status", a.handleQueue)
	mux.HandleFunc("GET /v1/tasks/{id}/status", a.handleStatus)
	mux.HandleFunc("GET /v1/tasks/{id}/result", a.handleResult)
	mux.HandleFunc("DELETE /v1/tasks/{id}", a.handleCancel)
	mux.HandleFunc("DELETE /v1/tasks/{id}/record", a.handleDeleteRecord)
	mux.HandleFunc("GET /v1/service/status", a.handleServiceStatus)
	mux.HandleFunc("POST /v1/streams", a.handleStreamCreate)
	mux.HandleFunc("GET /v1/streams", a.handleStreamList)
	mux.HandleFunc("GET /v1/streams/{id}", a.handleStreamGet)
	mux.HandleFunc("DELETE /v1/streams/{id}", a.handleStreamStop)
	mux.HandleFunc("GET /v1/service/metadata", a.handleMetadata)
	mux.HandleFunc("GET /v1/events", a.handleEvents)
	mux.HandleFunc("GET /v1/devices", a.handleDevices)
	mux.HandleFunc("GET /v1/tasks/{id}/preview", a.handlePreview)
	mux.HandleFunc("GET /v1/tasks/{id}/preview/info", a.handlePreviewInfo)
	page := pageHandler()
	mux.Handle("GET /{$}", page)
	mux.Handle("GET /web/", page)
	health := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
	mux.HandleFunc("GET /healthz", health)
	mux.HandleFunc("GET /health", health) // LightX2V's name
	mux.Handle("GET /metrics", a.metrics)
	// The same paths with other methods: 405 as JSON (the mux's own is text).
	for _, p := range []string{"/v1/tasks/video/{$}", "/v1/tasks/video/upload", "/v1/tasks/{$}",
		"/v1/tasks/{id}/status", "/v1/tasks/{id}/result", "/v1/tasks/{id}", "/v1/service/status", "/v1/service/metadata",
		"/v1/events", "/v1/devices", "/v1/tasks/{id}/preview", "/v1/tasks/{id}/preview/info", "/web/", "/healthz", "/health", "/metrics", "/v1/streams", "/v1/streams/{id}"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed on %s", r.Method, r.URL.Path))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
	})
	return a.guard(a.auth(mux))
}

// auth requires the bearer token, when one is configured, on every
// endpoint but /healthz, /health and the page's public files (pagePath:
// GET and HEAD only); the read-only token, when one is
// configured, passes on GET and HEAD requests only (403 on the others).
// The scheme is case-insensitive (RFC 7235). The comparisons take the same
// time whatever the token sent.
func (a *api) auth(next http.Handler) http.Handler {
	if a.cfg.Token == "" {
		return next
	}
	want := sha256.Sum256([]byte(a.cfg.Token))
	var read [sha256.Size]byte
	if a.cfg.ReadToken != "" {
		read = sha256.Sum256([]byte(a.cfg.ReadToken))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		public := r.URL.Path == "/healthz" || r.URL.Path == "/health" ||
			pagePath(r.URL.Path) && (r.Method == http.MethodGet || r.Method == http.MethodHead)
		if !public {
			scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			ok := strings.EqualFold(scheme, "Bearer")
			got = strings.TrimLeft(got, " ")
			sum := sha256.Sum256([]byte(got))
			full := subtle.ConstantTimeCompare(sum[:], want[:]) == 1
			readOnly := a.cfg.ReadToken != "" && subtle.ConstantTimeCompare(sum[:], read[:]) == 1
			switch {
			case !ok || !full && !readOnly:
				w.Header().Set("WWW-Authenticate", `Bearer realm="vsr"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
				return
			case !full && r.Method != http.MethodGet && r.Method != http.MethodHead:
				writeError(w, http.StatusForbidden, fmt.Sprintf("the read-only token may only read (GET); %s %s needs the service's token", r.Method, r.URL.Path))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": oneLine(msg)})
}

// decodeRequest reads one JSON object into req (a task's Request, a live
// session's StreamRequest), refusing unknown fields and wrong types with a
// message that names the field.
func decodeRequest(body io.Reader, req any) (int, error) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return jsonError(err)
	}
	// The rest of the body must be white space up to its end; an error
	// reading it (a body trickled past its deadline: 408, or over the
	// size limit: 413) is told as such.
	var se *json.SyntaxError
	_, err := dec.Token()
	switch {
	case err == io.EOF:
		return 0, nil
	case err == nil || errors.As(err, &se):
		return http.StatusBadRequest, errors.New("invalid JSON: data after the request object")
	}
	return jsonError(err)
}

func jsonError(err error) (int, error) {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	var me *http.MaxBytesError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return http.StatusRequestTimeout, errors.New("the request body did not arrive in time")
	case errors.As(err, &me):
		return http.StatusRequestEntityTooLarge, fmt.Errorf("request body over %d bytes", me.Limit)
	case errors.As(err, &te):
		field := te.Field
		if field == "" {
			return http.StatusBadRequest, fmt.Errorf("the request must be a JSON object, not %s", te.Value)
		}
		return http.StatusBadRequest, fmt.Errorf("field %q: want %s, got %s", field, jsonKind(te.Type), te.Value)
	case errors.As(err, &se):
		return http.StatusBadRequest, fmt.Errorf("invalid JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.EOF):
		return http.StatusBadRequest, errors.New("empty request body: want a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return http.StatusBadRequest, errors.New("invalid JSON: unexpected end of the body")
	}
	if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return http.StatusBadRequest, fmt.Errorf("unknown field %s", f)
	}
	return http.StatusBadRequest, fmt.Errorf("invalid request: %v", err)
}

func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	case reflect.Float64, reflect.Float32:
		return "a number"
	case reflect.Slice:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return t.String()
}

// check validates a decoded request (CheckRequest), then has the runner
// check it (Validator).
func (a *api) check(ctx context.Context, r *Request) error {
	if err := CheckRequest(r); err != nil {
		return err
	}
	if v, ok := a.runner.(Validator); ok {
		return v.Validate(ctx, r)
	}
	return nil
}

func (a *api) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req Request
	// A body trickled in more slowly than this is refused (408).
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(a.cfg.BodyTimeout))
	if code, err := decodeRequest(http.MaxBytesReader(w, r.Body, maxJSON), &req); err != nil {
		writeError(w, code, err.Error())
		return
	}
	a.create(w, r, &req, "")
}

// create validates req, resolves its paths and queues it. upload is the
// hidden path of an uploaded input, renamed when the task is stored and
// removed if it is refused.
func (a *api) create(w http.ResponseWriter, hr *http.Request, req *Request, upload string) {
	refuse := func(code int, msg string) {
		if upload != "" {
			os.Remove(upload)
		}
		if code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "5")
		}
		writeError(w, code, msg)
	}
	if err := a.check(hr.Context(), req); err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	t := &Task{ID: req.TaskID, Request: *req}
	if t.ID == "" {
		t.ID = newID()
	}
	var err error
	if upload != "" {
		// The hidden name is ".upload-RANDOM[.ext]": keep only its extension.
		ext := filepath.Ext(strings.TrimPrefix(filepath.Base(upload), "."))
		t.Input, t.Upload = a.svc.uploadPath(ext), true
		req.VideoPath = t.Input
		t.Request.VideoPath = t.Input
	} else if t.Input, err = resolveInput(a.cfg.InputRoot, req.VideoPath); err != nil {
		refuse(err.(*pathError).code, err.Error())
		return
	}
	if t.Output, err = resolveOutput(a.cfg.OutputRoot, req.SaveResultPath, t.ID); err != nil {
		refuse(err.(*pathError).code, err.Error())
		return
	}
	if t.Output == t.Input {
		refuse(http.StatusBadRequest, "save_result_path is the input file")
		return
	}
	if err := a.checkInput(hr.Context(), req, t.Input, upload); err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	in := t.Input
	if upload != "" {
		in = upload
	}
	if err := a.fitsAtSubmit(hr.Context(), &t.Request, in); err != nil {
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	if upload != "" && a.wq != nil && a.cfg.NATS != nil && a.cfg.NATS.Files {
		// The workers take the upload from the object store, under a
		// name of this submission's own (uploadObject): one refused as a
		// duplicate replaces no other task's upload.
		if err := a.wq.PutUpload(uploadObject(t), upload); err != nil {
			refuse(http.StatusServiceUnavailable, err.Error())
			return
		}
		t.Files = true
	}
	var conflict *conflictError
	err = a.svc.submit(t, upload)
	if err != nil && t.Files {
		a.wq.RemoveUpload(uploadObject(t))
	}
	switch {
	case errors.As(err, &conflict):
		refuse(http.StatusConflict, conflict.msg)
		return
	case errors.Is(err, ErrQueueFull):
		refuse(http.StatusServiceUnavailable, fmt.Sprintf("task queue is full (max %d pending tasks)", a.cfg.MaxQueue))
		return
	case errors.Is(err, errDuplicate):
		refuse(http.StatusConflict, fmt.Sprintf("task_id %q exists", t.ID))
		return
	case err != nil:
		refuse(http.StatusServiceUnavailable, err.Error())
		return
	}
	if t.Files {
		os.Remove(t.Input) // the workers take it from the object store
	}
	writeJSON(w, http.StatusOK, map[string]string{
		"task_id": t.ID, "task_status": string(Pending), "save_result_path": t.Output})
}

// statusView is a task as GET /v1/tasks/{id}/status shows it: LightX2V's
// fields (task_id, status, start_time, end_time, error, save_result_path)
// and vsr's.
type statusView struct {
	TaskID         string     `json:"task_id"`
	Status         Status     `json:"status"`
	StartTime      *time.Time `json:"start_time"`
	EndTime        *time.Time `json:"end_time"`
	Error          *string    `json:"error"`
	ErrorType      string     `json:"error_type"`
	SaveResultPath string     `json:"save_result_path"`

	VideoPath    string    `json:"video_path"`
	CreateTime   time.Time `json:"create_time"`
	Progress     progress  `json:"progress"`
	QueueSeconds float64   `json:"queue_seconds"`
	RunSeconds   float64   `json:"run_seconds"`
	Attempts     int       `json:"attempts"`
	// ResumedFrom and ResumeNote: where the last run resumed, and what it
	// said of its journal (Task).
	ResumedFrom int     `json:"resumed_from_frame,omitempty"`
	ResumeNote  string  `json:"resume_note,omitempty"`
	QueuePos    int     `json:"queue_position,omitempty"`
	Request     Request `json:"request"`
	Width       int     `json:"width,omitempty"`
	Height      int     `json:"height,omitempty"`
	FPS         float64 `json:"fps,omitempty"`
	Devices     string  `json:"devices,omitempty"`
	Worker      string  `json:"worker,omitempty"`
	// Carried and Dropped: what the output carries besides the picture,
	// and what it drops and why.
	Carried []string     `json:"carried,omitempty"`
	Dropped []video.Drop `json:"dropped,omitempty"`
}

type progress struct {
	Done    int     `json:"frames_done"`
	Total   int     `json:"frames_total"`
	Percent float64 `json:"percent"`
}

func view(t *Task, pos int) statusView {
	v := statusView{
		TaskID: t.ID, Status: t.Status, StartTime: t.Started, EndTime: t.Ended, ErrorType: t.ErrorType,
		SaveResultPath: t.Output, VideoPath: t.Input, CreateTime: t.Created,
		Progress: progress{Done: t.FramesDone, Total: t.FramesTotal},
		Attempts: t.Attempts, ResumedFrom: t.ResumedFrom, ResumeNote: t.ResumeNote, QueuePos: pos, Request: t.Request,
		Width: t.Width, Height: t.Height, FPS: t.FPS, Devices: t.Devices, Worker: t.Worker,
		Carried: t.Carried, Dropped: t.Dropped,
	}
	if t.Error != "" {
		v.Error = &t.Error
	}
	if v.StartTime == nil { // as LightX2V: the creation time until the task starts
		v.StartTime = &v.CreateTime
	}
	if t.FramesTotal > 0 {
		v.Progress.Percent = float64(int(1000*float64(t.FramesDone)/float64(t.FramesTotal))) / 10
	}
	now := time.Now()
	if t.Started != nil {
		v.QueueSeconds = t.Started.Sub(t.Created).Seconds()
		end := now
		if t.Ended != nil {
			end = *t.Ended
		}
		v.RunSeconds = end.Sub(*t.Started).Seconds()
	} else if t.Ended != nil {
		v.QueueSeconds = t.Ended.Sub(t.Created).Seconds()
	} else {
		v.QueueSeconds = now.Sub(t.Created).Seconds()
	}
	return v
}

func (a *api) handleList(w http.ResponseWriter, r *http.Request) {
	out := map[string]statusView{}
	for _, t := range a.svc.list() {
		out[t.ID] = view(t, 0)
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) handleStatus(w http.ResponseWriter, r *http.Request) {
	t, ok := a.svc.get(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "task not found")
		return
	}
	writeJSON(w, http.StatusOK, view(t, a.svc.queuePos(t.ID)))
}

func (a *api) handleResult(w http.ResponseWriter, r *http.Request) {
	t, ok := a.svc.get(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "task not found")
		return
	}
	if t.Status != Completed {
		writeError(w, http.StatusNotFound, fmt.Sprintf("task not completed (status %s)", t.Status))
		return
	}
	if err := a.place.checkResult(t); err != nil {
		writeError(w, http.StatusConflict, "task result not served: "+err.Error())
		return
	}
	if t.Result != "" { // in the NATS object store
		a.serveObject(w, r, t)
		return
	}
	// Opened inside the root, so a link swapped in since cannot lead out.
	f, err := openIn(a.cfg.OutputRoot, t.Output)
	if errors.Is(err, fs.ErrNotExist) {
		writeError(w, http.StatusNotFound, "task result file does not exist")
		return
	}
	if err != nil {
		writeError(w, http.StatusForbidden, "the result file cannot be opened inside the output root")
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		writeError(w, http.StatusNotFound, "task result file does not exist")
		return
	}
	name := filepath.Base(t.Output)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	if ct := mime.TypeByExtension(filepath.Ext(name)); ct != "" {
		w.Header().Set("Content-Type", ct)
	} else {
		w.Header().Set("Content-Type", "application/octet-stream")
	}
	http.ServeContent(w, r, name, st.ModTime(), f)
}

func (a *api) handleCancel(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), a.cfg.CancelWait)
	defer cancel()
	res, t := a.svc.cancel(ctx, r.PathValue("id"))
	switch res {
	case cancelNotFound:
		writeError(w, http.StatusNotFound, "task not found")
	case cancelDone:
		writeJSON(w, http.StatusOK, map[string]string{"stop_status": "success", "reason": "Task stopped successfully.", "status": string(t.Status)})
	case cancelStopping:
		writeJSON(w, http.StatusOK, map[string]string{"stop_status": "stopping",
			"reason": fmt.Sprintf("Task is stopping: it did not stop within %s; its status turns cancelled when it does.", a.cfg.CancelWait),
			"status": string(t.Status)})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"stop_status": "do_nothing", "reason": fmt.Sprintf("Task already %s.", t.Status), "status": string(t.Status)})
	}
}

func (a *api) handleDeleteRecord(w http.ResponseWriter, r *http.Request) {
	ok, err := a.svc.deleteRecord(r.PathValue("id"))
	switch {
	case !ok:
		writeError(w, http.StatusNotFound, "task not found")
	case errors.Is(err, errNotFinished):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, "delete the task: "+err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]any{"task_id": r.PathValue("id"), "deleted": true})
	}
}

func (a *api) handleQueue(w http.ResponseWriter, r *http.Request) {
	q := a.svc.snapshot(false)
	var cur any
	if len(q.running) > 0 {
		cur = q.running[0]
	}
	pending := len(q.pending)
	active := pending + len(q.running)
	out := map[string]any{
		"is_processing":   len(q.running) > 0,
		"running_tasks":   q.running,
		"current_task":    cur,
		"pending_count":   pending,
		"active_count":    active,
		"queue_size":      a.cfg.MaxQueue,
		"queue_available": a.cfg.MaxQueue - pending,
		"pending_tasks":   q.pending,
	}
	a.place.queueStatus(out, q)
	writeJSON(w, http.StatusOK, out)
}

func (a *api) handleServiceStatus(w http.ResponseWriter, r *http.Request) {
	q := a.svc.snapshot(true)
	var cur any
	status := "idle"
	if len(q.running) > 0 {
		cur, status = q.running[0], "busy"
	}
	out := map[string]any{
		"service_status":  status,
		"current_task":    cur,
		"active_tasks":    q.running,
		"pending_tasks":   len(q.pending),
		"queue_size":      a.cfg.MaxQueue,
		"total_tasks":     q.total,
		"completed_tasks": q.byStatus[Completed],
		"failed_tasks":    q.byStatus[Failed],
		"cancelled_tasks": q.byStatus[Cancelled],
	}
	a.place.serviceStatus(out)
	writeJSON(w, http.StatusOK, out)
}

func (a *api) handleMetadata(w http.ResponseWriter, r *http.Request) {
	out := map[string]any{
		// LightX2V's keys: one process on one device.
		"nproc_per_node": 1,
		"model_cls":      a.cfg.ModelClass,
		"model_path":     a.cfg.Model,

		"service":     "vsr",
		"version":     a.cfg.Version,
		"task_types":  []string{"video"},
		"input_root":  a.cfg.InputRoot,
		"output_root": a.cfg.OutputRoot,
		"max_queue":   a.cfg.MaxQueue,
		"max_upload":  a.cfg.MaxUpload,
	}
	if m, ok := a.runner.(Metadataer); ok {
		for k, v := range m.Metadata() {
			out[k] = v
		}
	}
	writeJSON(w, http.StatusOK, out)
}
