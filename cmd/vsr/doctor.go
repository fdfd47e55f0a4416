package main

import (
	"fmt"
	"os/exec"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/nvidia"
	"github.com/vsr-dev/vsr/video"
)

func newDoctor() *cobra.Command {
	var asJSON, verbose bool
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Show the NVIDIA driver, GPUs and libraries vsr can use, the CPU it falls back to, and ffmpeg",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := nvidia.GetReport(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd, r)
			}
			w := cmd.OutOrStdout()
			if len(r.GPUs) == 0 {
				fmt.Fprintf(w, "vsr will use the CPU: %d cores (no usable NVIDIA GPU)\n", runtime.NumCPU())
			}
			fmt.Fprint(w, r.Text(verbose))
			fmt.Fprintln(w, "video tools:")
			if p, err := video.FFmpeg(); err != nil {
				fmt.Fprintf(w, "  ffmpeg   missing  %v\n", err)
			} else {
				fmt.Fprintf(w, "  ffmpeg   %s  %s\n", toolVersion(p), p)
			}
			if p, err := video.FFprobe(); err != nil {
				fmt.Fprintf(w, "  ffprobe  error    %v\n", err)
			} else if p == "" {
				fmt.Fprintln(w, "  ffprobe  absent   vsr probes with ffmpeg alone")
			} else {
				fmt.Fprintf(w, "  ffprobe  %s  %s\n", toolVersion(p), p)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "also list the paths searched for each missing library")
	return cmd
}

// toolVersion is the version word of "ffmpeg version X ...", or "?".
func toolVersion(p string) string {
	out, err := exec.Command(p, "-version").Output()
	if f := strings.Fields(string(out)); err == nil && len(f) >= 3 && f[1] == "version" {
		return f[2]
	}
	return "?"
}
