package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/cdavsr"
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
	var size string
	cmd := &cobra.Command{
		Use:   "inspect PATH",
		Short: "Check a checkpoint and list its tensors, sizes and every problem",
		Long: "Check a checkpoint without loading its weights: a SwiftVR directory (reae.safetensors,\n" +
			"prompt_embedding.safetensors and transformer/: every expected tensor, its shape and dtype,\n" +
			"config.json) or a CDA-VSR .safetensors file (its contract: metadata, one weight set, the 179\n" +
			"names, shapes and dtypes, the scale, the gate; --size WxH gives the state's memory).\n" +
			"A PyTorch pickle or zip is named as such. Exits non-zero when the checkpoint has problems.",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if st, err := os.Stat(args[0]); err == nil && st.Mode().IsRegular() {
				return inspectCDAVSR(cmd, args[0], size, asJSON)
			}
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
	cmd.Flags().StringVar(&size, "size", "", "CDA-VSR: input size WxH at which to report the state's memory")
	return cmd
}

// inspectCDAVSR reports a single-file checkpoint against CDA-VSR's
// contract.
func inspectCDAVSR(cmd *cobra.Command, path, size string, asJSON bool) error {
	var w, h int
	if size != "" {
		if _, err := fmt.Sscanf(size, "%dx%d", &w, &h); err != nil || w <= 0 || h <= 0 {
			return fmt.Errorf("--size %q: want WxH, e.g. 640x360", size)
		}
	}
	c, err := cdavsr.Inspect(path, w, h)
	if err != nil {
		return err
	}
	if asJSON {
		if err := printJSON(cmd, c); err != nil {
			return err
		}
	} else {
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "family      cdavsr\nprefix      %q\ntensors     %d of 179\nscale       %d\ngate        %s\nparameters  %d\n", c.Prefix, c.Tensors, c.Scale, c.Gate, c.Parameters)
		if c.StateBytes > 0 {
			fmt.Fprintf(out, "state       %d bytes at %dx%d (two float32 buffers of 128 channels)\n", c.StateBytes, w, h)
		}
		for _, p := range c.Problems {
			fmt.Fprintf(out, "problem     %s\n", p)
		}
	}
	if n := len(c.Problems); n == 1 {
		return fmt.Errorf("checkpoint %s has a problem: %s", path, c.Problems[0])
	} else if n > 1 {
		return fmt.Errorf("checkpoint %s has %d problems (listed above)", path, n)
	}
	return nil
}

// synthOptions are checkpoint synth's flags.
type synthOptions struct {
	preset, out, gate, prefix string
	seed                      uint64
	scale                     int
	outliers                  float32
}

// synths write a synthetic checkpoint of a family, by the family's name
// (model.Family's Name).
var synths = map[string]func(cmd *cobra.Command, o synthOptions) error{
	swiftvr.Family: synthSwiftVR,
	"cdavsr":       synthCDAVSR,
}

// synthFamilies lists the registered families that synth writes: the
// values of --family.
func synthFamilies() []string {
	var out []string
	for _, f := range model.Families() {
		if synths[f.Name()] != nil {
			out = append(out, f.Name())
		}
	}
	return out
}

func newCheckpointSynth() *cobra.Command {
	var family string
	var o synthOptions
	known := synthFamilies()
	cmd := &cobra.Command{
		Use:   "synth --family " + strings.Join(known, "|") + " ... -o PATH",
		Short: "Write a synthetic checkpoint in the official layout, with deterministic random weights",
		Long: "Write a synthetic checkpoint with the official file names, tensor names, shapes and dtypes and\n" +
			"deterministic random weights scaled to keep activations finite: for tests and benchmarks.\n" +
			"Presets: full (the published sizes: about 10 GB), block (one DiT block at the full width, a small\n" +
			"ReAE and prompt: for kernel tests at real shapes) and tiny (every layer, small widths).\n" +
			"DIR's parent must exist; DIR must not exist or be empty.\n" +
			"CDA-VSR (--family cdavsr): one .safetensors file with the 179 tensors of the contract at\n" +
			"--scale 2, 3 or 4, the metadata cda_vsr.residual_unit=luma-range, the gate (--gate sigmoid\n" +
			"sets cda_vsr.gate) and every name under --prefix (e.g. params_ema.).",
		Example: `  vsr checkpoint synth --family swiftvr --preset tiny -o /tmp/swiftvr-tiny
  vsr checkpoint synth --family cdavsr --scale 4 -o /tmp/cdavsr.safetensors --seed 1`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !slices.Contains(known, family) {
				return fmt.Errorf("unknown family %q (known: %s)", family, strings.Join(known, ", "))
			}
			return synths[family](cmd, o)
		},
	}
	cmd.Flags().StringVar(&family, "family", swiftvr.Family, "model family ("+model.List(known, "or")+")")
	cmd.Flags().StringVar(&o.preset, "preset", "tiny", "SwiftVR size preset: "+strings.Join(swiftvr.Presets(), " or "))
	cmd.Flags().StringVarP(&o.out, "output", "o", "", "output directory (SwiftVR; created, its parent must exist) or file (CDA-VSR)")
	cmd.Flags().IntVar(&o.scale, "scale", 4, "CDA-VSR: upscaling factor, 2, 3 or 4")
	cmd.Flags().StringVar(&o.gate, "gate", "", "CDA-VSR: sigmoid for aligned*sigmoid(w); empty for aligned*(1+w)")
	cmd.Flags().StringVar(&o.prefix, "prefix", "", "CDA-VSR: prefix of every tensor name (e.g. params_ema.)")
	cmd.Flags().Uint64Var(&o.seed, "seed", 1, "random seed for the weights")
	cmd.Flags().Float32Var(&o.outliers, "outliers", 0, fmt.Sprintf("SwiftVR: make every %dth output channel of the DiT blocks' linear layers this many times larger (the outlier channels of trained transformers, for fp8 checks); 0 for none", swiftvr.OutlierEvery))
	_ = cmd.MarkFlagRequired("output")
	return cmd
}

// synthSwiftVR writes a synthetic SwiftVR checkpoint.
func synthSwiftVR(cmd *cobra.Command, o synthOptions) error {
	if o.out == "" {
		return fmt.Errorf("no output directory: pass -o DIR")
	}
	specs, _ := swiftvr.Layout(o.preset)
	if specs == nil {
		return fmt.Errorf("unknown preset %q (known: %s)", o.preset, strings.Join(swiftvr.Presets(), ", "))
	}
	var params, size int64
	for i := range specs {
		params += specs[i].Elems()
		size += specs[i].Bytes()
	}
	start := time.Now()
	if o.outliers != 0 && o.outliers <= 1 {
		return fmt.Errorf("--outliers %g: want a factor above 1 (or 0 for none)", o.outliers)
	}
	if err := swiftvr.SynthOutliers(o.out, o.preset, o.seed, o.outliers); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %s %s checkpoint to %s: %d tensors, %d parameters, %.2f GB, seed %d, in %.1f s\n",
		swiftvr.Family, o.preset, o.out, len(specs), params, float64(size)/1e9, o.seed, time.Since(start).Seconds())
	return nil
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

// synthCDAVSR writes a synthetic CDA-VSR checkpoint.
func synthCDAVSR(cmd *cobra.Command, o synthOptions) error {
	out, scale, gate, prefix, seed := o.out, o.scale, o.gate, o.prefix, o.seed
	if scale < 2 || scale > 4 {
		return fmt.Errorf("--scale %d: want 2, 3 or 4", scale)
	}
	if gate != "" && gate != cdavsr.GateSigmoid {
		return fmt.Errorf("--gate %q: want sigmoid, or nothing for aligned*(1+w)", gate)
	}
	ts := cdavsr.Synthesize(scale, seed)
	params := 0
	for i := range ts {
		ts[i].Name = prefix + ts[i].Name
		params += len(ts[i].Data) / 4
	}
	meta := map[string]string{cdavsr.MetaResidualUnit: cdavsr.ResidualUnit}
	if gate != "" {
		meta[cdavsr.MetaGate] = gate
	}
	if err := safetensors.Write(out, ts, meta); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote cdavsr x%d checkpoint to %s: %d tensors, %d parameters, seed %d\n", scale, out, len(ts), params, seed)
	return nil
}
