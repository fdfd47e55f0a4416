package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/serve"
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
	skip       bool     // --skip-existing
	gpu        int      // -g N: --device cuda:N (-1: not given)
	encoderOpt []string // --encoder-opt key=value
	format     string   // -f: the image format of a folder's outputs
	vfr        string   // keep or cfr
	playlists  bool     // --allow-playlists
	// deinterlace is what to do with an interlaced file input.
	deinterlace string
	noSubs      bool    // --no-subtitles
	noResume    bool    // --no-resume
	checkEvery  float64 // --checkpoint-every
	noMeta      bool    // --no-metadata
	// maxOutputPixels refuses larger outputs (width x height).
	maxOutputPixels int64

	// live streams
	live        bool
	maxLatency  time.Duration
	overload    string // wait or drop
	idleTimeout time.Duration
	reconnect   bool
	container   string   // the live output's -f
	inputFormat string   // the live input's -f
	inputOpt    []string // the live input's options
	statsEvery  time.Duration
}

func newRestore() *cobra.Command {
	var f restoreFlags
	cmd := &cobra.Command{
		Use:   "restore {INPUT | -i INPUT} -o OUTPUT",
		Short: "Restore and upscale a video",
		Long: `Restore and upscale a video with a neural network.

The output keeps the input's frame rate, exact frame count, audio,
subtitles, attachments, chapters, metadata, colour tags, HDR10 static
metadata and sample aspect ratio; one line on stderr says what it carries
and what it drops, and why. It is written to a temporary file beside
OUTPUT and renamed when complete, so a failed or interrupted run leaves
no output behind. The output directory must exist.

The output is made of parts of about --checkpoint-every seconds of video,
each kept in a hidden journal directory beside OUTPUT once finished, until
the end: the same command run again after a crash, a kill, Ctrl-C or
SIGTERM restores only the parts missing and says "resuming at frame N of
M" (a model with state from frame to frame resumes where it saved its
state, if it can: SwiftVR, CDA-VSR). A journal made with another input,
model or setting is set aside with a notice saying what differs;
--no-resume starts over; an error in the input discards it.
--checkpoint-every 0 keeps no journal: the output is written as one part
per segment, as a run that cannot resume (for measuring what the journal
costs, or a disk without room for it).`,
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
	fl.StringVarP(&f.output, "output", "o", "", "output file (required): a video, or an image (.png, .jpg, .webp) for an image; a folder for a folder; its directory must exist")
	fl.StringVarP(&f.input, "input", "i", "", "input video (instead of the argument)")
	fl.BoolVarP(&f.overwrite, "overwrite", "y", false, "replace the output if it exists (as ffmpeg's -y); without it an existing output is refused")
	fl.BoolVar(&f.skip, "skip-existing", false, "keep an output that exists (one an earlier run finished) and skip its input: a folder's other files are restored; for one file, exit 0 saying it was kept. Not with -y")
	fl.IntVarP(&f.gpu, "gpu", "g", -1, "GPU index: -g N is --device cuda:N")
	fl.StringVarP(&f.format, "format", "f", "", "folder of images: write each as png, jpg, webp, bmp or tif (default: as it was; one file's output takes its extension's format)")
	fl.StringArrayVar(&f.encoderOpt, "encoder-opt", nil, "more encoder options as key=value, passed to ffmpeg as -key value (repeatable), e.g. x265-params=aq-mode=3")
	fl.StringVarP(&f.model, "model", "n", "", "model: "+model.Specs()+" (default: "+model.DefaultModel()+")")
	fl.StringVar(&f.device, "device", "auto", "compute device: auto (the first GPU if any, else cpu), cpu, cuda, cuda:N")
	fl.StringVar(&f.codec, "codec", "", "ffmpeg video encoder, e.g. libx264, libx265, ffv1 (default: the output container's, as ffmpeg's: libvpx-vp9 for .webm, libtheora for .ogv, else libx264)")
	fl.IntVar(&f.crf, "crf", 18, "encoder quality (CRF) for encoders that take one; -1 = encoder default")
	fl.StringVar(&f.preset, "preset", "medium", "encoder preset for libx264/libx265 (e.g. ultrafast ... veryslow)")
	fl.StringVar(&f.pixFmt, "pix-fmt", "", "output pixel format, e.g. yuv420p, yuv420p10le, yuv444p, gbrp (lossless RGB with ffv1); default: yuv420p, or the input's depth and chroma subsampling above 8 bits (yuv420p10le for 10-bit 4:2:0)")
	fl.StringVar(&f.progress, "progress", "auto", "progress display: auto (bar on a terminal), plain (lines), none")
	fl.BoolVar(&f.asJSON, "json", false, "print a JSON summary on stdout when done")
	fl.IntVar(&f.frames, "frames", 0, "restore only the first N frames (0 = all)")
	fl.IntVar(&f.batch, "batch", 0, "frames per model call (0 = 8 on a GPU, 1 on the CPU)")
	fl.IntVar(&f.segments, "segments", 0, "encode N segments of the output in parallel and join them losslessly (0 = on a GPU with 8+ CPU cores 4, or 8 for a causal model (one that plans its own batches); else 1)")
	fl.IntVar(&f.threads, "encoder-threads", 0, "threads per encoder (0 = the encoder's default)")
	fl.StringVar(&f.dtype, "dtype", "auto", dtypeHelp())
	fl.BoolVar(&f.playlists, "allow-playlists", false, playlistsHelp)
	fl.StringVar(&f.deinterlace, "deinterlace", "auto", "an interlaced file input (stated, or found by ffmpeg's idet filter): auto (bwdif, one frame per frame), bwdif, yadif, double (one frame per field: twice the frames and rate), off (as it is, with a warning)")
	fl.Float64Var(&f.checkEvery, "checkpoint-every", pipeline.DefaultCheckpointEvery, "seconds of video per part of the output kept for a resume: a run stopped loses about this much work at most; 0: no journal (a run stopped starts over, as with --no-resume; a journal left beside the output stays as it is)")
	fl.BoolVar(&f.noResume, "no-resume", false, "start over: set aside the journal an interrupted run of the same output left, rather than resume from it")
	fl.BoolVar(&f.noSubs, "no-subtitles", false, "leave the input's subtitles and attachments (fonts) out of the output")
	fl.BoolVar(&f.noMeta, "no-metadata", false, "leave the input's title, tags, chapters, stream tags (language, title) and timecode out of the output")
	fl.StringVar(&f.vfr, "vfr", "keep", "a variable-frame-rate input (vsr probe says): keep each frame's time, or cfr to space the frames evenly over the same duration")
	fl.Int64Var(&f.maxOutputPixels, "max-output-pixels", serve.DefaultMaxOutputPixels, "refuse an output frame larger than this, width x height in pixels (8192x8192 by default; one larger than 8K UHD gets a warning): raise it for a larger output on a machine with the memory")
	fl.BoolVar(&f.live, "live", false, "restore a live stream as it arrives (automatic when the input is a URL, a device, a FIFO or -, or the output a URL, an .m3u8, an .mpd or -)")
	fl.DurationVar(&f.maxLatency, "max-latency", 0, "live: bound the frames in flight to this much video (0: one second's, at least three batches)")
	fl.StringVar(&f.overload, "overload", "wait", "live, when the model cannot keep up: wait (the source backs up) or drop (whole input frames are dropped; the output keeps the others' times)")
	fl.DurationVar(&f.idleTimeout, "idle-timeout", pipeline.DefaultIdleTimeout, "live: finish the stream when the source sends nothing for this long (0: wait for ever)")
	fl.BoolVar(&f.reconnect, "reconnect", false, "live: when the source ends, open it again (the model's state starts afresh) until it sends nothing for --idle-timeout")
	fl.StringVar(&f.container, "container", "", "live: the output's container (mpegts, flv, matroska, hls, dash; default from the URL or extension; needed for -)")
	fl.StringVar(&f.inputFormat, "input-format", "", "live: the input's format for ffmpeg (-f), for devices and pipes, e.g. v4l2, mpegts")
	fl.StringArrayVar(&f.inputOpt, "input-opt", nil, "live: an ffmpeg input option as key=value, given before the input (repeatable), e.g. listen=1 to be an RTMP server, rtsp_transport=tcp")
	fl.DurationVar(&f.statsEvery, "stats-every", 5*time.Second, "live: statistics every this often (with --json, as JSON lines on stdout, or on stderr when the stream goes to stdout)")
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
	case !(f.checkEvery >= 0) || f.checkEvery > 1e6:
		return fmt.Errorf("--checkpoint-every %g: want seconds of video (default 60), or 0 for no journal", f.checkEvery)
	case f.segments < 0 || f.segments > 64:
		return fmt.Errorf("--segments %d: want 0 (automatic) to 64", f.segments)
	}
	if _, err := video.ParseDeinterlace(f.deinterlace); err != nil {
		return fmt.Errorf("--deinterlace %q: want auto, bwdif, yadif, double or off", f.deinterlace)
	}
	if f.vfr != "keep" && f.vfr != "cfr" {
		return fmt.Errorf("--vfr %q: want keep (each frame's own time) or cfr (evenly spaced over the same duration)", f.vfr)
	}
	switch strings.TrimPrefix(strings.ToLower(f.format), ".") {
	case "", "png", "jpg", "jpeg", "webp", "bmp", "tif", "tiff":
	default:
		return fmt.Errorf("-f (--format) %q: want png, jpg, webp, bmp or tif", f.format)
	}
	if f.skip && f.overwrite {
		return errors.New("give --skip-existing (keep existing outputs) or -y (replace them), not both")
	}
	set, err := familyValues(cmd.Flags())
	if err != nil {
		return err
	}
	if f.live || isLive(input, f.output) {
		if f.skip {
			return errors.New("--skip-existing is for files and folders, not live streams")
		}
		return restoreLive(cmd, input, f, set)
	}
	if st, err := os.Stat(input); err == nil && st.IsDir() {
		return restoreFolder(cmd, input, f, set)
	}
	formatIgnored(cmd, f)
	if same, _ := samePath(input, f.output); same {
		return fmt.Errorf("output %q is the input file; choose another output path", f.output)
	}
	if st, err := os.Stat(f.output); err == nil && st.IsDir() {
		return fmt.Errorf("output %q is a directory: give a file name, such as %s (a folder goes to a folder)", f.output, filepath.Join(f.output, strings.TrimSuffix(filepath.Base(input), filepath.Ext(input))+"_x"+filepath.Ext(input)))
	} else if err == nil && f.skip {
		return keepExisting(cmd, input, f)
	} else if err == nil && !f.overwrite {
		return fmt.Errorf("output %q exists: add -y (--overwrite) to replace it, or choose another path", f.output)
	} else if lst, lerr := os.Lstat(f.output); f.skip && lerr == nil && lst.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("output %q is a symbolic link, not an output vsr finished: remove it, or choose another path", f.output)
	}
	ctx := cmd.Context()
	enc, err := outputEncode(f, f.output)
	if err != nil {
		return err
	}
	// Probe before loading anything: a bad input is the commonest mistake.
	info, err := probeInput(ctx, input, f.playlists)
	if errors.Is(err, video.ErrTruncated) && info != nil && f.frames > 0 && f.frames <= info.Frames {
		// Salvage: the frames asked for are all in the decodable part.
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s is truncated; restoring %d of its %d decodable frames\n", input, f.frames, info.Frames)
	} else if err != nil {
		return err
	}
	if enc, err = inputPixFmt(enc, info, f.output); err != nil {
		return err
	}
	ld, err := setup(f, set)
	if err != nil {
		return err
	}
	defer closeAll(ld)
	res, err := restoreOne(cmd, ld, info, f.output, enc, f, set)
	if err != nil {
		return err
	}
	if f.asJSON {
		return printJSON(cmd, res)
	}
	return nil
}

// keepExisting is --skip-existing for one file whose output exists: kept
// when it is a regular file (one vsr renamed into place when complete),
// with a notice and, with --json, a document saying so; refused when it
// is a symbolic link or anything else.
func keepExisting(cmd *cobra.Command, input string, f restoreFlags) error {
	st, err := os.Lstat(f.output)
	switch {
	case err != nil:
		return fmt.Errorf("output %q: %v", f.output, err)
	case st.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("output %q is a symbolic link, not an output vsr finished: remove it, or choose another path", f.output)
	case !st.Mode().IsRegular():
		return fmt.Errorf("output %q exists and is not a regular file, so not an output vsr finished: remove it, or choose another path", f.output)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "vsr: output %s exists; kept it (--skip-existing)\n", f.output)
	if f.asJSON {
		return printJSON(cmd, app.FolderFile{Input: input, Output: f.output, Status: app.StatusSkipped})
	}
	return nil
}

// outputEncode is the encoder settings for output: restore's, or an
// image's when output is an image; what ffmpeg would refuse is refused
// here, before any work.
func outputEncode(f restoreFlags, output string) (video.EncodeOptions, error) {
	enc := restoreEncode(f)
	ext := filepath.Ext(output)
	if app.IsImage(ext) {
		var err error
		if enc, err = app.ImageEncode(ext, enc); err != nil {
			return enc, err
		}
	} else if enc.Codec == "" {
		enc.Codec = video.DefaultCodec(context.Background(), ext)
	}
	if ext == "" {
		return enc, nil // the encoder names the missing extension
	}
	return enc, video.CheckEncode(context.Background(), ext, enc)
}

// inputPixFmt settles the output pixel format when none was asked for: it
// follows the input (pipeline.DefaultPixFmt), checked before any work;
// when the encoder takes a shallower one only (pipeline.EncodablePixFmt),
// it is left to the restore, which reports the reduction.
func inputPixFmt(enc video.EncodeOptions, info *video.Info, output string) (video.EncodeOptions, error) {
	if enc.PixFmt != "" {
		return enc, nil
	}
	ext := filepath.Ext(output)
	if ext == "" {
		enc.PixFmt = pipeline.DefaultPixFmt(info)
		return enc, nil
	}
	pf, reduced, err := pipeline.EncodablePixFmt(context.Background(), ext, enc, info)
	if reduced == nil {
		enc.PixFmt = pf
	}
	return enc, err
}

// restoreOne restores the probed input into output with ld.
func restoreOne(cmd *cobra.Command, ld *app.Loaded, info *video.Info, output string, enc video.EncodeOptions, f restoreFlags, set model.Values) (*pipeline.Result, error) {
	mode, _ := video.ParseDeinterlace(f.deinterlace)
	info, note := info.Deinterlaced(mode)
	if note != "" && mode == video.DeinterlaceOff {
		fmt.Fprintln(cmd.ErrOrStderr(), "warning:", note)
	} else if note != "" {
		fmt.Fprintln(cmd.ErrOrStderr(), "note:", note)
	}
	if err := checkOutputSize(cmd, ld, info, set, f.maxOutputPixels); err != nil {
		return nil, err
	}
	if f.progress != "none" {
		notes(cmd, output, f.checkEvery > 0)
	}
	total := info.Frames
	if f.frames > 0 && f.frames < total {
		total = f.frames
	}
	prog := newProgress(f.progress, total, cmd.ErrOrStderr())
	var resume *pipeline.Resume
	kept := false // the run failed with finished parts in the journal
	if f.checkEvery > 0 {
		resume = &pipeline.Resume{Fresh: f.noResume, Notice: func(m string) { fmt.Fprintln(cmd.ErrOrStderr(), m) },
			Kept: func(int) { kept = true }}
	}
	res, err := ld.Run(cmd.Context(), app.Job{
		Input: info.Path, Output: output, Info: info, Params: set,
		MaxFrames: f.frames, Batch: f.batch, Segments: f.segments, CFR: f.vfr == "cfr",
		Encode:          enc,
		Progress:        prog.update,
		Warn:            func(m string) { fmt.Fprintln(cmd.ErrOrStderr(), "warning:", m) },
		Resume:          resume,
		CheckpointEvery: f.checkEvery,
	})
	prog.finish(err == nil)
	if err != nil {
		if kept {
			again := "the same command again"
			if output != f.output && !f.skip && !f.overwrite { // a folder's file: the outputs finished are in the way
				again += " with --skip-existing"
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "the finished parts are kept in %s: run %s to resume\n", pipeline.JournalDir(output), again)
		}
		return nil, err
	}
	if !app.IsImage(filepath.Ext(output)) { // always: what the output lacks matters
		fmt.Fprintf(cmd.ErrOrStderr(), "%s %s\n", res.Output, res.Carried)
	}
	if f.progress != "none" && !f.asJSON {
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: %d frames %dx%d in %.1f s (%.2f frames/s) on %s with %s\n",
			res.Output, res.Frames, res.Width, res.Height, res.Seconds, res.FPS, ld.Devices(), ld.Model.Name())
	}
	return res, nil
}

// restoreFolder restores every image and video in dir into the folder
// f.output (app.Folder), printing what it does: each file's progress and
// failure, and with --json one document of each file's result or error.
// Existing outputs follow -y, or --skip-existing keeps them and skips
// their inputs. A summary line ends a run without --json; the error at
// the end counts the failures.
func restoreFolder(cmd *cobra.Command, dir string, f restoreFlags, set model.Values) error {
	ctx := cmd.Context()
	var ld *app.Loaded
	defer func() {
		if ld != nil {
			closeAll(ld)
		}
	}()
	warn := func(m string) { fmt.Fprintln(cmd.ErrOrStderr(), "warning:", m) }
	folder := app.Folder{
		Dir: dir, Output: f.output, Format: f.format, Params: set, Batch: f.batch,
		SkipExisting: f.skip,
		Load: func() (*app.Loaded, error) {
			var err error
			ld, err = setup(f, set)
			return ld, err
		},
		// Prepare checks a file's output and probes its input.
		Prepare: func(ctx context.Context, in, out string) (video.EncodeOptions, *video.Info, error) {
			if _, err := os.Stat(out); err == nil && !f.overwrite {
				return video.EncodeOptions{}, nil, fmt.Errorf("output %q exists: add -y (--overwrite) to replace it, or --skip-existing to keep it", out)
			}
			enc, err := outputEncode(f, out)
			if err != nil {
				return enc, nil, err
			}
			info, err := probeInput(ctx, in, f.playlists)
			if err != nil {
				return enc, info, err
			}
			enc, err = inputPixFmt(enc, info, out)
			return enc, info, err
		},
		Check: func(ld *app.Loaded, info *video.Info) error {
			return checkOutputSize(cmd, ld, info, set, f.maxOutputPixels)
		},
		Video: func(_ context.Context, ld *app.Loaded, info *video.Info, out string, enc video.EncodeOptions) (*pipeline.Result, error) {
			return restoreOne(cmd, ld, info, out, enc, f, set)
		},
		Progress: func(total int) (func(done, total int), func(ok bool)) {
			prog := newProgress(f.progress, total, cmd.ErrOrStderr())
			return prog.update, prog.finish
		},
		Warn:    warn,
		Message: func(err error) string { return oneLine(flagNamed(err).Error()) },
		Failed:  func(e *app.FolderFile) { fmt.Fprintf(cmd.ErrOrStderr(), "vsr: %s\n", e.Error) },
	}
	if f.progress != "none" {
		folder.Skipped = func(e *app.FolderFile) {
			fmt.Fprintf(cmd.ErrOrStderr(), "vsr: %s: output %s exists; skipped (--skip-existing)\n", e.Input, e.Output)
		}
	}
	rep, err := folder.Run(ctx)
	if err != nil {
		return err
	}
	if rep.Stopped {
		// An interrupted run: with --json, one document still, the
		// files not finished marked so.
		if !f.asJSON {
			return ctx.Err()
		}
		if err := printJSON(cmd, rep.Files); err != nil {
			return err
		}
		return &reportedError{ctx.Err()}
	}
	if f.asJSON {
		if err := printJSON(cmd, rep.Files); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(cmd.ErrOrStderr(), "vsr: %s\n", folderSummary(rep, f.output))
	}
	if rep.Failed > 0 {
		err := fmt.Errorf("%d of the %d files in %s failed (each named above)", rep.Failed, len(rep.Files), dir)
		if f.asJSON {
			return &reportedError{err}
		}
		return err
	}
	return nil
}

// folderSummary is one line of what a folder restore into out did:
// "restored 2 of the 5 files into OUT; skipped 2 existing; 1 failed".
func folderSummary(rep *app.FolderReport, out string) string {
	s := fmt.Sprintf("restored %d of the %d files into %s", len(rep.Files)-rep.Skipped-rep.Failed, len(rep.Files), out)
	if rep.Skipped > 0 {
		s += fmt.Sprintf("; skipped %d existing", rep.Skipped)
	}
	if rep.Failed > 0 {
		s += fmt.Sprintf("; %d failed", rep.Failed)
	}
	return s
}

// formatIgnored notes that -f, which applies to a folder's images, is
// ignored for one file (as realesrgan-ncnn-vulkan ignores it) when the
// output's extension says another format.
func formatIgnored(cmd *cobra.Command, f restoreFlags) {
	if f.format == "" {
		return
	}
	ext := filepath.Ext(f.output)
	want, _ := app.ImageEncode("."+strings.TrimPrefix(f.format, "."), video.EncodeOptions{})
	if got, err := app.ImageEncode(ext, video.EncodeOptions{}); err == nil && got.Codec == want.Codec {
		return
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "note: -f (--format) %s applies to a folder's images; %s is written as its extension %q says\n", f.format, f.output, ext)
}

// probeInput probes a file input, a playlist or list of files only with
// --allow-playlists (the refusal says so).
func probeInput(ctx context.Context, input string, playlists bool) (*video.Info, error) {
	info, err := video.ProbeWith(ctx, input, video.ProbeOptions{AllowPlaylists: playlists})
	if errors.Is(err, video.ErrFormat) {
		return nil, fmt.Errorf("%w (--allow-playlists reads it, if you trust every file and URL it names)", err)
	}
	return info, err
}

const playlistsHelp = "let a file input be a playlist or list of files (HLS .m3u8, DASH .mpd, ffconcat) and ffmpeg open every file and URL it names; only for inputs you trust (default: refused)"

// warnPixels is the output size above which restore warns: 8K UHD.
const warnPixels = 7680 * 4320

// checkOutputSize refuses an output of the model on info over limit
// pixels (--max-output-pixels), and warns about one over 8K UHD. An
// output the model cannot size is left to the run.
func checkOutputSize(cmd *cobra.Command, ld *app.Loaded, info *video.Info, set model.Values, limit int64) error {
	w, h, err := ld.FrameSize(info.Width, info.Height, set)
	if err != nil || w <= 0 || h <= 0 {
		return nil
	}
	px := int64(w) * int64(h)
	switch {
	case int64(h) > limit/int64(w):
		return fmt.Errorf("%s: the output would be %dx%d = %d pixels, over --max-output-pixels %d: give a smaller --size or scale, or raise --max-output-pixels if this machine has the memory (one frame is %d MiB as 8-bit RGB, and a run holds several)",
			info.Path, w, h, px, limit, px*3>>20)
	case px > warnPixels:
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s: the output, %dx%d, is larger than 8K UHD (7680x4320): it takes much memory and time, and many players cannot play it\n", info.Path, w, h)
	}
	return nil
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func encodeOptions(f restoreFlags) video.EncodeOptions {
	return video.EncodeOptions{Codec: f.codec, CRF: f.crf, Preset: f.preset, PixFmt: f.pixFmt, Threads: f.threads}
}

// restoreEncode is restore's encoder settings: an output that appears
// while the job runs is not replaced without -y either.
func restoreEncode(f restoreFlags) video.EncodeOptions {
	e := encodeOptions(f)
	e.Options, e.NoReplace = f.encoderOpt, !f.overwrite
	e.NoSubtitles, e.NoMetadata = f.noSubs, f.noMeta
	return e
}

// usageError is an argument error with the command's usage line.
func usageError(cmd *cobra.Command, msg string) error {
	return fmt.Errorf("%s (usage: %s)", msg, cmd.UseLine())
}

// setup opens the devices (with extra GPU settings, see app.OpenDevices)
// and loads the model onto each with the parameters set.
func setup(f restoreFlags, set model.Values, extra ...string) (*app.Loaded, error) {
	devs, err := app.OpenDevices(f.device, app.StorageType(f.dtype, f.model), extra...)
	if err != nil {
		return nil, err
	}
	ld, err := app.LoadRanks(devs, f.model, set, nil)
	if err != nil {
		for _, d := range devs {
			d.Close()
		}
		return nil, err
	}
	return ld, nil
}

// closeAll frees the model and its devices.
func closeAll(ld *app.Loaded) {
	ranks := ld.Ranks
	ld.Close()
	for _, r := range ranks {
		r.Dev.Close()
	}
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

// notes says on stderr which temporaries of interrupted runs lie beside
// the output (what the output carries is said when it is written), but
// for the output's own journal when the run reads it (resume: it resumes
// from it, or says why it sets it aside).
func notes(cmd *cobra.Command, output string, resume bool) {
	stale, _ := filepath.Glob(filepath.Join(filepath.Dir(output), ".*.vsr-*"))
	if resume {
		stale = slices.DeleteFunc(stale, func(p string) bool { return p == pipeline.JournalDir(output) })
	}
	if len(stale) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %d temporaries of interrupted vsr runs in %s (remove them if no vsr is running there): %s\n",
			len(stale), filepath.Dir(output), strings.Join(stale, " "))
	}
}
