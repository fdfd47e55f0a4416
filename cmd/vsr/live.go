package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/video"
)

// isLive reports whether a restore of input into output is a live stream:
// the input is a URL, a device, a FIFO or stdin, or the output a URL,
// stdout, or an HLS or DASH manifest.
func isLive(input, output string) bool {
	if video.IsURL(input) || input == "-" || strings.HasPrefix(input, "/dev/") {
		return true
	}
	if st, err := os.Stat(input); err == nil && st.Mode()&os.ModeNamedPipe != 0 {
		return true
	}
	switch strings.ToLower(filepath.Ext(output)) {
	case ".m3u8", ".mpd":
		return true
	}
	return video.IsURL(output) || output == "-"
}

// restoreLive restores the live stream input into f.output until the
// source ends, stalls for --idle-timeout, or Ctrl-C (which finishes the
// output too), reporting statistics as it goes.
func restoreLive(cmd *cobra.Command, input string, f restoreFlags, set model.Values) error {
	if f.overload != "wait" && f.overload != "drop" {
		return fmt.Errorf("--overload %q: want wait (the source backs up) or drop (whole input frames are dropped)", f.overload)
	}
	if f.maxLatency < 0 || f.idleTimeout < 0 || f.statsEvery < 0 {
		return errors.New("--max-latency, --idle-timeout and --stats-every must not be negative")
	}
	if f.frames > 0 || f.segments > 1 {
		return errors.New("--frames and --segments apply to files; a live stream runs until its source ends, with one encoder")
	}
	out := f.output
	if !video.IsURL(out) && out != "-" {
		if st, err := os.Stat(out); err == nil && (st.IsDir() || !f.overwrite) {
			return fmt.Errorf("output %q exists: add -y (--overwrite) to replace it, or choose another path", out)
		}
	}
	if _, err := video.LiveFormat(out, f.container); err != nil {
		return err
	}
	enc := restoreEncode(f)
	enc.NoReplace = false
	if enc.Codec == "" && f.container == "" && !video.IsURL(out) {
		enc.Codec = video.DefaultCodec(cmd.Context(), filepath.Ext(out))
	}
	ld, err := setup(f, set)
	if err != nil {
		return err
	}
	defer closeAll(ld)
	stderr := cmd.ErrOrStderr()
	jsonOut := cmd.OutOrStdout()
	if out == "-" {
		jsonOut = stderr // stdout carries the stream
	}
	report := func(s pipeline.LiveStats) {
		switch {
		case f.asJSON:
			json.NewEncoder(jsonOut).Encode(s)
		case f.progress != "none":
			what := "live"
			if s.Final {
				what = "live stream finished"
			}
			fmt.Fprintf(stderr, "%s: %d frames in (%.1f fps), %d out (%.1f fps) at %dx%d, latency p50 %.3f s p99 %.3f s, %d dropped\n",
				what, s.InFrames, s.InFPS, s.OutFrames, s.OutFPS, s.Width, s.Height, s.LatencyP50, s.LatencyP99, s.Dropped)
		}
		if s.Final && !f.asJSON && s.Width > 0 { // always, as restore's
			fmt.Fprintf(stderr, "%s %s\n", out, s.Carried)
		}
	}
	if f.progress != "none" && !f.asJSON {
		fmt.Fprintf(stderr, "restoring the live stream %s into %s on %s with %s (%s; stop with Ctrl-C)\n", input, out, ld.Devices(), ld.Model.Name(), latencyNote(ld.Family, f))
	}
	_, err = ld.Live(cmd.Context(), pipeline.LiveRequest{
		Input:  video.LiveInput{URL: input, Format: f.inputFormat, Options: f.inputOpt, Stdin: cmd.InOrStdin()},
		Output: video.LiveOutput{URL: out, Format: f.container, Encode: enc, Stdout: cmd.OutOrStdout()},
		Batch:  f.batch, MaxLatency: f.maxLatency, Drop: f.overload == "drop",
		IdleTimeout: f.idleTimeout, Reconnect: f.reconnect,
		Stats: report, StatsEvery: f.statsEvery,
	}, set)
	if errors.Is(err, context.Canceled) && cmd.Context().Err() != nil {
		return nil // stopped: the output is finished
	}
	return err
}

// latencyNote says what bounds a model's latency: what its family says
// (model.About's Latency), else the batch.
func latencyNote(fam model.Family, f restoreFlags) string {
	if l := fam.About().Latency; l != "" {
		return "latency: " + l + ", plus the queues"
	}
	return fmt.Sprintf("latency: %d frame(s) a batch, plus the queues", max(f.batch, 1))
}
