package main

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/compact"
)

// inspectStateDict says what the state dict at path is and what graph vsr
// runs of it (or prints the graph's .param, with showParam). The
// architecture is told from the file's header (names, shapes, types);
// the tensors are read only to build the graph of one vsr runs.
func inspectStateDict(cmd *cobra.Command, path string, asJSON, showParam bool) error {
	h, err := arch.Open(path, true)
	if err != nil {
		return err
	}
	info, err := arch.Detect(h)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	arch.Name(info, path)
	var gi *compact.GraphInfo
	var param []byte
	runErr := info.Check()
	if runErr == nil {
		d, err := arch.Open(path, false)
		if err != nil {
			return err
		}
		g, err := arch.Build(info, d)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if gi, err = compact.Inspect(cpu.New(1), g.Param, g.Bin); err != nil {
			return fmt.Errorf("%s: the graph vsr builds: %w", path, err)
		}
		param = g.Param
	}
	if showParam {
		if runErr != nil {
			return fmt.Errorf("%s: %w", path, runErr)
		}
		_, err := cmd.OutOrStdout().Write(param)
		return err
	}
	if asJSON {
		return printJSON(cmd, map[string]any{"file": path, "model": info, "graph": gi})
	}
	w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "file\t%s\n", path)
	fmt.Fprintf(w, "architecture\t%s, %s\n", info.Title(), info.Kind)
	if info.Scale > 0 {
		fmt.Fprintf(w, "scale\tx%d\n", info.Scale)
		fmt.Fprintf(w, "channels\t%d in, %d out\n", info.In, info.Out)
	}
	if info.Features > 0 {
		f := fmt.Sprint(info.Features)
		if info.Growth > 0 {
			f += fmt.Sprintf(", growth %d", info.Growth)
		}
		fmt.Fprintf(w, "features\t%s\n", f)
	}
	if info.Blocks > 0 {
		fmt.Fprintf(w, "blocks\t%d\n", info.Blocks)
	}
	if info.Activation != "" {
		fmt.Fprintf(w, "activation\t%s\n", info.Activation)
	}
	fmt.Fprintf(w, "parameters\t%.2fM (%d)\n", float64(info.Params)/1e6, info.Params)
	switch {
	case info.MACs > 0:
		fmt.Fprintf(w, "operations\t%.1fk multiply-accumulates per output pixel (2 FLOPs each)\n", info.MACs/1e3)
	case gi != nil && gi.TFLOP > 0 && info.Scale > 0:
		// A U-Net's layers run at several resolutions: count its graph's.
		macs := gi.TFLOP * 1e12 / 2 / float64(640*360*info.Scale*info.Scale)
		fmt.Fprintf(w, "operations\t%.1fk multiply-accumulates per output pixel as vsr's graph runs it, for a 640x360 input (2 FLOPs each)\n", macs/1e3)
	}
	for i, e := range info.Evidence {
		head := ""
		if i == 0 {
			head = "evidence"
		}
		fmt.Fprintf(w, "%s\t%s\n", head, e)
	}
	if gi != nil {
		var layers []string
		for _, k := range slices.Sorted(maps.Keys(gi.Layers)) {
			layers = append(layers, fmt.Sprintf("%s %d", k, gi.Layers[k]))
		}
		fmt.Fprintf(w, "graph\tncnn layers %s (vsr models %s --param prints them)\n", strings.Join(layers, ", "), path)
		if gi.Whole != "" {
			fmt.Fprintf(w, "tiles\tnone: whole frames only (%s)\n", gi.Whole)
		} else {
			fmt.Fprintf(w, "halo\t%d pixels (tiles smaller than about %d pixels mostly recompute it)\n", gi.Halo, 4*gi.Halo)
		}
		fmt.Fprintf(w, "cost\t%.2f TFLOP per 640x360 frame\n", gi.TFLOP)
	}
	if runErr != nil {
		fmt.Fprintf(w, "verdict\t%v\n", runErr)
	} else {
		fmt.Fprintf(w, "verdict\tvsr runs it: vsr restore IN -o OUT --model %s\n", path)
	}
	return w.Flush()
}

// stateDicts lists the state dicts in the models folder dir (its ncnn
// files are listed as fetchable models).
func stateDicts(dir string) []compact.FolderModel {
	fm, _ := compact.Folder(dir)
	out := []compact.FolderModel{}
	for _, m := range fm {
		if !strings.HasSuffix(m.File, ".param") {
			out = append(out, m)
		}
	}
	return out
}

func newModelsConvert() *cobra.Command {
	return &cobra.Command{
		Use:   "convert IN OUT.safetensors",
		Short: "Write a state dict (.pth or .safetensors) as .safetensors, with its architecture in the metadata",
		Long: `Reads the state dict IN (a PyTorch .pth, read without running any of its
code, or a .safetensors file) and writes its tensors, unchanged, to
OUT.safetensors, with the architecture vsr recognises in the metadata
(architecture, architecture_variant, scale; act_type for an SRVGGNetCompact
with a weightless activation). A state dict of an architecture vsr does not
know is written without them. Entries that are not F32, F16 or BF16 tensors
(BatchNorm's num_batches_tracked, values that are not tensors) are left out
and listed.`,
		Example: `  vsr models convert RealESRGAN_x4plus.pth RealESRGAN_x4plus.safetensors`,
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			in, out := args[0], args[1]
			if !strings.HasSuffix(out, ".safetensors") {
				return usageError(cmd, fmt.Sprintf("the output %q must end in .safetensors", out))
			}
			if a, err := os.Stat(in); err != nil {
				return err
			} else if b, err := os.Stat(out); err == nil && os.SameFile(a, b) {
				return usageError(cmd, fmt.Sprintf("the output %q is the input: give another path", out))
			}
			d, skipped, err := arch.OpenWithSkipped(in)
			if err != nil {
				return err
			}
			info, err := arch.Detect(d)
			what := "architecture not recognised"
			if err == nil {
				arch.Name(info, in)
				what = info.Summary()
			} else {
				info = nil
			}
			if err := arch.Write(out, d, info); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d tensors, %s\n", out, len(d.Keys), what)
			if len(skipped) > 0 {
				var s []string
				for _, e := range skipped {
					s = append(s, e.Key+" ("+e.Why+")")
				}
				what := "entries that are no float tensors"
				if len(s) == 1 {
					what = "entry that is no float tensor"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "left out %d %s: %s\n", len(s), what, strings.Join(s, ", "))
			}
			return nil
		},
	}
}
