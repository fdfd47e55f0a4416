package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/nvidia/nvml"
	"github.com/vsr-dev/vsr/parallel"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

type benchFlags struct {
	restoreFlags
	requests int
	noEncode bool
	keep     bool
	cudnn    bool
	profile  string
}

// benchRun is one request's measurements.
type benchRun struct {
	Seconds        float64         `json:"seconds"`            // first frame read to finished output
	FPS            float64         `json:"fps"`                // frames / seconds
	ComputeMsFrame float64         `json:"compute_ms_frame"`   // steady-state GPU compute per frame
	GPUBusy        float64         `json:"gpu_busy_fraction"`  // compute-stream busy time / steady-state wall time
	NVMLUtil       float64         `json:"nvml_util_mean"`     // NVML GPU utilization, mean of 10 ms samples (percent)
	PeakNVMLBytes  uint64          `json:"peak_nvml_bytes"`    // NVML device memory used, peak of 10 ms samples
	PeakAllocBytes int64           `json:"peak_alloc_bytes"`   // vsr's device allocator high-water mark
	CPUSeconds     float64         `json:"cpu_seconds"`        // vsr's own user + system CPU time
	FFmpegCPU      float64         `json:"ffmpeg_cpu_seconds"` // the ffmpeg processes' (decoders, encoders) CPU time
	Stages         pipeline.Stages `json:"stages"`
	// Ranks, with a device list, are each device's share.
	Ranks []rankRun `json:"ranks,omitempty"`
}

// rankRun is one device's part of a request on several.
type rankRun struct {
	Device string `json:"device"`
	// Busy is the compute stream's busy time (CUDA events) over the
	// request's streaming time (host clock); 0 on the CPU.
	Busy float64 `json:"busy_fraction"`
	// ExchangeWait is the time the rank waited for its neighbours'
	// exchanges (chunk parallelism); SentBytes and Messages what it sent.
	ExchangeWait float64 `json:"exchange_wait_seconds"`
	SentBytes    int64   `json:"sent_bytes"`
	Messages     int64   `json:"messages"`
	Staged       int64   `json:"staged_messages"` // through host memory
}

// benchReport is what `vsr bench --json` prints.
type benchReport struct {
	Input    string `json:"input"`
	Frames   int    `json:"frames"`
	InSize   string `json:"input_size"`
	OutSize  string `json:"output_size"`
	Device   string `json:"device"`
	Model    string `json:"model"`
	Codec    string `json:"codec"`
	Segments int    `json:"segments"`
	Batch    int    `json:"batch"`
	NoEncode bool   `json:"no_encode"`
	// EncodeProxy names what the encoders were given instead of the
	// model's output (SwiftVR's --encode-proxy), "" when they got it.
	EncodeProxy string     `json:"encode_proxy,omitempty"`
	Runs        []benchRun `json:"runs"`
	Mean        benchRun   `json:"mean"` // mean of runs after the first
}

func newBench() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench INPUT",
		Short: "Measure a restore: full video time, frames/s, GPU compute, memory and busy fraction",
		Long: `Run the same restore several times in one process (the model stays loaded)
and report, as SwiftVR-LightX2V does: the full video time from the first
frame read to the finished output file, frames/s, the steady-state GPU compute
time per frame, peak GPU memory (NVML sampled every 10 ms, and vsr's own
allocator high-water mark), and the fraction of the steady state in which the
GPU's compute stream was busy (CUDA events), with NVML's utilization beside
it; the latency from the first frame in to the first restored frame out, and
per batch (a chunk, for SwiftVR) in steady state; with a device list, each
rank's busy fraction, time waiting for exchanges and bytes sent. The first
request warms up; the mean is over the others.`,
		Example: `  vsr bench testdata/video/oa4_launch.webm --frames 361 --requests 5 --codec libx265 --preset ultrafast --crf 20
  vsr bench testdata/video/oa4_launch.webm --frames 361 --no-encode`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runBench(cmd, args[0], f) },
	}
	fl := cmd.Flags()
	fl.IntVar(&f.frames, "frames", 0, "loop the input to exactly N frames (0 = as it is)")
	fl.IntVar(&f.requests, "requests", 3, "requests to run in one process; the mean is over all but the first")
	fl.StringVar(&f.device, "device", "auto", "compute device: auto, cpu, cuda, cuda:N, or a list (cuda:0,cuda:1, cuda:all, cpu,cpu)")
	fl.StringVar(&f.dtype, "dtype", "auto", dtypeHelp())
	fl.StringVar(&f.model, "model", "", "model (see restore)")
	fl.StringVar(&f.codec, "codec", "libx264", "ffmpeg video encoder")
	fl.StringVar(&f.preset, "preset", "ultrafast", "encoder preset")
	fl.IntVar(&f.crf, "crf", 20, "encoder CRF")
	fl.StringVar(&f.pixFmt, "pix-fmt", "", "output pixel format (default: as restore, following the input's depth)")
	fl.IntVar(&f.segments, "segments", 0, "parallel encode segments (0 = automatic, as restore)")
	fl.IntVar(&f.batch, "batch", 0, "frames per model call (0 = automatic, as restore)")
	fl.IntVar(&f.threads, "encoder-threads", 0, "threads per encoder (0 = the encoder's default)")
	addFamilyFlags(fl)
	fl.BoolVar(&f.noEncode, "no-encode", false, "bring frames back to the host and drop them: measures everything but the encoder")
	fl.BoolVar(&f.cudnn, "no-fused-conv", false, "run every convolution through cuDNN plus a bias/PReLU pass instead of vsr's fused kernels, dense blocks' concatenations as copies (for comparison)")
	fl.StringVar(&f.profile, "cpuprofile", "", "write a Go CPU profile of all requests to this file (go tool pprof)")
	fl.BoolVar(&f.keep, "keep", false, "keep the last output file (printed) instead of deleting it")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	return cmd
}

func runBench(cmd *cobra.Command, input string, f benchFlags) error {
	if f.requests < 1 {
		return fmt.Errorf("--requests must be at least 1")
	}
	ctx := cmd.Context()
	tmp, err := os.MkdirTemp("", "vsr-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	info, err := video.Probe(ctx, input)
	if err != nil {
		return err
	}
	if f.frames > 0 && f.frames != info.Frames {
		if input, err = loopClip(ctx, input, filepath.Join(tmp, "looped.mkv"), f.frames); err != nil {
			return err
		}
		if info, err = video.Probe(ctx, input); err != nil {
			return err
		}
	}
	var extra []string
	if f.cudnn {
		extra = append(extra, "fused_conv=off")
	}
	set, err := familyValues(cmd.Flags())
	if err != nil {
		return err
	}
	ld, err := setup(f.restoreFlags, set, extra...)
	if err != nil {
		return err
	}
	defer closeAll(ld)
	dev := ld.Dev
	gpu, _ := dev.(backend.GPU)
	var nv *nvml.Device
	if gpu != nil {
		if d, err := nvmlDevice(gpu); err == nil {
			nv = &d
		}
	}
	rep := benchReport{Input: input, Frames: info.Frames, InSize: fmt.Sprintf("%dx%d", info.Width, info.Height),
		Device: ld.Devices(), Model: ld.Model.Name(), Codec: f.codec, Batch: app.BatchSize(f.batch, dev), NoEncode: f.noEncode}
	if p, _ := set["encode-proxy"].(string); p != "" && p != "off" {
		rep.EncodeProxy = p
	}
	probe, more, done, err := ld.Sessions(ctx, info, info.Frames, set)
	if err != nil {
		return err
	}
	ow, oh := probe.OutputSize(info.Width, info.Height)
	rep.Segments = max(app.SegmentCount(f.segments, dev, probe), len(more)+1)
	if _, causal := probe.(model.Planner); causal {
		rep.Batch = 0 // a batch per chunk
	}
	done()
	rep.OutSize = fmt.Sprintf("%dx%d", ow, oh)
	if f.noEncode {
		rep.Codec = "none"
	}
	out := filepath.Join(tmp, "out"+map[bool]string{true: ".mkv", false: ".mp4"}[f.codec == "ffv1"])
	if f.profile != "" {
		pf, err := os.Create(f.profile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			pf.Close()
			return err
		}
		defer func() {
			pprof.StopCPUProfile()
			if err := pf.Close(); err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "vsr bench: the CPU profile %s is incomplete: %v\n", f.profile, err)
			}
		}()
	}
	for r := 0; r < f.requests; r++ {
		run, err := benchOnce(ctx, f, set, info, input, out, ld, gpu, nv, rep)
		if err != nil {
			return err
		}
		rep.Runs = append(rep.Runs, run)
		if !f.asJSON {
			fmt.Fprintf(cmd.ErrOrStderr(), "request %d: %.3f s, %.1f frames/s\n", r+1, run.Seconds, run.FPS)
		}
	}
	rep.Mean = meanRuns(rep.Runs)
	if f.keep && !f.noEncode {
		keep := "vsr-bench-out" + filepath.Ext(out)
		if err := os.Rename(out, keep); err == nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "kept", keep)
		}
	}
	if f.asJSON {
		return printJSON(cmd, rep)
	}
	printBench(cmd, rep)
	return nil
}

func benchOnce(ctx context.Context, f benchFlags, set model.Values, info *video.Info, input, out string, ld *app.Loaded, gpu backend.GPU, nv *nvml.Device, rep benchReport) (benchRun, error) {
	eng, more, done, err := ld.Sessions(ctx, info, info.Frames, set)
	if err != nil {
		return benchRun{}, err
	}
	defer done()
	gpus := rankGPUs(ld)
	var sampler *nvml.Sampler
	if nv != nil {
		sampler = nv.StartSampler(ctx, 10*time.Millisecond)
	}
	for _, g := range gpus {
		if g != nil {
			g.Spans() // forget earlier requests
		}
	}
	self, children := cpuTimes()
	res, err := pipeline.Restore(ctx, pipeline.Request{
		Input: input, Output: out, Info: info, Discard: f.noEncode,
		Engine:   eng,
		More:     more,
		Batch:    rep.Batch,
		Segments: rep.Segments,
		Encode:   encodeOptions(f.restoreFlags),
	})
	var st nvml.SamplerStats
	if sampler != nil {
		st = sampler.Stop()
	}
	if err != nil {
		return benchRun{}, err
	}
	run := benchRun{Seconds: res.Seconds, FPS: res.FPS, NVMLUtil: st.MeanGPUUtil, PeakNVMLBytes: st.PeakMemUsed, Stages: res.Stages}
	s2, c2 := cpuTimes()
	run.CPUSeconds, run.FFmpegCPU = s2-self, c2-children
	if len(ld.Ranks) == 0 {
		if gpu != nil {
			run.PeakAllocBytes = gpu.PeakBytes()
			run.ComputeMsFrame, run.GPUBusy = steadyState(gpu.Spans(), res.Frames)
		}
		return run, nil
	}
	var ex []parallel.Stats
	if x, ok := eng.(model.Exchanger); ok {
		ex = x.Exchanged()
	}
	for i, d := range ld.All() {
		r := rankRun{Device: d.Dev.Name()}
		if g := gpus[i]; g != nil {
			var busy time.Duration
			for _, sp := range g.Spans() {
				busy += sp.End - sp.Start
			}
			if res.Stages.Stream > 0 {
				r.Busy = busy.Seconds() / res.Stages.Stream
			}
			run.PeakAllocBytes = max(run.PeakAllocBytes, g.PeakBytes())
		}
		if i < len(ex) {
			r.ExchangeWait, r.SentBytes, r.Messages, r.Staged = ex[i].RecvWait.Seconds(), ex[i].SentBytes, ex[i].Sent, ex[i].Staged
		}
		run.Ranks = append(run.Ranks, r)
	}
	return run, nil
}

// rankGPUs returns the GPU of each of ld's devices (nil for a CPU).
func rankGPUs(ld *app.Loaded) []backend.GPU {
	var gs []backend.GPU
	for _, d := range ld.All() {
		g, _ := d.Dev.(backend.GPU)
		gs = append(gs, g)
	}
	return gs
}

// steadyState drops the first and last tenth of the batches (pipeline
// fill and drain) and returns the compute time per frame and the fraction
// of the remaining wall time the compute stream was busy.
func steadyState(spans []backend.Span, frames int) (msPerFrame, busy float64) {
	if len(spans) == 0 {
		return 0, 0
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].Start < spans[j].Start })
	cut := len(spans) / 10
	s := spans[cut : len(spans)-cut]
	var sum time.Duration
	for _, x := range s {
		sum += x.End - x.Start
	}
	wall := s[len(s)-1].End - s[0].Start
	perBatch := float64(frames) / float64(len(spans))
	msPerFrame = sum.Seconds() * 1000 / (perBatch * float64(len(s)))
	if wall > 0 {
		busy = sum.Seconds() / wall.Seconds()
	}
	return msPerFrame, busy
}

func meanRuns(runs []benchRun) benchRun {
	use := runs
	if len(runs) > 1 {
		use = runs[1:]
	}
	var m benchRun
	n := float64(len(use))
	for _, r := range use {
		m.Seconds += r.Seconds / n
		m.FPS += r.FPS / n
		m.ComputeMsFrame += r.ComputeMsFrame / n
		m.GPUBusy += r.GPUBusy / n
		m.NVMLUtil += r.NVMLUtil / n
		m.CPUSeconds += r.CPUSeconds / n
		m.FFmpegCPU += r.FFmpegCPU / n
		m.Stages.Start += r.Stages.Start / n
		m.Stages.Stream += r.Stages.Stream / n
		m.Stages.Finish += r.Stages.Finish / n
		m.Stages.Join += r.Stages.Join / n
		m.Stages.WaitModel += r.Stages.WaitModel / n
		m.Stages.WaitEncoder += r.Stages.WaitEncoder / n
		m.Stages.Latency.First += r.Stages.Latency.First / n
		m.Stages.Latency.Steady += r.Stages.Latency.Steady / n
		m.Stages.Latency.Batches = r.Stages.Latency.Batches
		m.PeakNVMLBytes = max(m.PeakNVMLBytes, r.PeakNVMLBytes)
		if m.Ranks == nil && r.Ranks != nil {
			m.Ranks = make([]rankRun, len(r.Ranks))
		}
		for i, x := range r.Ranks {
			y := &m.Ranks[i]
			y.Device = x.Device
			y.Busy += x.Busy / n
			y.ExchangeWait += x.ExchangeWait / n
			y.SentBytes += x.SentBytes / int64(n)
			y.Messages += x.Messages / int64(n)
			y.Staged += x.Staged / int64(n)
		}
		m.PeakAllocBytes = max(m.PeakAllocBytes, r.PeakAllocBytes)
	}
	return m
}

func printBench(cmd *cobra.Command, r benchReport) {
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	m := r.Mean
	fmt.Fprintf(w, "input\t%s, %d frames, %s -> %s\n", r.Input, r.Frames, r.InSize, r.OutSize)
	batch := fmt.Sprintf("batch %d", r.Batch)
	if r.Batch == 0 {
		batch = "a batch per chunk"
	}
	fmt.Fprintf(w, "device / model\t%s / %s, %s, %d segment(s), codec %s\n", r.Device, r.Model, batch, r.Segments, r.Codec)
	if r.EncodeProxy != "" {
		fmt.Fprintf(w, "encode proxy\t%s: the encoders got the input resized, not the model's output (which was computed all the same)\n", r.EncodeProxy)
	}
	fmt.Fprintf(w, "requests\t%d (mean of the last %d)\n", len(r.Runs), max(len(r.Runs)-1, 1))
	fmt.Fprintf(w, "full video time\t%.3f s\n", m.Seconds)
	fmt.Fprintf(w, "frames/s\t%.1f\n", m.FPS)
	fmt.Fprintf(w, "stages\tstart %.3f s, stream %.3f s, finish encoders %.3f s, join %.3f s\n", m.Stages.Start, m.Stages.Stream, m.Stages.Finish, m.Stages.Join)
	if last := r.Runs[len(r.Runs)-1].Stages.Streams; len(last) > 1 {
		s := make([]string, len(last))
		for i, t := range last {
			s[i] = fmt.Sprintf("%d: %.2f-%.2f-%.2f", i, t.First, t.Last, t.End)
		}
		fmt.Fprintf(w, "streams (last request)\tfirst frame in - last frame in - encoder done, s: %s\n", strings.Join(s, ", "))
	}
	fmt.Fprintf(w, "CPU time\t%.2f s vsr, %.2f s ffmpeg decoders and encoders (user + system)\n", m.CPUSeconds, m.FFmpegCPU)
	fmt.Fprintf(w, "writers, during stream\t%.3f s waiting for the model, %.3f s blocked on the encoders (mean per stream)\n", m.Stages.WaitModel, m.Stages.WaitEncoder)
	unit := "batch"
	if r.Batch == 0 {
		unit = "chunk"
	}
	fmt.Fprintf(w, "latency\t%.3f s from the first frame in to the first restored frame out; %.3f s per %s in steady state (median of %d, frame in to frame out)\n",
		m.Stages.Latency.First, m.Stages.Latency.Steady, unit, max(m.Stages.Latency.Batches-1, 0))
	if m.ComputeMsFrame > 0 {
		fmt.Fprintf(w, "GPU compute per frame\t%.3f ms (%.0f frames/s)\n", m.ComputeMsFrame, 1000/m.ComputeMsFrame)
		fmt.Fprintf(w, "GPU busy (steady state)\t%.1f%% (CUDA events); NVML utilization %.1f%%\n", 100*m.GPUBusy, m.NVMLUtil)
		fmt.Fprintf(w, "peak GPU memory\t%.2f GiB (NVML, device-wide); allocator high-water %.2f GiB\n", float64(m.PeakNVMLBytes)/(1<<30), float64(m.PeakAllocBytes)/(1<<30))
	}
	for i, x := range m.Ranks {
		busy := "busy n/a (CPU)"
		if x.Busy > 0 {
			busy = fmt.Sprintf("busy %.1f%% of the stream", 100*x.Busy)
		}
		if x.Messages == 0 && x.ExchangeWait == 0 {
			fmt.Fprintf(w, "rank %d (%s)\t%s\n", i, x.Device, busy)
			continue
		}
		fmt.Fprintf(w, "rank %d (%s)\t%s; waited %.3f s for exchanges; sent %d messages, %.1f MiB (%d through the host)\n",
			i, x.Device, busy, x.ExchangeWait, x.Messages, float64(x.SentBytes)/(1<<20), x.Staged)
	}
	if m.PeakAllocBytes > 0 && m.ComputeMsFrame == 0 {
		fmt.Fprintf(w, "peak GPU memory\t%.2f GiB (NVML, first device); allocator high-water %.2f GiB (largest rank)\n", float64(m.PeakNVMLBytes)/(1<<30), float64(m.PeakAllocBytes)/(1<<30))
	}
	w.Flush()
}

// loopClip writes the first n frames of input, looped as often as needed,
// to dst without re-encoding (or losslessly when copying fails).
func loopClip(ctx context.Context, input, dst string, n int) (string, error) {
	ff, err := video.FFmpeg()
	if err != nil {
		return "", err
	}
	for _, codec := range [][]string{{"-c:v", "copy"}, {"-c:v", "ffv1"}} {
		args := []string{"-nostdin", "-hide_banner", "-loglevel", "error", "-stream_loop", "-1", "-i", input, "-an", "-frames:v", fmt.Sprint(n)}
		args = append(append(args, codec...), "-y", dst)
		if err := exec.CommandContext(ctx, ff, args...).Run(); err == nil {
			if info, err := video.Probe(ctx, dst); err == nil && info.Frames == n {
				return dst, nil
			}
		} else if ctx.Err() != nil {
			return "", ctx.Err()
		}
	}
	return "", fmt.Errorf("could not loop %s to %d frames", input, n)
}

// nvmlDevice finds the NVML handle of the backend's GPU.
func nvmlDevice(gpu backend.GPU) (nvml.Device, error) {
	if err := nvml.Init(); err != nil {
		return nvml.Device{}, err
	}
	if uuid, err := gpu.UUID(); err == nil {
		if d, err := nvml.DeviceByUUID(uuid); err == nil {
			return d, nil
		}
	}
	var idx int
	fmt.Sscanf(gpu.Name(), "cuda:%d", &idx)
	return nvml.DeviceByIndex(idx)
}
