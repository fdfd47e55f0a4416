package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/video"
)

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newProbe() *cobra.Command {
	var asJSON, playlists bool
	cmd := &cobra.Command{
		Use:   "probe INPUT",
		Short: "Show a video's size, pixel format and depth, colour, HDR metadata, aspect ratio, field order, frame rate, exact frame count, streams, chapters and tags",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := probeInput(cmd.Context(), args[0], playlists)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, struct {
					*video.Info
					DAR video.Rational `json:"dar"`
				}{info, info.DAR()})
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "file\t%s\n", info.Path)
			fmt.Fprintf(w, "format\t%s\n", info.Format)
			if info.Title != "" {
				fmt.Fprintf(w, "title\t%s\n", info.Title)
			}
			fmt.Fprintf(w, "video\t%s %dx%d %s\n", info.Codec, info.Width, info.Height, info.PixFmt)
			fmt.Fprintf(w, "depth\t%s\n", depthText(info))
			fmt.Fprintf(w, "colour\t%s\n", colourText(info.Colour))
			if info.HDR != nil {
				fmt.Fprintf(w, "hdr\t%s\n", hdrText(info.HDR))
			}
			sar := "not stated (square pixels)"
			if info.SAR.Valid() {
				sar = fmt.Sprintf("%d:%d", info.SAR.Num, info.SAR.Den)
			}
			dar := info.DAR()
			fmt.Fprintf(w, "aspect\tSAR %s, DAR %d:%d\n", sar, dar.Num, dar.Den)
			fmt.Fprintf(w, "fields\t%s\n", fieldsText(info))
			if info.VFR {
				fmt.Fprintf(w, "fps\tvariable: %d frames over %.3f s (nominal %s); restore keeps each frame's time (--vfr keep)\n", info.Frames, info.Span(info.Frames), info.FPS)
			} else {
				fmt.Fprintf(w, "fps\t%s (%.3f)\n", info.FPS, info.FPS.Float())
			}
			fmt.Fprintf(w, "frames\t%d\n", info.Frames)
			fmt.Fprintf(w, "duration\t%.3f s\n", info.Duration)
			audio := "none"
			if info.HasAudio {
				audio = info.AudioCodec
			}
			fmt.Fprintf(w, "audio\t%s\n", audio)
			for _, s := range info.Streams {
				fmt.Fprintf(w, "stream #%d\t%s\n", s.Index, streamText(s))
			}
			for i, c := range info.Chapters {
				fmt.Fprintf(w, "chapter %d\t%.3f-%.3f s %s\n", i+1, c.Start, c.End, c.Title)
			}
			for _, k := range slices.Sorted(maps.Keys(info.Tags)) {
				if strings.EqualFold(k, "title") {
					continue // above
				}
				fmt.Fprintf(w, "tag %s\t%s\n", k, info.Tags[k])
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the probe as JSON")
	cmd.Flags().BoolVar(&playlists, "allow-playlists", false, playlistsHelp)
	return cmd
}

func newModels() *cobra.Command {
	var asJSON, showParam bool
	cmd := &cobra.Command{
		Use:   "models [PATH.param | PATH.pth | PATH.safetensors]",
		Short: "List the bundled and fetchable models, or say what a model file is and what vsr runs of it",
		Long: `With no argument: the models bundled in the binary, and those vsr downloads
on request (vsr models fetch NAME) into the models folder ($VSR_MODELS, by
default ~/.cache/vsr/models), with whether they are there.

With an ncnn PATH.param: its layers, which of them vsr does not run, the
weights it needs, and, when the .bin is beside it, its scale, the halo a tile
reads and its cost per 640x360 frame.

With a PyTorch state dict (PATH.pth, PATH.safetensors): its architecture,
recognised from its keys and shapes, and what gave it away; its scale,
channels, features, blocks, parameter count and multiply-accumulates per
output pixel; and the ncnn graph vsr builds and runs from it (--param prints
it whole).`,
		Example: `  vsr models
  vsr models fetch realesrgan-x4plus
  vsr models ~/models/realesr-general-x4v3.param
  vsr models ~/models/4x-UltraSharp.safetensors
  vsr models convert RealESRGAN_x4plus.pth RealESRGAN_x4plus.safetensors`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 && strings.HasSuffix(args[0], ".param") {
				return inspectParam(cmd, args[0], asJSON)
			}
			if len(args) == 1 {
				return inspectStateDict(cmd, args[0], asJSON, showParam)
			}
			dir, err := compact.ModelsDir()
			if err != nil {
				return err
			}
			type fetchable struct {
				compact.Fetchable
				Installed bool   `json:"installed"`
				Path      string `json:"path"`
			}
			var fs []fetchable
			for _, f := range compact.FetchableModels() {
				fs = append(fs, fetchable{f, f.Installed(dir) == nil, f.Param(dir)})
			}
			if asJSON {
				return printJSON(cmd, map[string]any{"bundled": compact.Bundled(), "fetchable": fs, "models_dir": dir, "state_dicts": stateDicts(dir)})
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSCALE\tDESCRIPTION")
			for _, m := range compact.Bundled() {
				def := ""
				if m.Scale == 4 {
					def = " (default)"
				}
				fmt.Fprintf(w, "%s\tx%d\t%s; bundled%s\n", m.Name, m.Scale, m.Description, def)
			}
			for _, f := range fs {
				state := fmt.Sprintf("not fetched: vsr models fetch %s (%d MB download)", f.Name, f.Bytes>>20)
				if f.Installed {
					state = "fetched"
				}
				fmt.Fprintf(w, "%s\tx%d\t%s; %s\n", f.Name, f.Scale, f.Description, state)
			}
			for _, m := range stateDicts(dir) {
				if m.Error != "" {
					fmt.Fprintf(w, "%s\t\tunreadable model file in the models folder: %s\n", m.File, m.Error)
					continue
				}
				state := "vsr runs it"
				if !m.Runs {
					state = m.Why
				}
				fmt.Fprintf(w, "%s\tx%d\t%s state dict in the models folder; %s\n", m.File, m.Scale, m.Architecture, state)
			}
			fmt.Fprintf(w, "\nFetched models live in %s ($VSR_MODELS).\n", dir)
			fmt.Fprintln(w, "Other ncnn models: vsr restore --model PATH.param (the .bin beside it is read); vsr models PATH.param says what one needs.")
			fmt.Fprintln(w, "PyTorch state dicts (ESRGAN, SRVGGNetCompact): vsr restore --model PATH.safetensors; vsr models PATH says what one is.")
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	cmd.Flags().BoolVar(&showParam, "param", false, "with a state dict: print the ncnn .param of the graph vsr builds from it")
	cmd.AddCommand(newModelsFetch(), newModelsConvert())
	return cmd
}

func newModelsFetch() *cobra.Command {
	return &cobra.Command{
		Use:   "fetch NAME...",
		Short: "Download models into the models folder, checking their SHA-256",
		Example: `  vsr models fetch realesrgan-x4plus
  VSR_MODELS=/srv/models vsr models fetch realesrgan-x4plus realesrgan-x4fast`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := compact.ModelsDir()
			if err != nil {
				return err
			}
			for _, name := range args {
				f, ok := compact.FindFetchable(name)
				if !ok {
					var names []string
					for _, f := range compact.FetchableModels() {
						names = append(names, f.Name)
					}
					return fmt.Errorf("no fetchable model %q (vsr fetches: %s)", name, strings.Join(names, ", "))
				}
				if f.Installed(dir) == nil {
					fmt.Fprintf(cmd.OutOrStdout(), "%s is already in %s\n", name, dir)
					continue
				}
				last := int64(-1)
				err := f.Fetch(cmd.Context(), dir, func(done, total int64) {
					if pct := done * 10 / max(total, 1); pct != last {
						last = pct
						fmt.Fprintf(cmd.ErrOrStderr(), "downloading %s: %d%% of %d MB\n", name, pct*10, total>>20)
					}
				})
				if err != nil {
					return fmt.Errorf("fetch %s: %w", name, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "fetched %s into %s (SHA-256 checked)\n", name, dir)
			}
			return nil
		},
	}
}

// inspectParam says what the ncnn graph at path needs.
func inspectParam(cmd *cobra.Command, path string, asJSON bool) error {
	param, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	bin, err := os.ReadFile(strings.TrimSuffix(path, ".param") + ".bin")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	gi, err := compact.Inspect(cpu.New(1), param, bin)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if asJSON {
		return printJSON(cmd, gi)
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	for _, k := range slices.Sorted(maps.Keys(gi.Layers)) {
		fmt.Fprintf(w, "%s\t%d\n", k, gi.Layers[k])
	}
	fmt.Fprintf(w, "weights\t%d values\n", gi.Weights)
	switch {
	case len(gi.Unsupported) > 0:
		fmt.Fprintf(w, "verdict\tvsr cannot run it: no %s (vsr runs %s)\n", strings.Join(gi.Unsupported, ", "), compact.Supported)
	case bin == nil:
		fmt.Fprintf(w, "verdict\tevery layer is supported; put the .bin beside the .param to load it\n")
	case gi.Problem != "":
		fmt.Fprintf(w, "verdict\tvsr cannot load it: %s\n", gi.Problem)
	default:
		fmt.Fprintf(w, "scale\tx%g\nhalo\t%d pixels (tiles smaller than about %d pixels mostly recompute it)\ncost\t%.2f TFLOP per 640x360 frame\nverdict\tvsr runs it: vsr restore IN -o OUT --model %s\n", gi.Scale, gi.Halo, 4*gi.Halo, gi.TFLOP, path)
	}
	return w.Flush()
}

// depthText describes the bits per sample, chroma subsampling and alpha
// of info's pixel format.
func depthText(info *video.Info) string {
	s := fmt.Sprintf("%d-bit", info.Depth)
	if info.Chroma != "" {
		s += " " + info.Chroma
	} else {
		s += " RGB"
	}
	if info.Alpha {
		s += " with alpha"
	}
	return s
}

// colourNames gives the common names of some of ffmpeg's colour names.
var colourNames = map[string]string{"smpte2084": "PQ", "arib-std-b67": "HLG", "tv": "limited", "pc": "full",
	"bt470bg": "BT.601 625", "smpte170m": "BT.601 525", "bt2020nc": "BT.2020 non-constant"}

// colourText describes a Colour, "unspecified" for the zero value.
func colourText(c video.Colour) string {
	if c.IsZero() {
		return "unspecified (players guess: usually BT.709 limited range for HD, BT.601 for SD)"
	}
	var parts []string
	for _, f := range []struct{ name, v string }{{"primaries", c.Primaries}, {"transfer", c.Transfer}, {"matrix", c.Matrix}, {"range", c.Range}, {"chroma location", c.ChromaLocation}} {
		v := f.v
		if v == "" {
			v = "unspecified"
		} else if n, ok := colourNames[v]; ok {
			v += " (" + n + ")"
		}
		parts = append(parts, f.name+" "+v)
	}
	return strings.Join(parts, ", ")
}

// hdrText describes HDR metadata.
func hdrText(h *video.HDR) string {
	var parts []string
	if m := h.Mastering; m != nil {
		xy := func(p [2]video.Rational) string { return fmt.Sprintf("(%.4f, %.4f)", p[0].Float(), p[1].Float()) }
		parts = append(parts, fmt.Sprintf("mastering display R%s G%s B%s white %s, luminance %g-%g cd/m²",
			xy(m.Red), xy(m.Green), xy(m.Blue), xy(m.White), m.MinLuminance.Float(), m.MaxLuminance.Float()))
	}
	if l := h.Light; l != nil {
		parts = append(parts, fmt.Sprintf("MaxCLL %d cd/m², MaxFALL %d cd/m²", l.MaxCLL, l.MaxFALL))
	}
	if h.Unread {
		parts = append(parts, "static metadata present but not readable by this ffmpeg without ffprobe")
	}
	if len(h.Dynamic) > 0 {
		parts = append(parts, "dynamic metadata: "+strings.Join(h.Dynamic, ", "))
	}
	return strings.Join(parts, "; ")
}

// fieldOrderNames describes Info.FieldOrder's values.
var fieldOrderNames = map[string]string{"progressive": "progressive", "tt": "interlaced, top field first (tt)", "bb": "interlaced, bottom field first (bb)",
	"tb": "interlaced, top field coded first, bottom shown first (tb)", "bt": "interlaced, bottom field coded first, top shown first (bt)"}

// fieldsText describes the field order, stated or detected.
func fieldsText(info *video.Info) string {
	if s, ok := fieldOrderNames[info.FieldOrder]; ok {
		return s
	}
	if s, ok := fieldOrderNames[info.DetectedFieldOrder]; ok {
		return "not stated; ffmpeg's idet filter finds it " + s
	}
	return "not stated"
}

// streamText describes one stream: its kind, codec, language, title and
// dispositions.
func streamText(s video.Stream) string {
	what := s.Kind + " " + s.Codec
	if s.Cover {
		what += " (cover art)"
	}
	if s.Language != "" {
		what += " [" + s.Language + "]"
	}
	if s.Title != "" {
		what += fmt.Sprintf(" %q", s.Title)
	}
	if len(s.Dispositions) > 0 {
		what += " (" + strings.Join(s.Dispositions, ", ") + ")"
	}
	return what
}
