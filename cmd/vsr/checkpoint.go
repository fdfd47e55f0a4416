package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/swiftvr"
)

func newCheckpoint() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "checkpoint",
		Short: "Inspect checkpoints, or write synthetic ones for tests and benchmarks",
		Args:  noArgs,
	}
	cmd.AddCommand(newCheckpointInspect(), newCheckpointSynth(), newCheckpointQuantize())
	return cmd
}

func newCheckpointInspect() *cobra.Command {
	var asJSON bool
	var inspectors []model.Family // the families that inspect checkpoints
	var helps, specs []string
	var lists [][]model.Param
	for _, f := range model.Families() {
		if i, ok := f.(model.Inspector); ok {
			inspectors = append(inspectors, f)
			helps = append(helps, i.InspectHelp())
			specs = append(specs, f.About().Spec)
			lists = append(lists, i.InspectParams())
		}
	}
	params := model.MergeParams(lists...)
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Check a checkpoint and list its tensors, sizes and every problem",
		Long: wrap("Check a checkpoint without loading its weights: "+model.List(helps, "or")+".\n"+
			"A PyTorch pickle (.pth) is named as such (vsr models FILE.pth shows a state dict's architecture). Exits non-zero when the checkpoint has problems.", helpWidth),
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if _, err := os.Stat(path); err != nil {
				return err
			}
			var found model.Family
			for _, f := range inspectors {
				if !f.(model.Inspector).Inspects(path) {
					continue
				}
				if found != nil {
					return fmt.Errorf("%s: both the %s and the %s family inspect it", path, found.Name(), f.Name())
				}
				found = f
			}
			if found == nil {
				return fmt.Errorf("%s is no checkpoint vsr inspects: give %s", path, model.List(specs, "or"))
			}
			set, err := paramValues(cmd.Flags(), params)
			if err != nil {
				return err
			}
			i := found.(model.Inspector)
			r, err := i.Inspect(path, model.Params{Set: set, Default: model.Defaults(i.InspectParams())})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(cmd, r.Report); err != nil {
					return err
				}
			} else {
				fmt.Fprint(cmd.OutOrStdout(), r.Text)
			}
			if n := len(r.Problems); n == 1 {
				return fmt.Errorf("checkpoint %s has a problem: %s", path, r.Problems[0])
			} else if n > 1 {
				return fmt.Errorf("checkpoint %s has %d problems (listed above)", path, n)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	addParamFlags(cmd.Flags(), params)
	return cmd
}

// synthFamilies returns the registered families that checkpoint synth
// writes (model.Synther): the values of --family.
func synthFamilies() []model.Family {
	var out []model.Family
	for _, f := range model.Families() {
		if _, ok := f.(model.Synther); ok {
			out = append(out, f)
		}
	}
	return out
}

func newCheckpointSynth() *cobra.Command {
	var family, out string
	var seed uint64
	synths := map[string]model.Synther{}
	var known, helps, outs []string
	var lists [][]model.Param
	for _, f := range synthFamilies() {
		s := f.(model.Synther)
		synths[f.Name()] = s
		known = append(known, f.Name())
		helps = append(helps, f.About().Title+" (--family "+f.Name()+"): "+s.SynthHelp())
		outs = append(outs, f.About().Spec)
		lists = append(lists, s.SynthParams())
	}
	params := model.MergeParams(lists...)
	cmd := &cobra.Command{
		Use:   "synth --family " + strings.Join(known, "|") + " ... -o PATH",
		Short: "Write a synthetic checkpoint in the official layout, with deterministic random weights",
		Long: wrap("Write a synthetic checkpoint with the official file names, tensor names, shapes and dtypes and "+
			"deterministic random weights scaled to keep activations finite: for tests and benchmarks.\n"+
			strings.Join(helps, "\n"), helpWidth),
		Example: `  vsr checkpoint synth --family swiftvr --preset tiny -o /tmp/swiftvr-tiny
  vsr checkpoint synth --family cdavsr --scale 4 -o /tmp/cdavsr.safetensors --seed 1`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s := synths[family]
			if s == nil {
				return fmt.Errorf("unknown family %q (known: %s)", family, strings.Join(known, ", "))
			}
			set, err := paramValues(cmd.Flags(), params)
			if err != nil {
				return err
			}
			return s.Synth(cmd.OutOrStdout(), out, seed, model.Params{Set: set, Default: model.Defaults(s.SynthParams())})
		},
	}
	// SwiftVR is the default, as it was before other families had
	// synthetic checkpoints.
	cmd.Flags().StringVar(&family, "family", swiftvr.Family, "model family ("+model.List(known, "or")+")")
	cmd.Flags().StringVarP(&out, "output", "o", "", "output: "+model.List(outs, "or"))
	cmd.Flags().Uint64Var(&seed, "seed", 1, "random seed for the weights")
	addParamFlags(cmd.Flags(), params)
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

func newCheckpointQuantize() *cobra.Command {
	var dtype string
	cmd := &cobra.Command{
		Use:   "quantize --dtype fp8 IN OUT",
		Short: "Write a copy of a SwiftVR checkpoint with the DiT's linear weights in fp8",
		Long: "Write to the new directory OUT a copy of the SwiftVR checkpoint IN whose DiT linear weights (the\n" +
			"blocks' attention projections and feed-forward layers) are float8 e4m3 with a float32 scale per\n" +
			"output channel, in LightX2V's fp8 layout (NAME.weight in F8_E4M3, NAME.weight_scale [out, 1]);\n" +
			"every other file and tensor is copied as it was. vsr reads such checkpoints (its own or\n" +
			"LightX2V's) as they are, dequantizing the weights at load.",
		Example: `  vsr checkpoint quantize --dtype fp8 ~/models/swiftvr ~/models/swiftvr-fp8`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if dtype != "fp8" {
				return fmt.Errorf("--dtype %q: fp8 is the one quantization vsr writes", dtype)
			}
			start := time.Now()
			if err := swiftvr.Quantize(args[0], args[1]); err != nil {
				return err
			}
			r := swiftvr.Inspect(args[1])
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d DiT weights in fp8 e4m3 with per-channel scales, in %.1f s\n", args[1], r.FP8, time.Since(start).Seconds())
			return nil
		},
	}
	cmd.Flags().StringVar(&dtype, "dtype", "", "the number format: fp8 (float8 e4m3, a scale per output channel)")
	_ = cmd.MarkFlagRequired("dtype")
	return cmd
}

// helpWidth is the width of the help texts that wrap builds.
const helpWidth = 100

// wrap breaks each line of s into lines of at most width characters, at
// spaces (a longer word is a line of its own).
func wrap(s string, width int) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		cur := ""
		for _, w := range strings.Fields(line) {
			if cur != "" && len(cur)+1+len(w) > width {
				out = append(out, cur)
				cur = ""
			}
			if cur != "" {
				cur += " "
			}
			cur += w
		}
		out = append(out, cur)
	}
	return strings.Join(out, "\n")
}
