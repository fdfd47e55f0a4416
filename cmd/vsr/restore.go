package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// restoreFlags are the flags of restore, bench and serve that are not
// model parameters (those are the families', see addFamilyFlags).
type restoreFlags struct {
	output   string
	model    string
	device   string
	codec    string
	crf      int
	preset   string
	pixFmt   string
	progress string
	asJSON   bool
	frames   int
	batch    int
	segments int
	threads  int
	dtype    string

	// restore only
	input      string   // -i, the input as a flag
	overwrite  bool     // -y
	gpu        int      // -g N: --device cuda:N (-1: not given)
	encoderOpt []string // --encoder-opt key=value
}

func newRestore() *cobra.Command {
	var f restoreFlags
	cmd := &cobra.Command{
		Use:   "restore {INPUT | -i INPUT} -o OUTPUT",
		Short: "Restore and upscale a video",
		Long: `Restore and upscale a video with a neural network.

The output keeps the input's frame rate, exact frame count and audio. It is
written to a temporary file beside OUTPUT and renamed when complete, so a
failed or interrupted run leaves nothing behind. The output directory must
exist.`,
		Example: `  vsr restore in.mp4 -o out.mp4
  vsr restore -i in.mkv -o out.mkv -s 2 --codec libx265 --crf 22 --encoder-opt x265-params=aq-mode=3
  vsr restore in.mp4 -o lossless.mkv --codec ffv1 --pix-fmt gbrp
  vsr restore in.mp4 -o out.mp4 --model ~/models/realesr-animevideov3-x4.param`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && f.input != "":
				return usageError(cmd, "give the input once: as an argument or with -i, not both")
			case len(args) == 1:
				f.input = args[0]
			case f.input == "":
				return usageError(cmd, "no input: give a video file (as an argument or with -i)")
			}
			if f.gpu >= 0 {
				if cmd.Flags().Changed("device") {
					return usageError(cmd, "give -g (--gpu) or --device, not both")
				}
				f.device = fmt.Sprintf("cuda:%d", f.gpu)
			}
			return runRestore(cmd, f.input, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.output, "output", "o", "", "output video file (required); its directory must exist")
	fl.StringVarP(&f.input, "input", "i", "", "input video (instead of the argument)")
	fl.BoolVarP(&f.overwrite, "overwrite", "y", false, "replace the output if it exists (as ffmpeg's -y); without it an existing output is refused")
	fl.IntVarP(&f.gpu, "gpu", "g", -1, "GPU index: -g N is --device cuda:N")
	fl.StringArrayVar(&f.encoderOpt, "encoder-opt", nil, "more encoder options as key=value, passed to ffmpeg as -key value (repeatable), e.g. x265-params=aq-mode=3")
	fl.StringVarP(&f.model, "model", "n", "", "model: a bundled name (see vsr models), an ncnn PATH.param, or a SwiftVR checkpoint directory (default: bundled realesr-animevideov3)")
	fl.StringVar(&f.device, "device", "auto", "compute device: auto (the first GPU if any, else cpu), cpu, cuda, cuda:N")
	fl.StringVar(&f.codec, "codec", "libx264", "ffmpeg video encoder, e.g. libx264, libx265, ffv1")
	fl.IntVar(&f.crf, "crf", 18, "encoder quality (CRF) for encoders that take one; -1 = encoder default")
	fl.StringVar(&f.preset, "preset", "medium", "encoder preset for libx264/libx265 (e.g. ultrafast ... veryslow)")
	fl.StringVar(&f.pixFmt, "pix-fmt", "yuv420p", "output pixel format, e.g. yuv420p, yuv444p, gbrp (lossless RGB with ffv1)")
	fl.StringVar(&f.progress, "progress", "auto", "progress display: auto (bar on a terminal), plain (lines), none")
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON summary on stdout when done")
	fl.IntVar(&f.frames, "frames", 0, "restore only the first N frames (0 = all)")
	fl.IntVar(&f.batch, "batch", 0, "frames per model call (0 = 8 on a GPU, 1 on the CPU)")
	fl.IntVar(&f.segments, "segments", 0, "encode N segments of the output in parallel and join them losslessly (0 = on a GPU with 8+ CPU cores 4, or 8 for SwiftVR; else 1)")
	fl.IntVar(&f.threads, "encoder-threads", 0, "threads per encoder (0 = the encoder's default)")
	fl.StringVar(&f.dtype, "dtype", "auto", "GPU storage type: f16, bf16, or auto (bf16 for SwiftVR, else f16)")
	addFamilyFlags(fl)
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func runRestore(cmd *cobra.Command, input string, f restoreFlags) error {
	switch f.progress {
	case "auto", "plain", "none":
	default:
		return fmt.Errorf("--progress %q: want auto, plain or none", f.progress)
	}
	switch {
	case f.frames < 0:
		return fmt.Errorf("--frames %d: want 0 (all) or a positive count", f.frames)
	case f.batch < 0 || f.batch > 256:
		return fmt.Errorf("--batch %d: want 0 (automatic) to 256", f.batch)
	case f.segments < 0 || f.segments > 64:
		return fmt.Errorf("--segments %d: want 0 (automatic) to 64", f.segments)
	}
	if same, _ := samePath(input, f.output); same {
		return fmt.Errorf("output %q is the input file; choose another output path", f.output)
	}
	if st, err := os.Stat(f.output); err == nil && st.IsDir() {
		return fmt.Errorf("output %q is a directory: give a file name, such as %s", f.output, filepath.Join(f.output, strings.TrimSuffix(filepath.Base(input), filepath.Ext(input))+"_x.mp4"))
	} else if err == nil && !f.overwrite {
		return fmt.Errorf("output %q exists: add -y (--overwrite) to replace it, or choose another path", f.output)
	}
	set, err := familyValues(cmd.Flags())
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	// What ffmpeg would refuse is refused before any work.
	if ext := filepath.Ext(f.output); ext != "" {
		if err := video.CheckEncode(ctx, ext, restoreEncode(f)); err != nil {
			return err
		}
	}
	// Probe before loading anything: a bad input is the commonest mistake.
	info, err := video.Probe(ctx, input)
	if err != nil {
		return err
	}
	ld, err := setup(f, set)
	if err != nil {
		return err
	}
	defer closeAll(ld)
	if f.progress != "none" {
		notes(cmd, info, f.output)
	}
	total := info.Frames
	if f.frames > 0 && f.frames < total {
		total = f.frames
	}
	prog := newProgress(f.progress, total, cmd.ErrOrStderr())
	res, err := ld.Run(ctx, app.Job{
		Input: input, Output: f.output, Info: info, Params: set,
		MaxFrames: f.frames, Batch: f.batch, Segments: f.segments,
		Encode:   restoreEncode(f),
		Progress: prog.update,
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
			res.Output, res.Frames, res.Width, res.Height, res.Seconds, res.FPS, ld.Dev.Name(), ld.Model.Name())
	}
	return nil
}

func encodeOptions(f restoreFlags) video.EncodeOptions {
	return video.EncodeOptions{Codec: f.codec, CRF: f.crf, Preset: f.preset, PixFmt: f.pixFmt, Threads: f.threads}
}

// restoreEncode is restore's encoder settings: an output that appears
// while the job runs is not replaced without -y either.
func restoreEncode(f restoreFlags) video.EncodeOptions {
	e := encodeOptions(f)
	e.Options, e.NoReplace = f.encoderOpt, !f.overwrite
	return e
}

// usageError is an argument error with the command's usage line.
func usageError(cmd *cobra.Command, msg string) error {
	return fmt.Errorf("%s (usage: %s)", msg, cmd.UseLine())
}

// setup opens the device (with extra GPU settings, see app.OpenDevices)
// and loads the model onto it with the parameters set.
func setup(f restoreFlags, set model.Values, extra ...string) (*app.Loaded, error) {
	devs, err := app.OpenDevices(f.device, app.StorageType(f.dtype, f.model), extra...)
	if err != nil {
		return nil, err
	}
	ld, err := app.Load(devs[0], f.model, set, nil)
	if err != nil {
		devs[0].Close()
		return nil, err
	}
	return ld, nil
}

// closeAll frees the model and its device.
func closeAll(ld *app.Loaded) {
	ld.Close()
	ld.Dev.Close()
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

// notes says on stderr what the output will not carry (subtitles, data,
// attachments, cover art) and which temporaries of interrupted runs lie
// beside the output.
func notes(cmd *cobra.Command, info *video.Info, output string) {
	var dropped []string
	for _, s := range info.Streams {
		if s.Kind != "audio" && !(s.Kind == "video" && !s.Cover) {
			dropped = append(dropped, fmt.Sprintf("#%d %s %s", s.Index, s.Kind, s.Codec))
		}
	}
	if len(dropped) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: the output carries the video and audio only; not carried: %s\n", strings.Join(dropped, ", "))
	}
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(output), ".*.vsr-*"))
	if len(stale) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %d temporaries of interrupted vsr runs in %s (remove them if no vsr is running there): %s\n",
			len(stale), filepath.Dir(output), strings.Join(stale, " "))
	}
}
