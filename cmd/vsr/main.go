// Command vsr restores and upscales video with neural networks. It holds
// the flags, printing and progress; the work is package app's.
//
// Subcommands: restore, bench, serve, probe, models, doctor, checkpoint,
// version. Run `vsr help` for details.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
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
	sig := got.Load()
	msg := oneLine(err.Error())
	if sig != nil {
		msg = interrupted(sig)
	}
	fmt.Fprintln(os.Stderr, "vsr: "+msg)
	var done *reportedError
	if cmd != nil && !errors.As(err, &done) {
		if f := cmd.Flags().Lookup("json"); f != nil && f.Value.String() == "true" {
			json.NewEncoder(os.Stdout).Encode(map[string]string{"error": msg})
		}
	}
	os.Exit(exitCode(sig))
}

// interrupted is the message of a run stopped by signal sig, in place of
// the error it made (a cancelled context's).
func interrupted(sig any) string {
	if sig == syscall.SIGTERM {
		return "interrupted (SIGTERM)"
	}
	return "interrupted"
}

// reportedError is an error that the --json document already printed on
// stdout reports: the exit status says it, and no second document does.
type reportedError struct{ error }

func (e *reportedError) Unwrap() error { return e.error }

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
	forCommandLine(root)
	return root
}

// versionString is vsr's version: the one set at build time, else "dev-"
// and the VCS revision the build stamped, else the module's (go install
// ...@v1.2.3), else "(devel), unknown revision".
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(version, bi)
}

// versionOf is versionString's choice from the version set at build time
// and the build information (nil when there is none).
func versionOf(set string, bi *debug.BuildInfo) string {
	if set != "" {
		return set
	}
	if bi == nil {
		return "(devel), unknown revision"
	}
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
	switch v := bi.Main.Version; {
	case rev != "":
		return "dev-" + rev[:min(len(rev), 12)] + dirty
	case v != "" && v != "(devel)":
		return v
	}
	return "(devel), unknown revision"
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the vsr version, and the Go release and platform it was built with",
		Args:  noArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "vsr %s, %s %s/%s\n", versionString(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
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
