package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/serve"
	"github.com/vsr-dev/vsr/video"
)

// Runner runs the HTTP service's tasks on resident models: a
// serve.Runner (with its Validator, MemoryReporter and Metadataer). Its
// devices form groups of RanksPerTask; each group holds every served model
// and runs one task at a time (on all its devices at once), so as many
// tasks run at once as there are groups (Workers).
type Runner struct {
	devs   []backend.Backend
	groups [][]*Loaded // each group's models, in the order of the specs
	models []*Loaded   // the first group's: the default first
	free   chan int    // the groups without a task
	base   Job         // the server's encoder, batch and segment defaults
}

// Served configures NewRunner.
type Served struct {
	// Specs are the models to serve (a bundled name, an ncnn .param, a
	// SwiftVR directory); the first is the default. None: the default
	// model.
	Specs []string
	// Defaults are the server's values of model parameters, by name: the
	// defaults of requests that do not set them. Each model takes those of
	// its family.
	Defaults model.Values
	// FieldDefaults are defaults by request field for the parameters whose
	// value Defaults does not give (LightX2V's sr_ratio 2).
	FieldDefaults map[string]any
	// Base holds the encoder settings, Batch and Segments of requests
	// that do not set them.
	Base Job
	// RanksPerTask is how many devices run each task (they must divide
	// the devices); 0 chooses: all of them when a served model runs one
	// video on several devices (SwiftVR), else one device per task.
	RanksPerTask int
	// HeadersOnly opens the models of families that can (a
	// model.HeaderLoader: SwiftVR) without their weights, on the first
	// device only: the Runner then validates requests and runs nothing
	// (vsr serve --workers 0, whose tasks run on workers).
	HeadersOnly bool
}

// NewRunner loads the models of cfg onto each group of devs. The
// Runner owns devs and the models; Close frees them.
func NewRunner(devs []backend.Backend, cfg Served) (*Runner, error) {
	s := &Runner{devs: devs, base: cfg.Base}
	specs := cfg.Specs
	if len(specs) == 0 {
		specs = []string{""}
	}
	k := cfg.RanksPerTask
	for _, spec := range specs {
		if f, err := model.Find(spec); err == nil && k == 0 && model.IsGrouped(f) {
			k = len(devs)
		}
	}
	k = max(k, 1)
	if k > len(devs) || len(devs)%k != 0 {
		s.Close()
		return nil, fmt.Errorf("--ranks-per-task %d: it must divide the %d device(s)", k, len(devs))
	}
	for g := 0; g < len(devs); g += k {
		models, err := loadGroup(devs[g:g+k], specs, cfg)
		s.groups = append(s.groups, models)
		if err != nil {
			s.Close()
			return nil, err
		}
	}
	s.models = s.groups[0]
	s.free = make(chan int, len(s.groups))
	for g := range s.groups {
		s.free <- g
	}
	return s, nil
}

// loadGroup loads the models of specs onto the devices of one group.
func loadGroup(devs []backend.Backend, specs []string, cfg Served) ([]*Loaded, error) {
	var models []*Loaded
	for _, spec := range specs {
		f, err := model.Find(spec)
		if err != nil {
			return models, err
		}
		def := model.Values{}
		for _, p := range f.Params() {
			if v, ok := cfg.Defaults[p.Name]; ok {
				def[p.Name] = v
			} else if v, ok := cfg.FieldDefaults[p.FieldName()]; ok {
				if def[p.Name], err = convert(p, v); err != nil {
					return models, err
				}
			}
		}
		var l *Loaded
		if hl, ok := f.(model.HeaderLoader); ok && cfg.HeadersOnly {
			var m model.Model
			if m, err = hl.LoadHeaders(spec, model.Params{Default: mergedDefaults(f, def)}); err == nil {
				l = &Loaded{Dev: devs[0], Family: f, Model: m, Spec: spec}
			}
		} else {
			l, err = LoadRanks(devs, spec, nil, def)
		}
		if err != nil {
			return models, fmt.Errorf("--model %s: %w", spec, err)
		}
		for _, o := range models {
			if o.Model.Name() == l.Model.Name() {
				l.Close()
				return models, fmt.Errorf("--model %s: a model named %s is already served", spec, l.Model.Name())
			}
		}
		models = append(models, l)
	}
	return models, nil
}

// Models returns the served models of the first group, the default first.
func (s *Runner) Models() []*Loaded { return s.models }

var _ serve.ModelNamer = (*Runner)(nil)

// ModelOf names the served model request q runs on (the first when it
// names none): workers on other machines take the tasks of the models
// they serve (serve.ModelNamer).
func (s *Runner) ModelOf(q *serve.Request) (string, error) {
	l, _, err := s.find(q.Model)
	if err != nil {
		return "", err
	}
	return l.Model.Name(), nil
}

// ModelNames names the served models.
func (s *Runner) ModelNames() []string {
	var out []string
	for _, l := range s.models {
		out = append(out, l.Model.Name())
	}
	return out
}

// Devices names the devices of each group ("cuda:0,cuda:1 cuda:2,cuda:3").
func (s *Runner) Devices() string {
	var gs []string
	for _, g := range s.groups {
		gs = append(gs, g[0].Devices())
	}
	return strings.Join(gs, " ")
}

// Workers is how many tasks run at once: one per group of devices.
func (s *Runner) Workers() int { return len(s.groups) }

// Preload loads now what the models would load at first use (the bundled
// model's other scales).
func (s *Runner) Preload() error {
	for _, l := range s.loaded() {
		if p, ok := l.Model.(model.Preloader); ok {
			if err := p.Preload(); err != nil {
				return err
			}
		}
	}
	return nil
}

// loaded lists every resident model: each group's, on each of its devices.
func (s *Runner) loaded() []*Loaded {
	var all []*Loaded
	for _, g := range s.groups {
		for _, l := range g {
			all = append(all, l.All()...)
		}
	}
	return all
}

// Warmup runs a synthetic request at output size w x h through each model
// that can, on every device, on a locked thread as the pipeline drives a
// device.
func (s *Runner) Warmup(ctx context.Context, w, h int, f backend.PixelFormat) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, l := range s.loaded() {
		if wm, ok := l.Model.(model.Warmer); ok {
			if err := wm.Warmup(ctx, w, h, f, model.Params{Default: model.Defaults(l.Family.Params())}); err != nil {
				return fmt.Errorf("device %s: %w", l.Dev.Name(), err)
			}
		}
	}
	return nil
}

// find returns the model a request names ("" = the default) and the
// parameters the name implies (realesr-animevideov3-x3: scale 3).
func (s *Runner) find(name string) (*Loaded, model.Values, error) {
	if name == "" {
		return s.models[0], nil, nil
	}
	for _, l := range s.models {
		if l.Model.Name() == name {
			return l, nil, nil
		}
	}
	for _, l := range s.models {
		if r, ok := l.Model.(model.Resolver); ok {
			if v, ok := r.Resolve(name); ok {
				return l, v, nil
			}
		}
	}
	var names []string
	for _, l := range s.models {
		names = append(names, l.Model.Name())
	}
	return nil, nil, fmt.Errorf("field \"model\": %q is not served (served: %s)", name, strings.Join(names, ", "))
}

// values turns a request's model parameters (serve.Request's
// ModelFields: its model-parameter fields and its params object) into l's
// parameter values, refusing those of other families.
// The request is checked first as the HTTP layer checks it
// (serve.CheckRequest), whichever way it came (a stored task, a live
// session's params).
func (s *Runner) values(q *serve.Request) (*Loaded, model.Values, error) {
	c := *q
	c.Params = maps.Clone(q.Params)
	if err := serve.CheckRequest(&c); err != nil {
		return nil, nil, err
	}
	q = &c
	l, named, err := s.find(q.Model)
	if err != nil {
		return nil, nil, err
	}
	fields := q.ModelFields()
	byField := map[string]model.Param{}
	for _, p := range l.Family.Params() {
		byField[p.FieldName()] = p
	}
	set := model.Values{}
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		p, ok := byField[k]
		if !ok {
			return nil, nil, foreignField(l.Family, k)
		}
		if p.Local {
			return nil, nil, fmt.Errorf("field %q names a path on the server; the service does not take it (it is the command line's --%s)", k, p.Name)
		}
		if set[p.Name], err = convert(p, fields[k]); err != nil {
			return nil, nil, err
		}
	}
	for k, v := range named {
		if w, ok := set[k]; ok && w != v {
			return nil, nil, fmt.Errorf("field %q: %v, but model %s is %v", byFieldName(l.Family, k), w, q.Model, v)
		}
		set[k] = v
	}
	return l, set, nil
}

// foreignField refuses request field k, which f's models do not take,
// naming the families whose models do.
func foreignField(f model.Family, k string) error {
	var owners, own []string
	for _, o := range model.Families() {
		for _, p := range o.Params() {
			switch {
			case o == f:
				own = append(own, p.FieldName())
			case p.FieldName() == k && !slices.Contains(owners, o.Name()):
				owners = append(owners, o.Name())
			}
		}
	}
	if len(owners) > 0 {
		return fmt.Errorf("field %q applies to %s models, not to this %s model (its fields: %s)", k, strings.Join(owners, ", "), f.Name(), strings.Join(own, ", "))
	}
	return fmt.Errorf("field %q is not a parameter of %s models (its fields: %s)", k, f.Name(), strings.Join(own, ", "))
}

func byFieldName(f model.Family, name string) string {
	for _, p := range f.Params() {
		if p.Name == name {
			return p.FieldName()
		}
	}
	return name
}

// convert turns a decoded JSON value into p's Go type.
func convert(p model.Param, v any) (any, error) {
	bad := func(want string) error {
		return fmt.Errorf("field %q: %s: want %s", p.FieldName(), jsonText(v), want)
	}
	switch p.Kind {
	case model.Int:
		x, ok := v.(float64)
		if !ok || x != math.Trunc(x) || math.Abs(x) > 1<<30 {
			return nil, bad("a whole number")
		}
		return int(x), nil
	case model.Float:
		x, ok := v.(float64)
		if !ok {
			return nil, bad("a number")
		}
		return x, nil
	case model.String:
		x, ok := v.(string)
		if !ok {
			return nil, bad("a string")
		}
		return x, nil
	case model.Shape:
		a, ok := v.([]any)
		if !ok || len(a) != 2 {
			return nil, bad("[height, width]")
		}
		h, ok1 := a[0].(float64)
		w, ok2 := a[1].(float64)
		if !ok1 || !ok2 || h <= 0 || w <= 0 || h != math.Trunc(h) || w != math.Trunc(w) {
			return nil, bad("[height, width]")
		}
		return model.Size{W: int(w), H: int(h)}, nil
	}
	return nil, bad("a value")
}

// jsonText prints a decoded JSON value as JSON writes it: 2147483647, not
// the 2.147483647e+09 of %v on a float64.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// checked is the model a request runs on and its parameters, checked
// against the resident model.
func (s *Runner) checked(q *serve.Request) (*Loaded, model.Values, error) {
	l, set, err := s.values(q)
	if err != nil {
		return nil, nil, err
	}
	if c, ok := l.Model.(model.Checker); ok {
		if err := c.Check(model.Params{Set: set, Default: model.Defaults(l.Family.Params())}); err != nil {
			return nil, nil, err
		}
	}
	return l, set, nil
}

// Validate checks what can be checked before the input is probed.
func (s *Runner) Validate(ctx context.Context, q *serve.Request) error {
	if _, _, err := s.checked(q); err != nil {
		return err
	}
	ext := filepath.Ext(q.SaveResultPath)
	if ext == "" {
		ext = ".mp4" // what the service adds
	}
	enc, err := s.encode(q, ext)
	if err != nil {
		return err
	}
	if err := video.CheckEncode(ctx, ext, enc); errors.Is(err, video.ErrNoFFmpeg) {
		return err
	} else if err != nil {
		return fmt.Errorf("fields save_result_path, codec, crf, preset, pix_fmt: %w", err)
	}
	return nil
}

// CheckInput reads the header of a submitted task's input (see
// video.ProbeHeader): a playlist or list of files, a file that is no video
// or image vsr reads, or one over video.DefaultLimits is refused before the
// task is queued. The task's run probes the input again, whole.
func (s *Runner) CheckInput(ctx context.Context, q *serve.Request, path string) error {
	_, err := video.ProbeHeader(ctx, path, video.ProbeOptions{})
	return err
}

var _ serve.Sizer = (*Runner)(nil)

// OutputSize is the size of the largest frames request q makes from the
// video at input, whose size is read from its headers (serve.Sizer): what
// the model says (model.Sizer), else the size q asks for, else unknown.
func (s *Runner) OutputSize(ctx context.Context, q *serve.Request, input string) (int, int, error) {
	l, set, err := s.checked(q)
	if err != nil {
		return 0, 0, err
	}
	if _, ok := l.Model.(model.Sizer); !ok {
		z, _ := set["size"].(model.Size)
		return z.W, z.H, nil
	}
	info, err := video.ProbeHeader(ctx, input, video.ProbeOptions{})
	if err != nil {
		return 0, 0, err
	}
	return l.FrameSize(info.Width, info.Height, set)
}

// encode is a request's encoder settings for an output of extension ext:
// its own, else the server's, else the container's (video.DefaultCodec); an
// image's for an image.
func (s *Runner) encode(q *serve.Request, ext string) (video.EncodeOptions, error) {
	e := s.base.Encode
	if q.Codec != "" {
		e.Codec = q.Codec
	}
	if q.CRF != nil {
		e.CRF = *q.CRF
	}
	if q.Preset != "" {
		e.Preset = q.Preset
	}
	if q.PixFmt != "" {
		e.PixFmt = q.PixFmt
	}
	if IsImage(ext) {
		return ImageEncode(ext, e)
	}
	if e.Codec == "" && ext != "" {
		e.Codec = video.DefaultCodec(context.Background(), ext)
	}
	return e, nil
}

// Run restores one task with the task's context (cancelling it stops the
// work and removes the temporary output).
func (s *Runner) Run(ctx context.Context, t *serve.Task, progress func(done, total int)) error {
	q := &t.Request
	l, set, err := s.values(q)
	if err != nil {
		return err
	}
	job := s.base
	job.Input, job.Output, job.Params, job.MaxFrames, job.Progress = t.Input, t.Output, set, q.MaxFrames, progress
	if job.Encode, err = s.encode(q, filepath.Ext(t.Output)); err != nil {
		return err
	}
	if q.Batch > 0 {
		job.Batch = q.Batch
	}
	if q.Segments > 0 {
		job.Segments = q.Segments
	}
	if job.Deinterlace = video.Deinterlace(q.Deinterlace); job.Deinterlace == "" {
		job.Deinterlace = video.DeinterlaceAuto
	}
	job.Encode.NoReplace = !t.Replace
	if t.Resume {
		job.Resume = &pipeline.Resume{Notice: t.Notice, Resumed: t.Resumed}
	}
	job.Encode.NoSubtitles = job.Encode.NoSubtitles || q.NoSubtitles
	job.Encode.NoMetadata = job.Encode.NoMetadata || q.NoMetadata
	// The task runs on a free group: the same model there.
	var g int
	select {
	case g = <-s.free:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { s.free <- g }()
	l = s.groups[g][slices.Index(s.models, l)]
	t.Devices = l.Devices()
	for _, d := range l.All() {
		if tr, ok := d.Dev.(backend.Trimmer); ok { // CPU buffers sized for this task
			defer tr.Trim()
		}
	}
	res, err := l.Run(ctx, job)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	t.Width, t.Height, t.FPS = res.Width, res.Height, res.FPS
	t.Carried, t.Dropped = res.Carried.Carried, res.Dropped
	t.ResumedFrom = res.ResumedFrom
	return nil
}

// GPUMemoryBytes reports the peaks of the GPU pools, summed over the
// devices, on GPUs.
func (s *Runner) GPUMemoryBytes() (int64, bool) {
	var n int64
	for _, d := range s.devs {
		g, ok := d.(backend.GPU)
		if !ok {
			return 0, false
		}
		n += g.PeakBytes()
	}
	return n, true
}

// Metadata describes the models and the device, and lists the models
// in the models folder ($VSR_MODELS) with their architectures.
func (s *Runner) Metadata() map[string]any {
	var ms []map[string]any
	for _, l := range s.models {
		ms = append(ms, l.Model.Describe())
	}
	out := map[string]any{"device": s.models[0].Devices(), "device_groups": strings.Fields(s.Devices()), "models": ms, "default_model": s.models[0].Model.Name()}
	out["families"] = familyParams()
	if dir, err := compact.ModelsDir(); err == nil {
		if fm, err := compact.Folder(dir); err == nil {
			out["model_folder"] = map[string]any{"path": dir, "models": fm}
		}
	}
	return out
}

// Close frees the models and the devices.
func (s *Runner) Close() {
	for _, g := range s.groups {
		for _, l := range g {
			l.Close() // and its ranks
		}
	}
	for _, d := range s.devs {
		d.Close()
	}
}

var (
	_ serve.Runner         = (*Runner)(nil)
	_ serve.Validator      = (*Runner)(nil)
	_ serve.InputChecker   = (*Runner)(nil)
	_ serve.MemoryReporter = (*Runner)(nil)
	_ serve.Metadataer     = (*Runner)(nil)
)

var _ serve.StreamRunner = (*Runner)(nil)

// Stream checks a live session and reserves a free group of devices for
// it (serve.ErrBusy when none is free: a session never waits behind file
// tasks, and file tasks use the groups no session holds); run streams on
// the group's first device until ctx is done or the source ends.
func (s *Runner) Stream(ctx context.Context, ls serve.LiveSession) (func() error, error) {
	q := ls.Request
	l, set, err := s.checked(&serve.Request{Model: q.Model, Params: q.Params})
	if err != nil {
		return nil, err
	}
	enc, err := s.encode(&serve.Request{Codec: q.Codec, CRF: q.CRF, Preset: q.Preset}, "")
	if err != nil {
		return nil, err
	}
	if _, err := video.LiveFormat(q.Output, q.Container); err != nil {
		return nil, err
	}
	idle := pipeline.DefaultIdleTimeout
	if q.IdleTimeout > 0 {
		idle = time.Duration(q.IdleTimeout * float64(time.Second))
	}
	var g int
	select {
	case g = <-s.free:
	default:
		return nil, serve.ErrBusy
	}
	l = s.groups[g][slices.Index(s.models, l)]
	if err := l.oneDevice(); err != nil {
		s.free <- g
		return nil, fmt.Errorf("%w (vsr serve --ranks-per-task 1)", err)
	}
	return func() error {
		defer func() { s.free <- g }()
		_, err := l.Live(ctx, pipeline.LiveRequest{
			Input:  video.LiveInput{URL: q.Input, Protocols: ls.InputProtocols, Formats: ls.InputFormats, Options: ls.InputOptions},
			Output: video.LiveOutput{URL: q.Output, Format: q.Container, Encode: enc, Protocols: ls.OutputProtocols},
			Batch:  1, MaxLatency: time.Duration(q.MaxLatency * float64(time.Second)), Drop: q.Overload == "drop",
			IdleTimeout: idle, Reconnect: q.Reconnect, Stats: ls.Stats, StatsEvery: time.Second, MaxOutputPixels: ls.MaxOutputPixels,
		}, set)
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil // stopped: the output is finished
		}
		return err
	}, nil
}
