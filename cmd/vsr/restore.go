package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vsr-dev/vsr/backend"
	_ "github.com/vsr-dev/vsr/backend/cpu"  // registers the "cpu" device
	_ "github.com/vsr-dev/vsr/backend/cuda" // registers the "cuda" devices
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/model/swiftvr"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

type restoreFlags struct {
	output   string
	model    string
	scale    int
	device   string
	codec    string
	crf      int
	preset   string
	pixFmt   string
	progress string
	asJSON   bool
	frames   int
	tile     int
	batch    int
	segments int
	threads  int
	dtype    string

	// SwiftVR
	srRatio      float64
	size         string
	clipLen      int
	reaeBatch    int
	ditOverlap   int
	temporalGrow string
	dit          string
}

func newRestore() *cobra.Command {
	var f restoreFlags
	cmd := &cobra.Command{
		Use:   "restore INPUT -o OUTPUT",
		Short: "Restore and upscale a video",
		Long: `Restore and upscale a video with a neural network.

The output keeps the input's frame rate, exact frame count and audio. It is
written to a temporary file beside OUTPUT and renamed when complete, so a
failed or interrupted run leaves nothing behind. The output directory must
exist.`,
		Example: `  vsr restore in.mp4 -o out.mp4
  vsr restore in.mkv -o out.mkv --scale 2 --codec libx265 --crf 22
  vsr restore in.mp4 -o lossless.mkv --codec ffv1 --pix-fmt gbrp
  vsr restore in.mp4 -o out.mp4 --model ~/models/realesr-animevideov3-x4.param`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runRestore(cmd, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "", "output video file (required); its directory must exist")
	fl.StringVar(&f.model, "model", "", "model: a bundled name (see `vsr models`), an ncnn PATH.param, or a SwiftVR checkpoint directory (default: bundled realesr-animevideov3)")
	fl.IntVar(&f.scale, "scale", 4, "upscaling factor of the bundled model: 2, 3 or 4")
	fl.StringVar(&f.device, "device", "auto", "compute device: auto (the first GPU if any, else cpu), cpu, cuda, cuda:N")
	fl.StringVar(&f.codec, "codec", "libx264", "ffmpeg video encoder, e.g. libx264, libx265, ffv1")
	fl.IntVar(&f.crf, "crf", 18, "encoder quality (CRF) for encoders that take one; -1 = encoder default")
	fl.StringVar(&f.preset, "preset", "medium", "encoder preset for libx264/libx265 (e.g. ultrafast ... veryslow)")
	fl.StringVar(&f.pixFmt, "pix-fmt", "yuv420p", "output pixel format, e.g. yuv420p, yuv444p, gbrp (lossless RGB with ffv1)")
	fl.StringVar(&f.progress, "progress", "auto", "progress display: auto (bar on a terminal), plain (lines), none")
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON summary on stdout when done")
	fl.IntVar(&f.frames, "frames", 0, "restore only the first N frames (0 = all)")
	fl.IntVar(&f.tile, "tile", 0, "process frames in tiles of N input pixels (0 = automatic, bounded memory)")
	fl.IntVar(&f.batch, "batch", 0, "frames per model call (0 = 8 on a GPU, 1 on the CPU)")
	fl.IntVar(&f.segments, "segments", 0, "encode N segments of the output in parallel and join them losslessly (0 = on a GPU with 8+ CPU cores 4, or 8 for SwiftVR; else 1)")
	fl.IntVar(&f.threads, "encoder-threads", 0, "threads per encoder (0 = the encoder's default)")
	fl.StringVar(&f.dtype, "dtype", "auto", "GPU storage type: f16, bf16, or auto (bf16 for SwiftVR, else f16)")
	addSwiftVRFlags(fl, &f)
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

// addSwiftVRFlags adds the flags of SwiftVR checkpoints.
func addSwiftVRFlags(fl *pflag.FlagSet, f *restoreFlags) {
	fl.Float64Var(&f.srRatio, "sr-ratio", 2, "SwiftVR: output size = input size (cropped to a multiple of 8) times this, rounded down to even")
	fl.StringVar(&f.size, "size", "", "SwiftVR: output size WxH (even numbers; wins over --sr-ratio)")
	fl.IntVar(&f.clipLen, "clip-len", 24, "SwiftVR: frames per streaming chunk (a multiple of 4)")
	fl.IntVar(&f.reaeBatch, "reae-frame-batch", 1, "SwiftVR: frames per pass through the autoencoder's per-frame layers (0 = whole chunk)")
	fl.IntVar(&f.ditOverlap, "dit-overlap", 0, "SwiftVR: previous latents prepended to each middle chunk for the DiT")
	fl.StringVar(&f.temporalGrow, "temporal-grow", "before", "SwiftVR: run TemporalGrow before its upsample (before, LightX2V's reorder) or after (the official order)")
	fl.StringVar(&f.dit, "dit", "on", "SwiftVR: on, or off to run the autoencoder only (encode -> decode)")
}

func runRestore(cmd *cobra.Command, input string, f restoreFlags) error {
	switch f.progress {
	case "auto", "plain", "none":
	default:
		return fmt.Errorf("--progress %q: want auto, plain or none", f.progress)
	}
	if f.frames < 0 || f.tile < 0 || f.batch < 0 || f.batch > 256 || f.segments < 0 || f.segments > 64 {
		return fmt.Errorf("--frames and --tile must be >= 0, --batch between 0 and 256, --segments between 0 and 64")
	}
	if same, _ := samePath(input, f.output); same {
		return fmt.Errorf("output %q is the input file; choose another output path", f.output)
	}
	ctx := cmd.Context()
	// Probe before loading anything: a bad input is the commonest mistake.
	info, err := video.Probe(ctx, input)
	if err != nil {
		return err
	}
	ld, err := setup(cmd, f)
	if err != nil {
		return err
	}
	defer ld.Close()
	total := info.Frames
	if f.frames > 0 && f.frames < total {
		total = f.frames
	}
	eng, done, err := ld.engine(info, total, f)
	if err != nil {
		return err
	}
	defer done()
	prog := newProgress(f.progress, total, cmd.ErrOrStderr())
	res, err := pipeline.Restore(ctx, pipeline.Request{
		Input:     input,
		Output:    f.output,
		Engine:    eng,
		Batch:     batchSize(f.batch, ld.dev),
		Segments:  segmentCount(f.segments, ld.dev, eng),
		MaxFrames: f.frames,
		Info:      info,
		Encode:    video.EncodeOptions{Codec: f.codec, CRF: f.crf, Preset: f.preset, PixFmt: f.pixFmt, Threads: f.threads},
		Progress:  prog.update,
	})
	prog.finish(err == nil)
	if err != nil {
		return err
	}
	if f.asJSON {
		return printJSON(cmd, res)
	}
	if f.progress != "none" {
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: %d frames %dx%d in %.1f s (%.2f frames/s) on %s with %s\n",
			res.Output, res.Frames, res.Width, res.Height, res.Seconds, res.FPS, ld.dev.Name(), ld.name)
	}
	return nil
}

// loaded is a model bound to a device, kept for any number of requests.
type loaded struct {
	dev     backend.Backend
	name    string
	compact *compact.Model
	ck      *swiftvr.Checkpoint
	reae    *swiftvr.ReAE
	dit     *swiftvr.DiT // nil when loaded with --dit off
}

// Close frees the model and the device.
func (l *loaded) Close() {
	l.closeModel()
	l.dev.Close()
}

// closeModel frees the model but not the device (which other models may
// share).
func (l *loaded) closeModel() {
	if l.compact != nil {
		l.compact.Close()
	}
	if l.reae != nil {
		l.reae.Close()
	}
	if l.dit != nil {
		l.dit.Close()
	}
	if l.ck != nil {
		l.ck.Close()
	}
}

// setup opens the device (with extra GPU settings, see openDevice) and
// loads the model onto it.
func setup(cmd *cobra.Command, f restoreFlags, extra ...string) (*loaded, error) {
	dev, err := openDevice(f.device, resolveDType(f.dtype, f.model), extra...)
	if err != nil {
		return nil, err
	}
	ld, err := load(cmd, dev, f)
	if err != nil {
		dev.Close()
		return nil, err
	}
	return ld, nil
}

// load loads the model of f onto an open device.
func load(cmd *cobra.Command, dev backend.Backend, f restoreFlags) (*loaded, error) {
	var err error
	ld := &loaded{dev: dev}
	if f.model != "" && swiftvr.IsCheckpointDir(f.model) {
		if ld.ck, err = swiftvr.Open(f.model); err == nil {
			ld.reae, err = swiftvr.NewReAE(dev, swiftvr.FileSource{F: ld.ck.ReAE})
		}
		if err == nil && f.dit != "off" {
			ld.dit, err = loadDiT(dev, ld.ck)
		}
		ld.name = "swiftvr:" + filepath.Base(filepath.Clean(f.model))
	} else {
		ld.compact, err = loadModel(cmd, dev, f)
		if err == nil {
			ld.name = ld.compact.Name
		}
	}
	if err != nil {
		ld.closeModel()
		return nil, err
	}
	return ld, nil
}

// loadDiT loads the checkpoint's transformer onto dev: the weights stay
// resident for every request.
func loadDiT(dev backend.Backend, ck *swiftvr.Checkpoint) (*swiftvr.DiT, error) {
	if g, ok := dev.(backend.GPU); ok && g.StorageType() != "bf16" {
		return nil, fmt.Errorf("the SwiftVR DiT needs --dtype bf16 (fp16 overflows), not %v", g.StorageType())
	}
	prompt, err := ck.PromptEmbedding()
	if err != nil {
		return nil, err
	}
	return swiftvr.NewDiT(dev, swiftvr.FileSource{F: ck.DiT}, ck.Dims, float32(ck.Config.Eps), prompt)
}

// engine makes the per-request engine for a video; done releases it.
func (l *loaded) engine(info *video.Info, total int, f restoreFlags) (pipeline.Engine, func(), error) {
	if l.compact != nil {
		return compact.Runner{M: l.compact, Tile: f.tile}, func() {}, nil
	}
	var sw, sh int
	if f.size != "" {
		if _, err := fmt.Sscanf(f.size, "%dx%d", &sw, &sh); err != nil {
			return nil, nil, fmt.Errorf("--size %q: want WxH, e.g. 2560x1440", f.size)
		}
	}
	ow, oh, err := swiftvr.OutputSize(info.Width, info.Height, f.srRatio, sw, sh)
	if err != nil {
		return nil, nil, err
	}
	switch f.temporalGrow {
	case "before", "after":
	default:
		return nil, nil, fmt.Errorf("--temporal-grow %q: want before or after", f.temporalGrow)
	}
	if f.dit != "on" && f.dit != "off" {
		return nil, nil, fmt.Errorf("--dit %q: want on or off", f.dit)
	}
	if f.reaeBatch < 0 || f.ditOverlap < 0 {
		return nil, nil, fmt.Errorf("--reae-frame-batch and --dit-overlap must be >= 0")
	}
	var dit *swiftvr.DiT
	if f.dit == "on" {
		if dit = l.dit; dit == nil {
			return nil, nil, fmt.Errorf("the DiT was not loaded (the model was loaded with --dit off): ask for dit off, or load it with the DiT")
		}
	}
	r, err := swiftvr.NewRunner(l.reae, dit, info.Width, info.Height, total, swiftvrOptions(f, ow, oh))
	if err != nil {
		return nil, nil, err
	}
	return r, r.Close, nil
}

// swiftvrOptions are a request's SwiftVR settings; the resident model is
// not changed.
func swiftvrOptions(f restoreFlags, w, h int) swiftvr.Options {
	before := f.temporalGrow == "before"
	return swiftvr.Options{Width: w, Height: h, ClipLen: f.clipLen, DiTOverlap: f.ditOverlap,
		TGrowBefore: &before, FrameBatch: &f.reaeBatch}
}

// resolveDType turns --dtype auto into bf16 when a SwiftVR checkpoint is
// among the models (its DiT needs bf16's range), else f16.
func resolveDType(dtype string, models ...string) string {
	if dtype != "auto" {
		return dtype
	}
	for _, m := range models {
		if m != "" && swiftvr.IsCheckpointDir(m) {
			return "bf16"
		}
	}
	return "f16"
}

// openDevice opens the backend for --device through the backend registry.
// "auto" takes the first GPU when there is one, else the CPU. A GPU gets
// the storage type and the extra settings ("fused_conv=off") in its
// configuration string (cuda:0?dtype=bf16); a --device that carries its
// own settings is opened as it is.
func openDevice(name, dtype string, extra ...string) (backend.Backend, error) {
	switch dtype {
	case "auto":
		dtype = "f16"
	case "f16", "fp16", "bf16":
	default:
		return nil, fmt.Errorf("--dtype %q: want f16 or bf16", dtype)
	}
	gpu := func(dev string) string {
		return dev + "?" + strings.Join(append([]string{"dtype=" + dtype}, extra...), "&")
	}
	switch {
	case name == "auto":
		if b, err := backend.Open(gpu("cuda")); err == nil {
			return b, nil
		}
		return backend.Open("cpu")
	case strings.Contains(name, "?"):
		return backend.Open(name)
	case name == "cuda" || strings.HasPrefix(name, "cuda:"):
		return backend.Open(gpu(name))
	}
	return backend.Open(name)
}

// isGPU reports whether b runs on a GPU (a capability, not a name).
func isGPU(b backend.Backend) bool {
	_, ok := b.(backend.GPU)
	return ok
}

func batchSize(n int, b backend.Backend) int {
	switch {
	case n > 0:
		return n
	case isGPU(b):
		return 8
	}
	return 1
}

// segmentCount is --segments, or the automatic choice: on a GPU with 8+
// CPU cores, 4 segments for a model that reads the video as independent
// parts (each with its decoder) and 8 for a causal one, whose single stream
// reaches the encoders one segment after the other, so that shorter
// segments leave less work for the last encoder (docs/BENCHMARKS.md).
func segmentCount(n int, b backend.Backend, eng pipeline.Engine) int {
	_, causal := eng.(pipeline.Planner)
	switch {
	case n > 0:
		return n
	case isGPU(b) && runtime.NumCPU() >= 8 && causal:
		return 8
	case isGPU(b) && runtime.NumCPU() >= 8:
		return 4
	}
	return 1
}

// loadModel loads the bundled model for --scale, or an ncnn graph from disk.
func loadModel(cmd *cobra.Command, b backend.Backend, f restoreFlags) (*compact.Model, error) {
	if compact.IsBundledName(f.model) {
		scale := f.scale
		if f.model != "" && f.model != compact.DefaultModel {
			var s int
			if _, err := fmt.Sscanf(strings.TrimPrefix(f.model, compact.DefaultModel), "-x%d", &s); err != nil {
				return nil, fmt.Errorf("unknown bundled model %q (see `vsr models`)", f.model)
			}
			if cmd.Flags().Changed("scale") && s != f.scale {
				return nil, fmt.Errorf("--model %s is x%d but --scale is %d", f.model, s, f.scale)
			}
			scale = s
		}
		return compact.LoadBundled(b, scale)
	}
	if !strings.HasSuffix(f.model, ".param") {
		return nil, fmt.Errorf("--model %q: give a bundled model name (see `vsr models`) or an ncnn .param file", f.model)
	}
	param, err := os.ReadFile(f.model)
	if err != nil {
		return nil, fmt.Errorf("read model: %w", err)
	}
	binPath := strings.TrimSuffix(f.model, ".param") + ".bin"
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return nil, fmt.Errorf("read model weights (expected beside the .param): %w", err)
	}
	m, err := compact.LoadFiles(b, filepath.Base(strings.TrimSuffix(f.model, ".param")), param, bin)
	if err != nil {
		return nil, err
	}
	if cmd.Flags().Changed("scale") && m.Scale() != float64(f.scale) {
		m.Close()
		return nil, fmt.Errorf("--model %s upscales x%g; --scale %d applies to the bundled model only", f.model, m.Scale(), f.scale)
	}
	return m, nil
}

// samePath reports whether a and b name the same existing file.
func samePath(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	sb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(sa, sb), nil
}
