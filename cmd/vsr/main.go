// Command vsr restores and upscales video with neural networks. It holds
// the flags, printing and progress; the work is package app's.
//
// Subcommands: restore, bench, serve, probe, models, doctor, checkpoint,
// version. Run `vsr help` for details.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	var got atomic.Value // the signal that stopped the run
	go func() {
		s := <-sigs
		got.Store(s)
		cancel()
	}()
	cmd, err := newRoot().ExecuteContextC(ctx)
	signal.Stop(sigs)
	if err == nil {
		return
	}
	msg := oneLine(err.Error())
	fmt.Fprintln(os.Stderr, "vsr: "+msg)
	if cmd != nil {
		if f := cmd.Flags().Lookup("json"); f != nil && f.Value.String() == "true" {
			json.NewEncoder(os.Stdout).Encode(map[string]string{"error": msg})
		}
	}
	os.Exit(exitCode(got.Load()))
}

// exitCode is 1 for an error, or as shells report a process stopped by a
// signal: 130 after Ctrl-C (SIGINT), 143 after SIGTERM.
func exitCode(sig any) int {
	switch sig {
	case os.Interrupt:
		return 130
	case syscall.SIGTERM:
		return 143
	}
	return 1
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "vsr",
		Short:         "Restore and upscale video with neural networks",
		Long:          "vsr restores and upscales video with neural networks, on the CPU or NVIDIA GPUs.\nVideo goes in and out through the ffmpeg executable.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRestore(), newServe(), newWorker(), newProbe(), newModels(), newBench(), newDoctor(), newCheckpoint(), newVersion())
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
		Args:  noArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "vsr", versionString())
		},
	}
}

// Argument validators that name the usage line in their errors.
var noArgs = withUsage(cobra.NoArgs)

func exactArgs(n int) cobra.PositionalArgs { return withUsage(cobra.ExactArgs(n)) }
func maxArgs(n int) cobra.PositionalArgs   { return withUsage(cobra.MaximumNArgs(n)) }

func withUsage(v cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := v(cmd, args); err != nil {
			return usageError(cmd, err.Error())
		}
		return nil
	}
}
