package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/model/swiftvr"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/serve"
	"github.com/vsr-dev/vsr/video"
)

type serveFlags struct {
	listen     string
	data       string
	inputRoot  string
	outputRoot string
	maxQueue   int
	maxUpload  int64
	maxConns   int
	// minUploadRate is the slowest upload accepted, in bytes/s.
	minUploadRate int64
	token         string
	models        []string
	warmup        bool
	warmupSize    string
	base          restoreFlags // device and per-request defaults
}

func newServe() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve restore requests over HTTP (LightX2V-compatible task API)",
		Long: `Serve restore requests over HTTP with LightX2V's task API (see docs/API.md).

Models are loaded once and stay resident; tasks run one at a time on the
device, in the order they came, and survive restarts: they are kept in a
database in --data. Without --model the bundled realesr-animevideov3 is
served, with sr_ratio 2, 3 or 4 picking its graph (2 by default).`,
		Example: `  vsr serve
  vsr serve --listen 127.0.0.1:8000 --data /srv/vsr --device cuda:0 --warmup
  VSR_TOKEN=secret vsr serve --listen 0.0.0.0:8000 --input-root /videos --output-root /results`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8000", "address to listen on (loopback by default)")
	fl.StringVar(&f.data, "data", defaultDataDir(), "directory of the task database (and of the default input and output roots)")
	fl.StringVar(&f.inputRoot, "input-root", "", "directory that video_path must resolve inside; uploads are stored here (default DATA/input)")
	fl.StringVar(&f.outputRoot, "output-root", "", "directory that save_result_path must resolve inside (default DATA/output)")
	fl.IntVar(&f.maxQueue, "max-queue", 100, "most tasks waiting in the queue; more get 503")
	fl.Int64Var(&f.maxUpload, "max-upload", 2<<30, "largest upload in bytes; larger get 413")
	fl.IntVar(&f.maxConns, "max-conns", 256, "most open client connections; more wait to be accepted")
	fl.Int64Var(&f.minUploadRate, "min-upload-rate", 64<<10, "slowest upload accepted, in bytes/s on average after its first 30 s; slower clients are dropped (408)")
	fl.StringVar(&f.token, "token", os.Getenv("VSR_TOKEN"), "bearer token required on every endpoint but /healthz (default $VSR_TOKEN; none = no authentication)")
	fl.StringSliceVar(&f.models, "model", nil, "model to serve, repeatable: a bundled name, an ncnn PATH.param or a SwiftVR checkpoint directory; the first is the default (default: bundled realesr-animevideov3)")
	fl.BoolVar(&f.warmup, "warmup", false, "load every graph at start (x2, x3 and x4 of the bundled model) instead of at first use")
	fl.StringVar(&f.warmupSize, "warmup-size", "", "SwiftVR: run a synthetic request at this output size (WxH, e.g. 2560x1440) at start, so that the first task does not compile kernels, choose algorithms or record CUDA graphs")
	b := &f.base
	fl.StringVar(&b.device, "device", "auto", "compute device: auto (the first GPU if any, else cpu), cpu, cuda, cuda:N")
	fl.StringVar(&b.dtype, "dtype", "auto", "GPU storage type: f16, bf16, or auto (bf16 for SwiftVR, else f16)")
	fl.StringVar(&b.codec, "codec", "libx264", "default ffmpeg video encoder (a request's codec wins)")
	fl.IntVar(&b.crf, "crf", 18, "default encoder quality (a request's crf wins)")
	fl.StringVar(&b.preset, "preset", "medium", "default libx264/libx265 preset (a request's preset wins)")
	fl.StringVar(&b.pixFmt, "pix-fmt", "yuv420p", "default output pixel format (a request's pix_fmt wins)")
	fl.IntVar(&b.batch, "batch", 0, "frames per model call (0 = 8 on a GPU, 1 on the CPU)")
	fl.IntVar(&b.segments, "segments", 0, "segments encoded in parallel (0 = 4 on a GPU with 8+ CPU cores, else 1)")
	fl.IntVar(&b.threads, "encoder-threads", 0, "threads per encoder (0 = the encoder's default)")
	addSwiftVRFlags(fl, b) // defaults for SwiftVR models; a request's fields win
	return cmd
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "vsr", "serve")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "vsr", "serve")
	}
	return "vsr-serve"
}

func runServe(cmd *cobra.Command, f serveFlags) error {
	if f.maxQueue < 1 || f.maxUpload < 1 {
		return fmt.Errorf("--max-queue and --max-upload must be at least 1")
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	ctx := cmd.Context()
	run, err := newServeRunner(cmd, f)
	if err != nil {
		return err
	}
	defer run.Close()
	svc, err := serve.New(serve.Config{
		Data: f.data, InputRoot: f.inputRoot, OutputRoot: f.outputRoot,
		MaxQueue: f.maxQueue, MaxUpload: f.maxUpload, Token: f.token,
		Version: versionString(), Logger: log,
		Model: run.models[0].spec, ModelClass: run.models[0].class(),
		MaxConns: f.maxConns, MinUploadRate: f.minUploadRate,
	}, run)
	if err != nil {
		return err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(f.listen); f.token == "" && !isLoopback(host) {
		log.Warn("listening beyond loopback without --token: anyone who can reach the port can run tasks")
	}
	log.Info("vsr serve listening", "url", "http://"+ln.Addr().String(), "device", run.dev.Name(),
		"models", strings.Join(run.names(), ","), "data", f.data, "input_root", svc.InputRoot(), "output_root", svc.OutputRoot())
	return svc.Serve(ctx, ln)
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// servedModel is one --model, resident on the device.
type servedModel struct {
	name    string
	spec    string       // as --model gave it
	flags   restoreFlags // model and scale as loaded
	bundled bool         // the bundled compact model: sr_ratio picks x2/x3/x4
	scales  map[int]*loaded
	one     *loaded // any other model
	scale   int     // integer scale of an ncnn model (0: SwiftVR)
}

// class is the model's family, as the metadata's model_cls.
func (m *servedModel) class() string {
	if m.one != nil && m.one.reae != nil {
		return "swiftvr"
	}
	return "compact"
}

// serveRunner runs tasks on resident models: serve.Runner.
type serveRunner struct {
	cmd    *cobra.Command
	dev    backend.Backend
	base   restoreFlags
	models []*servedModel
	// warmupSize is the output size SwiftVR models are warmed up at ("": none).
	warmupSize string

	mu sync.Mutex // lazy loads of bundled graphs
}

func newServeRunner(cmd *cobra.Command, f serveFlags) (*serveRunner, error) {
	dev, err := openDevice(f.base.device, resolveDType(f.base.dtype, f.models...))
	if err != nil {
		return nil, err
	}
	r := &serveRunner{cmd: cmd, dev: dev, base: f.base, warmupSize: f.warmupSize}
	specs := f.models
	if len(specs) == 0 {
		specs = []string{compact.DefaultModel}
	}
	for _, spec := range specs {
		m, err := r.loadModel(spec, f.warmup)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("--model %s: %w", spec, err)
		}
		for _, o := range r.models {
			if o.name == m.name {
				r.Close()
				return nil, fmt.Errorf("--model %s: a model named %s is already served", spec, m.name)
			}
		}
		r.models = append(r.models, m)
	}
	return r, nil
}

func (r *serveRunner) loadModel(spec string, warmup bool) (*servedModel, error) {
	f := r.base
	f.model = spec
	if spec == compact.DefaultModel || spec == "" {
		m := &servedModel{name: compact.DefaultModel, spec: compact.DefaultModel, flags: f, bundled: true, scales: map[int]*loaded{}}
		scales := []int{2}
		if warmup {
			scales = []int{2, 3, 4}
		}
		for _, s := range scales {
			if _, err := r.bundled(m, s); err != nil {
				for _, ld := range m.scales {
					ld.closeModel()
				}
				return nil, err
			}
		}
		return m, nil
	}
	f.scale = 4
	ld, err := load(r.cmd, r.dev, f)
	if err != nil {
		return nil, err
	}
	m := &servedModel{name: ld.name, spec: spec, flags: f, one: ld}
	if ld.reae != nil && r.warmupSize != "" {
		if err := r.warmupSwiftVR(ld, f); err != nil {
			ld.closeModel()
			return nil, err
		}
	}
	if ld.compact != nil {
		sc := ld.compact.Scale()
		if sc != float64(int(sc)) {
			ld.closeModel()
			return nil, fmt.Errorf("model %s upscales x%g; vsr serve takes integer scales", ld.name, sc)
		}
		m.scale = int(sc)
	}
	return m, nil
}

// warmupSwiftVR runs a synthetic request at --warmup-size through a
// SwiftVR model, on a locked thread as the pipeline drives the device.
func (r *serveRunner) warmupSwiftVR(ld *loaded, f restoreFlags) error {
	var w, h int
	if _, err := fmt.Sscanf(r.warmupSize, "%dx%d", &w, &h); err != nil || w < 8 || h < 8 {
		return fmt.Errorf("--warmup-size %q: want WxH, e.g. 2560x1440", r.warmupSize)
	}
	format := backend.RGB24
	if f.pixFmt == "yuv420p" {
		format = backend.YUV420P
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return swiftvr.Warmup(context.Background(), ld.reae, ld.dit, w, h, swiftvrOptions(f, w, h), format)
}

// bundled returns the bundled graph for scale, loading it at first use.
func (r *serveRunner) bundled(m *servedModel, scale int) (*loaded, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ld := m.scales[scale]; ld != nil {
		return ld, nil
	}
	f := m.flags
	f.model, f.scale = compact.DefaultModel, scale
	ld, err := load(r.cmd, r.dev, f)
	if err != nil {
		return nil, err
	}
	m.scales[scale] = ld
	return ld, nil
}

func (r *serveRunner) names() []string {
	var out []string
	for _, m := range r.models {
		out = append(out, m.name)
	}
	return out
}

// find returns the model a request names ("" = the first). A bundled name
// with a scale (realesr-animevideov3-x3) names the bundled model at that
// scale.
func (r *serveRunner) find(name string) (*servedModel, int, error) {
	if name == "" {
		return r.models[0], 0, nil
	}
	for _, m := range r.models {
		if m.name == name {
			return m, 0, nil
		}
	}
	for _, m := range r.models {
		var s int
		if m.bundled {
			if _, err := fmt.Sscanf(strings.TrimPrefix(name, m.name), "-x%d", &s); err == nil && s >= 2 && s <= 4 && name == fmt.Sprintf("%s-x%d", m.name, s) {
				return m, s, nil
			}
		}
	}
	return nil, 0, fmt.Errorf("field \"model\": %q is not served (served: %s)", name, strings.Join(r.names(), ", "))
}

// Validate checks what can be checked before the input is probed.
func (r *serveRunner) Validate(ctx context.Context, q *serve.Request) error {
	m, fixed, err := r.find(q.Model)
	if err != nil {
		return err
	}
	if ext := filepath.Ext(q.SaveResultPath); ext != "" {
		if err := video.CheckContainer(ctx, ext); errors.Is(err, video.ErrNoFFmpeg) {
			return err
		} else if err != nil {
			return fmt.Errorf("field \"save_result_path\": %w", err)
		}
	}
	ratio := q.SRRatio
	switch {
	case m.bundled:
		if ratio != 0 && ratio != 2 && ratio != 3 && ratio != 4 {
			return fmt.Errorf("field \"sr_ratio\": %g: the bundled model takes 2, 3 or 4", ratio)
		}
		if fixed != 0 && ratio != 0 && int(ratio) != fixed {
			return fmt.Errorf("field \"sr_ratio\": %g, but model %s is x%d", ratio, q.Model, fixed)
		}
	case m.scale != 0:
		if ratio != 0 && ratio != float64(m.scale) {
			return fmt.Errorf("field \"sr_ratio\": %g, but model %s is x%d", ratio, m.name, m.scale)
		}
	}
	if m.one == nil || m.one.reae == nil {
		if q.ClipLen != 0 {
			return fmt.Errorf("field \"clip_len\": applies to SwiftVR models only")
		}
		if q.DiT != "" {
			return fmt.Errorf("field \"dit\": applies to SwiftVR models only")
		}
	}
	return nil
}

// Run restores one task: probe, a new engine from the resident model, and
// pipeline.Restore with the task's context (cancelling it stops the work
// and removes the temporary output).
func (r *serveRunner) Run(ctx context.Context, t *serve.Task, progress func(done, total int)) error {
	q := &t.Request
	m, fixed, err := r.find(q.Model)
	if err != nil {
		return err
	}
	info, err := video.Probe(ctx, t.Input)
	if err != nil {
		return err
	}
	total := info.Frames
	if q.MaxFrames > 0 && q.MaxFrames < total {
		total = q.MaxFrames
	}
	f := m.flags
	if q.Codec != "" {
		f.codec = q.Codec
	}
	if q.CRF != nil {
		f.crf = *q.CRF
	}
	if q.Preset != "" {
		f.preset = q.Preset
	}
	if q.PixFmt != "" {
		f.pixFmt = q.PixFmt
	}
	if q.Batch > 0 {
		f.batch = q.Batch
	}
	if q.Segments > 0 {
		f.segments = q.Segments
	}
	f.tile = q.Tile
	if f.srRatio <= 0 { // LightX2V's default
		f.srRatio = 2
	}
	if q.DiT != "" {
		f.dit = q.DiT
	}
	if q.SRRatio > 0 {
		f.srRatio = q.SRRatio
	}
	if q.ClipLen > 0 {
		f.clipLen = q.ClipLen
	}
	var sizeW, sizeH int
	if len(q.Size) == 2 {
		sizeH, sizeW = q.Size[0], q.Size[1]
		f.size = fmt.Sprintf("%dx%d", sizeW, sizeH)
	}
	ld := m.one
	if m.bundled {
		scale := fixed
		if scale == 0 {
			scale = int(f.srRatio)
		}
		if sizeW > 0 {
			s, err := integerScale(info, sizeW, sizeH)
			if err != nil {
				return err
			}
			if (q.SRRatio > 0 || fixed != 0) && s != scale {
				return fmt.Errorf("size %dx%d (height x width) is x%d of the %dx%d input, but sr_ratio is %d", sizeH, sizeW, s, info.Height, info.Width, scale)
			}
			scale = s
		}
		if ld, err = r.bundled(m, scale); err != nil {
			return err
		}
	} else if m.scale != 0 && sizeW > 0 {
		if s, err := integerScale(info, sizeW, sizeH); err != nil || s != m.scale {
			return fmt.Errorf("size %dx%d (height x width): model %s makes %dx%d from the %dx%d input", sizeH, sizeW, m.name, info.Height*m.scale, info.Width*m.scale, info.Height, info.Width)
		}
	}
	if tr, ok := r.dev.(interface{ Trim() }); ok { // CPU buffers sized for this task, once the engine is done
		defer tr.Trim()
	}
	eng, done, err := ld.engine(info, total, f)
	if err != nil {
		return err
	}
	defer done()
	res, err := pipeline.Restore(ctx, pipeline.Request{
		Input:     t.Input,
		Output:    t.Output,
		Engine:    eng,
		Batch:     batchSize(f.batch, r.dev),
		Segments:  segmentCount(f.segments, r.dev, eng),
		MaxFrames: q.MaxFrames,
		Info:      info,
		Encode: video.EncodeOptions{Codec: f.codec, CRF: f.crf, Preset: f.preset, PixFmt: f.pixFmt, Threads: f.threads,
			NoReplace: !t.Replace},
		Progress: progress,
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	t.Width, t.Height, t.FPS = res.Width, res.Height, res.FPS
	return nil
}

// integerScale returns s in 2..4 when w x h is s times the input's size.
func integerScale(info *video.Info, w, h int) (int, error) {
	for s := 2; s <= 4; s++ {
		if w == info.Width*s && h == info.Height*s {
			return s, nil
		}
	}
	return 0, fmt.Errorf("size %dx%d (height x width) is not 2, 3 or 4 times the %dx%d input; the model scales by whole factors", h, w, info.Height, info.Width)
}

// GPUMemoryBytes reports the peak of the GPU pool, on a GPU.
func (r *serveRunner) GPUMemoryBytes() (int64, bool) {
	if g, ok := r.dev.(backend.GPU); ok {
		return g.PeakBytes(), true
	}
	return 0, false
}

// Metadata describes the models and the device.
func (r *serveRunner) Metadata() map[string]any {
	var ms []map[string]any
	for _, m := range r.models {
		d := map[string]any{"name": m.name}
		switch {
		case m.bundled:
			d["sr_ratios"] = []int{2, 3, 4}
			d["default_sr_ratio"] = 2
			r.mu.Lock()
			var loaded []int
			for s := 2; s <= 4; s++ {
				if m.scales[s] != nil {
					loaded = append(loaded, s)
				}
			}
			r.mu.Unlock()
			d["loaded_sr_ratios"] = loaded
		case m.scale != 0:
			d["sr_ratios"] = []int{m.scale}
		case m.one.reae != nil:
			d["family"] = "swiftvr"
			d["default_sr_ratio"] = 2
		}
		ms = append(ms, d)
	}
	return map[string]any{"device": r.dev.Name(), "models": ms, "default_model": r.models[0].name}
}

// Close frees the models and the device.
func (r *serveRunner) Close() {
	for _, m := range r.models {
		for _, ld := range m.scales {
			ld.closeModel()
		}
		if m.one != nil {
			m.one.closeModel()
		}
	}
	r.dev.Close()
}

var _ serve.Runner = (*serveRunner)(nil)
