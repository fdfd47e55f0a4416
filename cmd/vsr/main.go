// Command vsr restores and upscales video with neural networks. It holds
// the flags, printing and progress; the work is package app's.
//
// Subcommands: restore, bench, serve, probe, models, doctor, checkpoint,
// version. Run `vsr help` for details.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		msg := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " ")
		fmt.Fprintln(os.Stderr, "vsr: "+msg)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "vsr",
		Short:         "Restore and upscale video with neural networks",
		Long:          "vsr restores and upscales video with neural networks, on the CPU or NVIDIA GPUs.\nVideo goes in and out through the ffmpeg executable.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRestore(), newServe(), newProbe(), newModels(), newBench(), newDoctor(), newCheckpoint(), newVersion())
	return root
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		rev, dirty := "", ""
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = "-dirty"
				}
			}
		}
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if rev != "" {
			return "dev-" + rev + dirty
		}
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
	}
	return "dev"
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the vsr version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "vsr", versionString())
		},
	}
}
