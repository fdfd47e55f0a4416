package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"maps"
	"slices"
	"time"

	"github.com/vsr-dev/vsr/video"
)

// Status is a task's state, as LightX2V names them.
type Status string

const (
	Pending    Status = "pending"
	Processing Status = "processing"
	Completed  Status = "completed"
	Failed     Status = "failed"
	Cancelled  Status = "cancelled"
)

// Statuses lists every status (for metrics).
var Statuses = []Status{Pending, Processing, Completed, Failed, Cancelled}

// Final reports whether s is a terminal status.
func (s Status) Final() bool { return s == Completed || s == Failed || s == Cancelled }

// Request is the body of POST /v1/tasks/video/: LightX2V's fields for
// video super-resolution (video_path, sr_ratio, target_shape,
// save_result_path, task_id) and vsr's own optional ones. Zero values mean
// "the default".
//
// The fields tagged `vsr:"param"` are model parameters (a family's
// parameter of that field name: model.Param's FieldName): given in Params
// they are moved into their field (CheckRequest), and the runner takes
// them with Params as the model's (ModelFields). The others are the
// request's own.
type Request struct {
	TaskID    string  `json:"task_id,omitempty"`
	VideoPath string  `json:"video_path"`
	SRRatio   float64 `json:"sr_ratio,omitempty" vsr:"param"`
	// TargetShape is LightX2V's output size, [height, width]; Size is the
	// same field as the SwiftVR fork of LightX2V names it. The service
	// merges them into Size.
	TargetShape    []int  `json:"target_shape,omitempty" vsr:"param"`
	Size           []int  `json:"size,omitempty" vsr:"param"` // [height, width]
	SaveResultPath string `json:"save_result_path,omitempty"`
	// Overwrite lets the task replace an existing file at its
	// save_result_path.
	Overwrite bool   `json:"overwrite,omitempty"`
	Model     string `json:"model,omitempty"`
	Codec     string `json:"codec,omitempty"`
	CRF       *int   `json:"crf,omitempty"`
	Preset    string `json:"preset,omitempty"`
	PixFmt    string `json:"pix_fmt,omitempty"`
	ClipLen   int    `json:"clip_len,omitempty" vsr:"param"`
	DiT       string `json:"dit,omitempty" vsr:"param"` // SwiftVR: "on" (default) or "off" (autoencoder only)
	MaxFrames int    `json:"max_frames,omitempty"`
	Tile      int    `json:"tile,omitempty" vsr:"param"`
	Batch     int    `json:"batch,omitempty"`
	Segments  int    `json:"segments,omitempty"`
	// Deinterlace is vsr restore's --deinterlace: auto (the default),
	// bwdif, yadif, double or off.
	Deinterlace string `json:"deinterlace,omitempty"`
	// NoSubtitles and NoMetadata are vsr restore's --no-subtitles and
	// --no-metadata: leave the input's subtitles and attachments, or its
	// tags, chapters and timecode, out of the output.
	NoSubtitles bool `json:"no_subtitles,omitempty"`
	NoMetadata  bool `json:"no_metadata,omitempty"`
	// Params sets model parameters by request field name, for those
	// without a field of their own here (a family's newer parameters):
	// {"reae_frame_batch": 0}.
	Params map[string]any `json:"params,omitempty"`
}

// Task is one request and its state, as stored.
type Task struct {
	ID      string  `json:"task_id"`
	Seq     uint64  `json:"seq"`
	Status  Status  `json:"status"`
	Request Request `json:"request"`
	// Input and Output are the resolved absolute paths the runner uses.
	Input  string `json:"video_path"`
	Output string `json:"save_result_path"`
	// Worker names the worker process that runs or ran the task (workers
	// on other machines; see Config.Name).
	Worker string `json:"worker,omitempty"`
	// ModelName is the served model the task runs on, as the runner
	// names it (ModelNamer).
	ModelName string `json:"model_name,omitempty"`
	// ModelHash is the content hash of that model's files where the API
	// accepted the task (ModelHasher): a worker whose model differs
	// refuses the task.
	ModelHash string `json:"model_hash,omitempty"`
	// InputRel and OutputRel are Input and Output relative to the input
	// and output roots: a worker on another machine finds them under its
	// own roots.
	InputRel  string `json:"input_rel,omitempty"`
	OutputRel string `json:"output_rel,omitempty"`
	// Files keeps the task's upload and result in the NATS object store
	// (NATS.Files); Result names the result's object once it is there.
	Files  bool   `json:"files,omitempty"`
	Result string `json:"result_object,omitempty"`
	// Upload is set when Input is a file uploaded for this task.
	Upload bool `json:"upload,omitempty"`
	// Signer and Signature are the hex public key of the API that
	// accepted the task (for workers on other machines) and its signature
	// of the fields that never change after submit (see seal.go).
	Signer    string `json:"signer,omitempty"`
	Signature []byte `json:"signature,omitempty"`
	// Rerun is set when a run of the task was interrupted (a crash or a
	// shutdown): that run may have written the output (see Wrote).
	Rerun bool `json:"rerun,omitempty"`
	// Wrote identifies the results this task's runs put at Output (see
	// placeResult): a run after a crash replaces only these.
	Wrote []FileID `json:"wrote,omitempty"`
	// Replace tells the runner that the output may replace an existing
	// file; otherwise it must fail rather than replace one. Set on the
	// runner's copy only.
	Replace bool `json:"-"`
	// Resume asks the runner to keep a journal of its run beside Output,
	// in pipeline.JournalDir(Output), and to resume from the one an
	// interrupted run of the task left there (pipeline.Resume): on
	// success the runner sets ResumedFrom. A runner that resumes calls
	// Resumed, if set, with the frame it resumes at before it reports
	// progress, and Notice with each line it says of the journal (set
	// aside and why, where it resumes). The service removes the journal
	// once the task is over (see journal.go). Set on the runner's copy
	// only.
	Resume  bool              `json:"-"`
	Resumed func(frame int)   `json:"-"`
	Notice  func(line string) `json:"-"`

	FramesDone  int `json:"frames_done"`
	FramesTotal int `json:"frames_total"`

	Created time.Time  `json:"create_time"`
	Started *time.Time `json:"start_time"`
	Ended   *time.Time `json:"end_time"`
	Error   string     `json:"error"`
	// ErrorType classifies a failure (see docs/API.md); "" otherwise.
	ErrorType string `json:"error_type,omitempty"`
	// Attempts counts the runs started (a task interrupted by a crash runs
	// again at restart).
	Attempts int `json:"attempts"`
	// HandedBack counts the deliveries to workers that stopped gracefully
	// and handed the task back: they do not count as attempts.
	HandedBack int `json:"handed_back,omitempty"`
	// ResumedFrom is the frame the last run resumed at: the frames before
	// it were restored by an interrupted run and kept in the journal
	// beside the output (0: from the start). ResumeNote is the last word
	// of that run on the journal: where it resumed, why it set a journal
	// aside, or that it found none although an earlier run was
	// interrupted.
	ResumedFrom int    `json:"resumed_from_frame,omitempty"`
	ResumeNote  string `json:"resume_note,omitempty"`

	// Filled in by the runner on success.
	Width  int     `json:"width,omitempty"`
	Height int     `json:"height,omitempty"`
	FPS    float64 `json:"fps,omitempty"`
	// Devices names the devices the task ran on ("cuda:0,cuda:1"), filled
	// in by the runner.
	Devices string `json:"devices,omitempty"`
	// Carried and Dropped say what the output carries of the input besides
	// the picture, and what it drops and why (video.Carried), filled in by
	// the runner.
	Carried []string     `json:"carried,omitempty"`
	Dropped []video.Drop `json:"dropped,omitempty"`

	cancel      context.CancelFunc // running task only
	cancelAsked bool
	lost        bool          // a worker's task whose lease it lost (see heartbeat)
	unsaved     bool          // its last record write failed (not refused): release writes it again
	done        chan struct{} // closed when the running task has stopped
	msg         Work          // a worker's task: its delivery from the work queue
	unsub       func()        // and the end of its cancel subscription
	in, out     string        // a worker's task: its paths under the worker's roots (see localPaths)
	retryIn     time.Duration // a worker's task handed back for its output's lock (handBack): its delay
}

// newID returns a random task id (UUID v4 form, as LightX2V's).
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// reservedIDs are the task ids that an endpoint's path would shadow
// (GET /v1/tasks/queue/status is the queue's).
var reservedIDs = map[string]bool{"queue": true}

// validID reports whether a client-chosen task id is acceptable: 1 to 64
// name characters, not starting with '.', and not a reserved id.
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 || reservedIDs[id] {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return id[0] != '.'
}

// clone returns a copy of t without its runtime fields.
func (t *Task) clone() *Task {
	c := *t
	c.cancel, c.done, c.msg, c.unsub = nil, nil, nil, nil
	c.Resumed, c.Notice = nil, nil
	c.Request.Size = slices.Clone(t.Request.Size)
	c.Wrote = slices.Clone(t.Wrote)
	c.Carried, c.Dropped = slices.Clone(t.Carried), slices.Clone(t.Dropped)
	c.Signature = slices.Clone(t.Signature)
	c.Request.TargetShape = slices.Clone(t.Request.TargetShape)
	c.Request.Params = maps.Clone(t.Request.Params)
	if t.Request.CRF != nil {
		v := *t.Request.CRF
		c.Request.CRF = &v
	}
	return &c
}
