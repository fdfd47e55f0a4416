package model

import (
	"context"
	"io"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/parallel"
)

// This file is the contract, in one place: the Family, Model and Session
// every family implements, and every optional capability, grouped by what
// implements it (see the package doc for what a caller does without
// each).

// Family is one kind of model: how to recognise it, what it needs and what
// a request may set.
type Family interface {
	// Name is the family's name ("compact", "swiftvr").
	Name() string
	// Detect reports whether spec (a --model value: a name, a file or a
	// directory) is a model of this family. "" is the default model's
	// spec. No two families may detect the same spec: Find refuses it.
	Detect(spec string) bool
	// StorageType is the GPU storage type the family needs ("bf16"), or ""
	// for any.
	StorageType() string
	// Params are the per-request parameters, in the order help shows them.
	// A parameter another family has too (the same Name) has the same
	// Kind and Default; its Help is this family's own (see MergeParams).
	Params() []Param
	// About is what help and messages say of the family.
	About() About
	// Load reads the model at spec onto dev, to stay resident. p are the
	// parameters of the command or server that loads it: they may shape
	// what is loaded (SwiftVR's "dit") and are its sessions' defaults.
	Load(dev backend.Backend, spec string, p Params) (Model, error)
}

// About is what help and messages that list the families say of one.
type About struct {
	// Title is the family's name in prose ("SwiftVR", "CDA-VSR").
	Title string
	// Spec says what a --model value of the family is ("a SwiftVR
	// checkpoint directory"), for the --model help and Find's message.
	Spec string
	// Default names the model that spec "" stands for, where the family
	// detects "" ("bundled realesr-animevideov3"); "" for the others.
	Default string
	// Latency says what bounds a live stream's latency on the family's
	// models ("one chunk (28 frames, then 24) and 3 frames of lag"); ""
	// for models whose latency is the caller's batch.
	Latency string
}

// Model is a family's model resident on a device. Its methods may be
// called from several goroutines; requests never change it.
type Model interface {
	// Name names the model in messages and metadata.
	Name() string
	// Describe is the model's entry in the service's metadata.
	Describe() map[string]any
	// NewSession makes the state for one video with the request's
	// parameters. It refuses parameters that contradict the model.
	NewSession(ctx context.Context, v Video, p Params) (Session, error)
	// Close frees the model.
	Close()
}

// Engine is what the pipeline needs of a model to run one video: a
// Session is one.
type Engine interface {
	// OutputSize returns the output frame size for an input of w x h
	// (0, 0 if the input is too small for the model).
	OutputSize(w, h int) (int, int)
	// NewBatch allocates staging for up to n frames of w x h that come in
	// format in (RGB24 or RGB48) and whose results come out in format out.
	NewBatch(n, w, h int, in, out backend.PixelFormat) (backend.Batch, error)
	// Start begins processing the first k frames of b's input; it may
	// return before the work is done, and b.Wait blocks until it is.
	Start(ctx context.Context, b backend.Batch, k int) error
}

// Session runs one video: the pipeline's Engine, used by one goroutine
// at a time. Close frees its state.
type Session interface {
	Engine
	Close()
}

// Families' capabilities.

// HeaderLoader is implemented by families whose models can be opened
// without their weights (read from the checkpoint's headers): a model so
// opened names and describes itself and checks requests' parameters, but
// makes no session. A server that only queues tasks for workers on other
// machines (vsr serve --workers 0) opens them so; it loads the models of
// other families whole.
type HeaderLoader interface {
	LoadHeaders(spec string, p Params) (Model, error)
}

// Explainer is implemented by families that can say why spec, which no
// family detects, is not one of their models (a SwiftVR directory that
// lacks a file): Explain returns that error, or nil when spec is nothing
// like their models. Find returns the first such error; without one, it
// says what each family takes.
type Explainer interface {
	Explain(spec string) error
}

// Grouper is implemented by families whose models run one video on
// several devices at once (their models are Grouped) where Grouped
// returns true. A service then gives each task all its devices unless
// told otherwise; for other families, one device a task.
type Grouper interface {
	Grouped() bool
}

// Inspector is implemented by families that can check a checkpoint
// without loading its weights and list every problem with it (vsr
// checkpoint inspect). Inspects reports whether path, which exists, has
// the form of the family's checkpoints (a directory, a file), whatever it
// holds: the one family that says so inspects it, and two that say so
// are an error, so a family whose form another family shares must look
// at the contents (a header) too. InspectHelp says what
// Inspect checks, and InspectParams are its options besides the path
// (flags of the command, each Help naming the family). Inspect returns
// its report, problems and all, or an error when path is no checkpoint of
// the family at all (a PyTorch pickle where the family needs safetensors,
// a directory without the layout's files). vsr checkpoint inspect reads
// no checkpoint of a family without it.
type Inspector interface {
	Inspects(path string) bool
	InspectHelp() string
	InspectParams() []Param
	Inspect(path string, p Params) (*Inspection, error)
}

// Inspection is an Inspector's report on a checkpoint.
type Inspection struct {
	// Report is the report as data, for JSON.
	Report any
	// Text is the report as text, each line ending in "\n".
	Text string
	// Problems lists what is wrong with the checkpoint (none for one the
	// family loads).
	Problems []string
}

// Synther is implemented by families that can write a synthetic
// checkpoint in their published layout, with deterministic random
// weights, for tests and benchmarks (vsr checkpoint synth --family NAME).
// SynthHelp says what Synth writes, and SynthParams are its options
// besides the output path and the seed (flags of the command, each Help
// naming the family). Synth writes the checkpoint to out, then a line
// saying what it wrote to w. A family without it has no synthetic
// checkpoints: synth's --family does not take it.
type Synther interface {
	SynthHelp() string
	SynthParams() []Param
	Synth(w io.Writer, out string, seed uint64, p Params) error
}

// IsGrouped reports whether f's models run one video on several devices
// at once (f is a Grouper that says so).
func IsGrouped(f Family) bool {
	g, ok := f.(Grouper)
	return ok && g.Grouped()
}

// Models' capabilities.

// Sizer is implemented by models that can tell, without making a
// session, the size of the largest frames a session for v with p would
// hold: its output, or the model's own output where that is then resized
// down to a requested size. Only v's Width and Height are read. The error
// is the one NewSession would give for p on v. A service checks requests
// against its pixel budget with it before any memory is allocated for
// them; for a model without it, only a requested size is checked.
type Sizer interface {
	FrameSize(v Video, p Params) (w, h int, err error)
}

// Checker is implemented by models that can check a request's parameters
// without making a session: Check returns the error NewSession would
// give for them, before the input is read. A service checks requests so
// when they are submitted; for a model without it, a request's
// parameters are checked when its session is made (the task fails then).
type Checker interface {
	Check(p Params) error
}

// Resolver is implemented by models that answer to names besides their
// Name, each implying parameter values (realesr-animevideov3-x3: scale
// 3): Resolve returns the values name implies, and whether the model
// answers to it. A request names a model without it by its Name only.
type Resolver interface {
	Resolve(name string) (Values, bool)
}

// Preloader is implemented by models that load parts of themselves at
// first use (the bundled model's other scales): Preload loads them now.
// A model without it is whole once loaded.
type Preloader interface {
	Preload() error
}

// Warmer is implemented by models that can run a synthetic request at an
// output size, so that the first real one does not compile kernels or
// choose algorithms (SwiftVR). Without it, the first real request does
// that work.
type Warmer interface {
	Warmup(ctx context.Context, w, h int, f backend.PixelFormat, p Params) error
}

// Grouped is implemented by models that run one video on several devices
// at once (SwiftVR's chunk parallelism), where other models only spread
// independent segments over devices: others are the same model loaded on
// the group's other devices, and the session drives them all. The family
// says so as a Grouper.
type Grouped interface {
	NewGroupSession(ctx context.Context, v Video, p Params, others []Model) (Session, error)
}

// Sessions' capabilities.

// Planner is implemented by engines that take frames in batches of their
// own sizes (a model that streams causally in chunks): Plan returns the
// input frames of each batch of a video of total frames. Such an engine
// runs as one segment, and its batches may hold a different number of
// output frames than input frames (see OutCounter). The pipeline chooses
// the batches of an engine without it, and may cut the video into
// independent segments.
type Planner interface {
	Plan(total int) ([]int, error)
}

// Streamer is implemented by engines that plan their own batches (a
// Planner) and can also run a stream whose length is not known:
// LiveBatch(i) is the input frames of batch i while the stream goes on;
// End(total) says the stream ended after total frames, before the Start of
// the batch that holds its last frames. That batch may hold none: flush
// says whether it must run all the same (an engine that still owes
// frames, as SwiftVR its decoder's lag). A Planner without it cannot
// restore a live stream; an engine that is no Planner streams in the
// caller's batches.
type Streamer interface {
	LiveBatch(i int) int
	End(total int) (flush bool, err error)
}

// Resumer is implemented by Planners (sessions that carry causal or
// recurrent state from batch to batch) that can save that state after some
// batches of their plan, so that a run stopped there resumes in a new
// session and gives the output of a run never stopped, bit for bit (issue
// 38). A Planner without it cannot resume: a run stopped anywhere starts
// again from frame 0.
//
// Checkpoint reports whether the state after batch i of Plan(total) (0 is
// the first batch) can be saved, and out, the number of output frames that
// batches 0..i give together (which may differ from their input frames;
// see OutCounter). It depends on total, i and the session's parameters
// only, so a new session for the same video answers the same.
//
// SaveState writes the state after the batches started so far. The caller
// calls it after Start of a batch i for which Checkpoint said yes and
// before the next Start; it waits for that batch's work as far as it
// needs. The state holds whatever the batches after i need (history,
// carried frames, output held back by a lag, counters), and nothing that
// batches 0..i have already output.
//
// LoadState restores a state that SaveState wrote, into a new session for
// the same model, video and parameters, before its first Start: the next
// Start takes batch i+1 of the same plan (the caller decodes from the
// input frame after batch i). The state is opaque to the caller, read back
// only by the same build of the same model (the journal's model hash
// covers both); LoadState refuses a state it cannot read, or one of a
// session of another shape, with an error, and leaves the session new: the
// caller then sets the journal aside and starts from the first batch.
type Resumer interface {
	Checkpoint(total, i int) (out int, ok bool)
	SaveState(w io.Writer) error
	LoadState(r io.Reader) error
}

// Warner is implemented by sessions that have something to say about the
// settings they were given (the run goes on).
type Warner interface {
	Warnings() []string
}

// Exchanger is implemented by sessions over several devices: Exchanged
// returns the statistics of the data they exchanged, per device, for
// benchmarks. A session without it exchanges nothing.
type Exchanger interface {
	Exchanged() []parallel.Stats
}

// Batches' capabilities (of the backend.Batch an Engine's NewBatch makes).

// OutCounter is implemented by batches whose output frame count is not
// their input frame count. A batch without it outputs as many frames as
// it was given.
type OutCounter interface {
	OutFrames() int
}

// FrameOuter is implemented by batches whose output frames are not one
// buffer (a wave of chunks on several devices): OutFrame returns output
// frame k, valid after Wait. For a batch without it, output frame k is
// the k-th frame of its Out.
type FrameOuter interface {
	OutFrame(k int) []byte
}
