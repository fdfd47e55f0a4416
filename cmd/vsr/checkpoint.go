package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/model/swiftvr"
)

func newCheckpoint() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Inspect checkpoints, or write synthetic ones for tests and benchmarks",
		Args:  noArgs,
	}
	cmd.AddCommand(newCheckpointInspect(), newCheckpointSynth())
	return cmd
}

func newCheckpointInspect() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Check a checkpoint directory and list its files, tensors, sizes and every problem",
		Long: "Check a checkpoint directory (SwiftVR: reae.safetensors, prompt_embedding.safetensors and transformer/)\n" +
			"without loading its weights: every expected tensor, its shape and dtype, config.json.\n" +
			"Exits non-zero when the checkpoint has problems.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := swiftvr.CheckDir(args[0]); err != nil {
				return err
			}
			r := swiftvr.Inspect(args[0])
			if asJSON {
				if err := printJSON(cmd, r); err != nil {
					return err
				}
			} else {
				fmt.Fprint(cmd.OutOrStdout(), r.String())
			}
			if !r.OK() {
				if len(r.Problems) == 1 {
					return fmt.Errorf("checkpoint %s has a problem: %s", args[0], r.Problems[0])
				}
				return fmt.Errorf("checkpoint %s has %d problems (listed above)", args[0], len(r.Problems))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func newCheckpointSynth() *cobra.Command {
	var family, preset, out string
	var seed uint64
	cmd := &cobra.Command{
		Use:   "synth --family swiftvr --preset tiny|block|full -o DIR",
		Short: "Write a synthetic checkpoint in the official layout, with deterministic random weights",
		Long: "Write a synthetic checkpoint with the official file names, tensor names, shapes and dtypes and\n" +
			"deterministic random weights scaled to keep activations finite: for tests and benchmarks.\n" +
			"Presets: full (the published sizes: about 10 GB), block (one DiT block at the full width, a small\n" +
			"ReAE and prompt: for kernel tests at real shapes) and tiny (every layer, small widths).\n" +
			"DIR's parent must exist; DIR must not exist or be empty.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if family != swiftvr.Family {
				return fmt.Errorf("unknown family %q (known: %s)", family, swiftvr.Family)
			}
			if out == "" {
				return fmt.Errorf("no output directory: pass -o DIR")
			}
			specs, _ := swiftvr.Layout(preset)
			if specs == nil {
				return fmt.Errorf("unknown preset %q (known: %s)", preset, strings.Join(swiftvr.Presets(), ", "))
			}
			var params, size int64
			for i := range specs {
				params += specs[i].Elems()
				size += specs[i].Bytes()
			}
			start := time.Now()
			if err := swiftvr.Synth(out, preset, seed); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s %s checkpoint to %s: %d tensors, %d parameters, %.2f GB, seed %d, in %.1f s\n",
				family, preset, out, len(specs), params, float64(size)/1e9, seed, time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().StringVar(&family, "family", swiftvr.Family, "model family (swiftvr)")
	cmd.Flags().StringVar(&preset, "preset", "tiny", "size preset: "+strings.Join(swiftvr.Presets(), " or "))
	cmd.Flags().StringVarP(&out, "output", "o", "", "output directory (created; its parent must exist)")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed for the weights")
	_ = cmd.MarkFlagRequired("output")
	return cmd
}
