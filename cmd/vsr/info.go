package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/model/compact"
	"github.com/vsr-dev/vsr/video"
)

func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newProbe() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "probe INPUT",
		Short: "Show a video's size, frame rate, exact frame count and audio",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := video.Probe(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, info)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "file\t%s\n", info.Path)
			fmt.Fprintf(w, "format\t%s\n", info.Format)
			fmt.Fprintf(w, "video\t%s %dx%d %s\n", info.Codec, info.Width, info.Height, info.PixFmt)
			fmt.Fprintf(w, "fps\t%s (%.3f)\n", info.FPS, info.FPS.Float())
			fmt.Fprintf(w, "frames\t%d\n", info.Frames)
			fmt.Fprintf(w, "duration\t%.3f s\n", info.Duration)
			audio := "none"
			if info.HasAudio {
				audio = info.AudioCodec
			}
			fmt.Fprintf(w, "audio\t%s\n", audio)
			for _, s := range info.Streams {
				what := s.Kind + " " + s.Codec
				if s.Cover {
					what += " (cover art)"
				}
				fmt.Fprintf(w, "stream #%d\t%s\n", s.Index, what)
			}
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the probe as JSON")
	return cmd
}

func newModels() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the models bundled in the binary",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ms := compact.Bundled()
			if asJSON {
				return printJSON(cmd, ms)
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tSCALE\tDESCRIPTION")
			for _, m := range ms {
				def := ""
				if m.Scale == 4 {
					def = " (default)"
				}
				fmt.Fprintf(w, "%s\tx%d\t%s%s\n", m.Name, m.Scale, m.Description, def)
			}
			fmt.Fprintln(w, "\nOther ncnn models: vsr restore --model PATH.param (the .bin beside it is read).")
			return w.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return cmd
}
