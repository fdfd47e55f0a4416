package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

// Loaded is a model resident on a device, kept for any number of jobs.
type Loaded struct {
	Dev    backend.Backend
	Family model.Family
	Model  model.Model
	// Spec is the model as it was named (a bundled name, a file, a
	// directory).
	Spec string
	// Ranks are the same model on more devices (see LoadRanks): a job's
	// independent segments spread over Dev and these.
	Ranks []*Loaded

	hashMu sync.Mutex
	hash   string // of Spec's files (specHash), once known
}

// modelHash hashes the model's files at the first resumable job and keeps
// the hash; a failure is not kept (the next job tries again). A spec with
// no files (a test's stand-in) has no hash: its jobs are not resumable (ok
// false, no error).
func (l *Loaded) modelHash() (h string, ok bool, err error) {
	l.hashMu.Lock()
	defer l.hashMu.Unlock()
	if l.hash == "" {
		h, err := specHash(l.Spec)
		if errors.Is(err, fs.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		l.hash = h
	}
	return l.hash, true, nil
}

// Load finds the family of spec and loads it onto dev. set are the
// parameters the loader set (its flags), defaults those it changes from
// the family's (a server's); a parameter the family does not have is
// refused with a message naming the family it belongs to.
func Load(dev backend.Backend, spec string, set, defaults model.Values) (*Loaded, error) {
	f, err := model.Find(spec)
	if err != nil {
		return nil, err
	}
	if err := foreign(f, set); err != nil {
		return nil, err
	}
	m, err := f.Load(dev, spec, model.Params{Set: set, Default: mergedDefaults(f, defaults)})
	if err != nil {
		return nil, err
	}
	return &Loaded{Dev: dev, Family: f, Model: m, Spec: spec}, nil
}

// mergedDefaults are f's parameter defaults with those of defaults over
// them.
func mergedDefaults(f model.Family, defaults model.Values) model.Values {
	def := model.Defaults(f.Params())
	maps.Copy(def, defaults)
	return def
}

// Close frees the model (not the device, which other models may share).
func (l *Loaded) Close() {
	for _, r := range l.Ranks {
		r.Close()
	}
	l.Model.Close()
}

// All is l and its ranks, in rank order.
func (l *Loaded) All() []*Loaded { return append([]*Loaded{l}, l.Ranks...) }

// Devices names the devices of l and its ranks ("cuda:0,cuda:1").
func (l *Loaded) Devices() string {
	var names []string
	for _, r := range l.All() {
		names = append(names, r.Dev.Name())
	}
	return strings.Join(names, ",")
}

// LoadRanks is Load on each of devs, the first device's model holding the
// others' as Ranks.
func LoadRanks(devs []backend.Backend, spec string, set, defaults model.Values) (*Loaded, error) {
	l, err := Load(devs[0], spec, set, defaults)
	if err != nil {
		return nil, err
	}
	for _, d := range devs[1:] {
		r, err := Load(d, spec, set, defaults)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("device %s: %w", d.Name(), err)
		}
		l.Ranks = append(l.Ranks, r)
	}
	return l, nil
}

// foreign refuses the parameters (flags) of set that f does not have,
// naming the families they belong to.
func foreign(f model.Family, set model.Values) error {
	own := map[string]bool{}
	var names []string
	for _, p := range f.Params() {
		own[p.Name] = true
		names = append(names, "--"+p.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(set)) {
		if own[k] {
			continue
		}
		if o := model.ParamOwners(k, f); len(o) > 0 {
			return fmt.Errorf("--%s applies to %s models, not to this %s model (its parameters: %s)", k, strings.Join(o, ", "), f.Name(), strings.Join(names, ", "))
		}
		return fmt.Errorf("--%s is not a parameter of %s models (its parameters: %s)", k, f.Name(), strings.Join(names, ", "))
	}
	return nil
}

// Session makes the model's session for a video (info, of which total
// frames are restored) with the parameters set: on all of l's devices at
// once when the model runs one video on several (model.Grouped), else on
// l's own device.
func (l *Loaded) Session(ctx context.Context, info *video.Info, total int, set model.Values) (model.Session, error) {
	if err := foreign(l.Family, set); err != nil {
		return nil, err
	}
	v := model.Video{Width: info.Width, Height: info.Height, Frames: total, Keys: info.Keys}
	p := model.Params{Set: set, Default: model.Defaults(l.Family.Params())}
	if g, ok := l.Model.(model.Grouped); ok && len(l.Ranks) > 0 {
		others := make([]model.Model, len(l.Ranks))
		for i, r := range l.Ranks {
			others[i] = r.Model
		}
		return g.NewGroupSession(ctx, v, p, others)
	}
	return l.Model.NewSession(ctx, v, p)
}

// Sessions makes a job's engines: the model's session (on all of l's
// devices at once for a model that runs one video on several) and, for a
// model whose segments are independent, one more per other rank, for
// pipeline.Request.More; done closes them all. On an error nothing is
// left open.
func (l *Loaded) Sessions(ctx context.Context, info *video.Info, total int, set model.Values) (s model.Session, more []pipeline.Engine, done func(), err error) {
	if s, err = l.Session(ctx, info, total, set); err != nil {
		return nil, nil, nil, err
	}
	opened := []model.Session{s}
	done = func() {
		for _, o := range opened {
			o.Close()
		}
	}
	if _, causal := s.(model.Planner); !causal {
		for _, r := range l.Ranks {
			rs, err := r.Session(ctx, info, total, set)
			if err != nil {
				done()
				return nil, nil, nil, fmt.Errorf("device %s: %w", r.Dev.Name(), err)
			}
			opened = append(opened, rs)
			more = append(more, rs)
		}
	}
	return s, more, done, nil
}

// FrameSize is the size of the largest frames a session of l for a
// w x h video with the parameters set would hold (model.Sizer); 0, 0
// when the model cannot say.
func (l *Loaded) FrameSize(w, h int, set model.Values) (int, int, error) {
	sz, ok := l.Model.(model.Sizer)
	if !ok {
		return 0, 0, nil
	}
	return sz.FrameSize(model.Video{Width: w, Height: h}, model.Params{Set: set, Default: model.Defaults(l.Family.Params())})
}

// Job is one restore: a video in, a video out, on a Loaded model.
type Job struct {
	Input, Output string
	// Info is the input's probe (Run probes when it is nil).
	Info *video.Info
	// Params are the model parameters the job sets.
	Params model.Values
	// MaxFrames restores only the first frames (0 = all); Batch and
	// Segments are the pipeline's (0 = automatic, see BatchSize and
	// SegmentCount).
	MaxFrames, Batch, Segments int
	Encode                     video.EncodeOptions
	// Progress, if set, is called with the frames done so far.
	Progress func(done, total int)
	// Warn, if set, is told what the model's session warns about, and
	// what an image's output cannot keep (see PrepareImage).
	Warn func(string)
	// CFR spaces a variable-frame-rate input's frames evenly over its
	// duration instead of keeping their times (pipeline.Request.CFR).
	CFR bool
	// Deinterlace, if set, deinterlaces an interlaced input so (see
	// video.Info.Deinterlaced), telling Warn what was done; "" leaves
	// Info as it is (a caller that deinterlaced it already).
	Deinterlace video.Deinterlace
	// Resume, if set, makes the job resumable (pipeline.Request.Resume)
	// where the session can resume (see resumable); Run fills in its model
	// hash and the settings that change the output (the model, its
	// parameters, the batch size and the device; for a model that runs a
	// video on several devices at once, how many).
	Resume *pipeline.Resume
	// CheckpointEvery is the seconds of video per part of a resumable job
	// (pipeline.Request.CheckpointEvery; 0: the default).
	CheckpointEvery float64
	// prepared is set when Info and Encode are already an image's
	// PrepareImage (RunImages): Run does not prepare them again.
	prepared bool
}

// Run restores job on l: a session of the model for the video, then the
// pipeline.
func (l *Loaded) Run(ctx context.Context, job Job) (*pipeline.Result, error) {
	info := job.Info
	if info == nil {
		var err error
		if info, err = video.Probe(ctx, job.Input); err != nil {
			return nil, err
		}
	}
	if job.Deinterlace != "" {
		var note string
		if info, note = info.Deinterlaced(job.Deinterlace); note != "" && job.Warn != nil {
			job.Warn(note)
		}
	}
	total := info.Frames
	if job.MaxFrames > 0 && job.MaxFrames < total {
		total = job.MaxFrames
	}
	segments := job.Segments
	enc := job.Encode
	if image := IsImage(filepath.Ext(job.Output)); image || isImageInput(info) {
		if image && total != 1 {
			return nil, model.Named("frames", "max_frames", func(n string) string {
				return fmt.Sprintf("%s has %d frames, but %s is an image: give a video extension (.mp4, .mkv), or restore the first frame only (%s 1)", job.Input, info.Frames, job.Output, n)
			})
		}
		if image {
			segments = 1
		}
		if !job.prepared {
			if image {
				enc = deepImage(filepath.Ext(job.Output), enc, info)
			}
			var notes []string
			var err error
			if info, enc, notes, err = PrepareImage(ctx, info, filepath.Ext(job.Output), enc); err != nil {
				return nil, err
			}
			for _, n := range notes {
				if job.Warn != nil {
					job.Warn(n)
				}
			}
		}
	}
	s, more, done, err := l.Sessions(ctx, info, total, job.Params)
	if err != nil {
		return nil, err
	}
	defer done()
	if w, ok := s.(model.Warner); ok && job.Warn != nil {
		for _, m := range w.Warnings() {
			job.Warn(m)
		}
	}
	batch := BatchSize(job.Batch, l.Dev)
	nseg := max(SegmentCount(segments, l.Dev, s), len(more)+1) // a segment for each device at least
	var resume *pipeline.Resume
	var hash string
	hashed := false
	if resumable(s) && job.Resume != nil { // where the pipeline keeps a journal: hash the model only then
		if hash, hashed, err = l.modelHash(); err != nil {
			return nil, err
		}
	}
	if hashed {
		r := *job.Resume
		r.Model = hash
		params, err := json.Marshal(job.Params)
		if err != nil {
			return nil, err
		}
		device := l.Dev.Name() // its kind and storage type change the bits, not which one of a kind
		if g, ok := l.Dev.(backend.GPU); ok {
			device = g.DeviceName() + " " + g.StorageType()
		}
		r.Settings = map[string]string{"model": l.Model.Name(), "params": string(params), "batch": strconv.Itoa(batch), "device": device}
		if _, grouped := l.Model.(model.Grouped); grouped {
			// The devices of one video's session make its batches and
			// the layout of its state.
			r.Settings["devices"] = strconv.Itoa(len(l.All()))
		}
		for k, v := range job.Resume.Settings {
			r.Settings[k] = v
		}
		resume = &r
	}
	return pipeline.Restore(ctx, pipeline.Request{
		Input:           job.Input,
		Output:          job.Output,
		Engine:          s,
		Batch:           batch,
		Segments:        nseg,
		MaxFrames:       job.MaxFrames,
		Info:            info,
		Encode:          enc,
		Progress:        job.Progress,
		CFR:             job.CFR,
		More:            more,
		Resume:          resume,
		CheckpointEvery: job.CheckpointEvery,
	})
}

// resumable reports whether a run of s can resume: s has no causal state
// (no model.Planner), or can save and load it (a model.Resumer).
func resumable(s model.Session) bool {
	_, causal := s.(model.Planner)
	_, resumer := s.(model.Resumer)
	return !causal || resumer
}

// oneDevice refuses a model that runs each video on several devices at
// once: a live stream runs on one.
func (l *Loaded) oneDevice() error {
	if _, ok := l.Model.(model.Grouped); ok && len(l.Ranks) > 0 {
		return fmt.Errorf("model %s runs each video on %d devices at once, and a live stream runs on one: give one device", l.Model.Name(), len(l.Ranks)+1)
	}
	return nil
}

// Live restores a live stream on l's device: req's Open is made here, a
// session of the model for each connection of the source (its length not
// known: model.Video.Frames 0) with the parameters set. A model that runs
// one video on several devices at once is refused: a live stream runs on
// one.
func (l *Loaded) Live(ctx context.Context, req pipeline.LiveRequest, set model.Values) (*pipeline.LiveStats, error) {
	if err := foreign(l.Family, set); err != nil {
		return nil, err
	}
	if err := l.oneDevice(); err != nil {
		return nil, err
	}
	req.Open = func(w, h int) (pipeline.Engine, func(), error) {
		v := model.Video{Width: w, Height: h}
		s, err := l.Model.NewSession(ctx, v, model.Params{Set: set, Default: model.Defaults(l.Family.Params())})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	}
	if req.Batch == 0 {
		req.Batch = 1
	}
	return pipeline.Live(ctx, req)
}
