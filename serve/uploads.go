package serve

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// errUploadBudget refuses an upload that would take the uploads in the
// input root past Config.MaxUploadTotal.
var errUploadBudget = errors.New("upload budget spent")

// uploadBudget counts the bytes of this process's uploads for
// Config.MaxUploadTotal. What is on disk is counted when an upload starts
// (the stored uploads, and the temporaries of other processes' uploads in
// progress); what this process writes meanwhile is counted here as it
// arrives, so that uploads running at once cannot pass the budget together.
type uploadBudget struct {
	mu       sync.Mutex
	inflight int64           // bytes written by this process's uploads in progress
	finished int64           // bytes of this process's uploads kept, ever
	open     map[string]bool // their temporaries' names
}

// budgetWriter writes one upload, within the budget.
type budgetWriter struct {
	b          *uploadBudget
	f          *os.File
	total      int64 // the budget; 0: none
	base       int64 // bytes on disk when the upload started
	finishedAt int64 // b.finished then
	n          int64 // bytes written
}

// writer starts counting the upload written to f, in the input root root,
// against a budget of total bytes (0: no budget).
func (b *uploadBudget) writer(f *os.File, root string, total int64) *budgetWriter {
	w := &budgetWriter{b: b, f: f, total: total}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open == nil {
		b.open = map[string]bool{}
	}
	b.open[filepath.Base(f.Name())] = true
	if total > 0 {
		w.base, w.finishedAt = storedUploads(root, b.open), b.finished
	}
	return w
}

func (w *budgetWriter) Write(p []byte) (int, error) {
	if w.total > 0 {
		w.b.mu.Lock()
		used := w.base + w.b.finished - w.finishedAt + w.b.inflight
		if used+int64(len(p)) > w.total {
			w.b.mu.Unlock()
			return 0, errUploadBudget
		}
		w.b.inflight += int64(len(p))
		w.b.mu.Unlock()
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	if w.total > 0 && n < len(p) {
		w.b.mu.Lock()
		w.b.inflight -= int64(len(p) - n)
		w.b.mu.Unlock()
	}
	return n, err
}

// done ends the upload: kept says whether its file stays (stored).
func (w *budgetWriter) done(kept bool) {
	w.b.mu.Lock()
	defer w.b.mu.Unlock()
	delete(w.b.open, filepath.Base(w.f.Name()))
	if w.total > 0 {
		w.b.inflight -= w.n
	}
	if kept {
		w.b.finished += w.n
	}
}

// storedUploads sums the sizes of the uploads in root: stored ones and
// the temporaries of uploads in progress, but those named in skip.
func storedUploads(root string, skip map[string]bool) int64 {
	ents, _ := os.ReadDir(root)
	var n int64
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || skip[name] || !(uploadName.MatchString(name) || strings.HasPrefix(name, ".upload-")) {
			continue
		}
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// isDiskFull reports whether err says the disk or the quota is full.
func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// uploadFields maps form field names to whether their JSON value is a
// string (else the form value is read as JSON: numbers, arrays).
var uploadFields = func() map[string]bool {
	m := map[string]bool{}
	rt := reflect.TypeFor[Request]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" && name != "video_path" {
			m[name] = rt.Field(i).Type.Kind() == reflect.String
		}
	}
	return m
}()

// handleUpload takes a multipart form: the video in part "video" and the
// request's other fields as form values. The video is stored in the input
// root under a unique name.
func (a *api) handleUpload(w http.ResponseWriter, r *http.Request) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		writeError(w, http.StatusBadRequest, "want a multipart/form-data body with a file part \"video\"")
		return
	}
	if r.ContentLength > a.cfg.MaxUpload+maxJSON {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("upload over the limit of %d bytes", a.cfg.MaxUpload))
		return
	}
	rr := &rateReader{r: r.Body, rc: http.NewResponseController(w), start: time.Now(), grace: a.cfg.UploadGrace, min: a.cfg.MinUploadRate}
	rr.rc.SetReadDeadline(rr.start.Add(rr.grace))
	r.Body = http.MaxBytesReader(w, io.NopCloser(rr), a.cfg.MaxUpload+maxJSON)
	mr, err := r.MultipartReader()
	if err != nil {
		writeError(w, http.StatusBadRequest, "multipart body: "+err.Error())
		return
	}
	fields := map[string]json.RawMessage{}
	var upload string
	var held *os.File // the upload, locked until its task is stored or refused
	defer func() {
		if held != nil {
			held.Close()
		}
	}()
	fail := func(code int, msg string) {
		if upload != "" {
			os.Remove(upload)
		}
		writeError(w, code, msg)
	}
	// bodyErr fails for an error reading the body: over the size limit, or
	// malformed.
	bodyErr := func(err error) {
		if me := (*http.MaxBytesError)(nil); errors.As(err, &me) {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("upload over the limit of %d bytes", a.cfg.MaxUpload))
		} else if rr.slow {
			fail(http.StatusRequestTimeout, a.slowUpload())
		} else {
			fail(http.StatusBadRequest, "multipart body: "+err.Error())
		}
	}
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			bodyErr(err)
			return
		}
		name := p.FormName()
		if name == "video" {
			if upload != "" {
				fail(http.StatusBadRequest, "more than one \"video\" part")
				return
			}
			var code int
			held, code, err = a.saveUpload(p)
			if held != nil {
				upload = held.Name()
			}
			if rr.slow {
				code, err = http.StatusRequestTimeout, errors.New(a.slowUpload())
			}
			if err != nil {
				fail(code, err.Error())
				return
			}
			continue
		}
		isString, ok := uploadFields[name]
		if !ok {
			fail(http.StatusBadRequest, fmt.Sprintf("unknown field %q", name))
			return
		}
		v, err := io.ReadAll(io.LimitReader(p, 64<<10))
		if err != nil {
			bodyErr(err)
			return
		}
		if isString {
			v, _ = json.Marshal(string(v))
		} else if !json.Valid(v) {
			fail(http.StatusBadRequest, fmt.Sprintf("field %q: %q is not a number or a JSON array", name, v))
			return
		}
		fields[name] = v
	}
	if upload == "" {
		fail(http.StatusBadRequest, "no file part \"video\"")
		return
	}
	body, _ := json.Marshal(fields)
	var req Request
	if code, err := decodeRequest(bytes.NewReader(body), &req); err != nil {
		fail(code, err.Error())
		return
	}
	a.create(w, r, &req, upload)
}

// saveUpload copies an uploaded file into a hidden temporary in the input
// root, which takes its final name when the task is stored. The file is
// returned open and locked (see owner.go): the caller closes it once the
// task is stored or refused. An upload that would take the uploads in the
// input root past Config.MaxUploadTotal, or that finds the disk full, is
// refused with 507.
func (a *api) saveUpload(p io.Reader) (*os.File, int, error) {
	ext := ""
	if fp, ok := p.(interface{ FileName() string }); ok {
		ext = outputExt(strings.ToLower(fp.FileName()))
	}
	f, err := createLocked(a.cfg.InputRoot, ".upload-*"+ext)
	if err != nil {
		if isDiskFull(err) {
			return nil, http.StatusInsufficientStorage, a.diskFull()
		}
		return nil, http.StatusInternalServerError, fmt.Errorf("store upload: %v", err)
	}
	w := a.uploads.writer(f, a.cfg.InputRoot, a.cfg.MaxUploadTotal)
	n, err := io.Copy(w, io.LimitReader(p, a.cfg.MaxUpload+1))
	if err == nil {
		err = f.Sync()
	}
	if err == nil && n > a.cfg.MaxUpload {
		err = &http.MaxBytesError{Limit: a.cfg.MaxUpload}
	}
	w.done(err == nil)
	if err != nil {
		os.Remove(f.Name())
		f.Close()
		var me *http.MaxBytesError
		switch {
		case errors.As(err, &me):
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("upload over the limit of %d bytes", a.cfg.MaxUpload)
		case errors.Is(err, errUploadBudget):
			return nil, http.StatusInsufficientStorage, fmt.Errorf("the uploads waiting in the input root would pass their budget of %d bytes (--max-upload-bytes-total): retry once tasks have finished", a.cfg.MaxUploadTotal)
		case isDiskFull(err):
			return nil, http.StatusInsufficientStorage, a.diskFull()
		}
		return nil, http.StatusBadRequest, fmt.Errorf("read upload: %v", err)
	}
	return f, 0, nil
}

func (a *api) diskFull() error {
	return fmt.Errorf("no space left on the disk of the input root %s: the upload was not stored; retry once tasks have finished, or free space", a.cfg.InputRoot)
}

func (a *api) slowUpload() string {
	return fmt.Sprintf("the upload arrived more slowly than %d bytes/s; the connection was dropped", a.cfg.MinUploadRate)
}

// uploadPrefix starts the name of an upload stored for a task.
const uploadPrefix = "upload-"

// Instances that share an input root (each with its own --data) tell
// their uploads apart by the id in their names: the id of the instance
// that stored it, made at its first start and kept in its data directory
// (ownerFile). An instance's sweep removes only its own uploads that none
// of its tasks reads (its tasks are in its store, which only it reads),
// and those of versions before ids, as they did; another instance's stay,
// whether that instance runs or not: it may start again with their tasks
// pending, and it sweeps its own.

// ownerFile is the name of the file in the data directory that holds the
// instance's id.
const ownerFile = "instance-id"

// ownerIDPattern is what ownerFile holds (and a newline).
var ownerIDPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// uploadPath is the path in the input root of a new upload of this
// instance, with the extension ext (".mp4", or none).
func (s *Service) uploadPath(ext string) string {
	return filepath.Join(s.cfg.InputRoot, uploadPrefix+s.owner+"-"+newID()+ext)
}

// mayRemoveUpload reports whether name is that of an upload the sweep of
// this instance may remove: its own, or one stored by a version before
// owners.
func (s *Service) mayRemoveUpload(name string) bool {
	m := uploadName.FindStringSubmatch(name)
	return m != nil && (m[1] == "" || m[1] == s.owner)
}

// openOwner returns the id of the instance whose data directory is data
// (see ownerFile), making it at the first start. It is written whole to a
// temporary and linked to its name, which fails if another process made
// it meanwhile: processes starting at once on one data directory agree.
func openOwner(data string) (string, error) {
	p := filepath.Join(data, ownerFile)
	for range 2 {
		b, err := os.ReadFile(p)
		if err == nil {
			id := strings.TrimSuffix(string(b), "\n")
			if !ownerIDPattern.MatchString(id) {
				return "", fmt.Errorf("%s holds no instance id (16 hex digits): restore it from a backup, or remove it (this instance then never removes the uploads it stored before)", p)
			}
			return id, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("read this instance's id: %w", err)
		}
		if err := writeOwner(data, p); err != nil {
			return "", fmt.Errorf("make this instance's id in %s: %w", data, err)
		}
	}
	return "", fmt.Errorf("%s was removed as it was made: start again", p)
}

// writeOwner makes a new id at p, in data, unless p exists.
func writeOwner(data, p string) error {
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(data, ".instance-id-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	var b [8]byte
	rand.Read(b[:])
	_, err = f.WriteString(hex.EncodeToString(b[:]) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	err = os.Link(f.Name(), p)
	if errors.Is(err, fs.ErrExist) {
		return nil // made by another process: read it
	}
	if err != nil { // a filesystem without hard links
		err = os.Rename(f.Name(), p)
	}
	return err
}

// rateReader fails reads once the body has arrived more slowly than min
// bytes/s on average after a grace period, by moving the connection's read
// deadline as bytes arrive: a client that trickles an upload is dropped.
type rateReader struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	min   int64
	n     int64
	slow  bool // a read hit the deadline (parsers may report it otherwise)
}

func (r *rateReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	r.slow = r.slow || errors.Is(err, os.ErrDeadlineExceeded)
	r.rc.SetReadDeadline(r.start.Add(r.grace + time.Duration(float64(r.n)/float64(r.min)*float64(time.Second))))
	return n, err
}
