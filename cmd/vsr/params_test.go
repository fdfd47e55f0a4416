package main

import (
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/model"
)

// TestHelpFromRegistry: the help texts that list families name every
// registered family, each as it says of itself (model.About).
func TestHelpFromRegistry(t *testing.T) {
	d := dtypeHelp()
	for _, f := range model.Families() {
		if !strings.Contains(d, f.About().Title) {
			t.Errorf("--dtype's help does not name %s: %q", f.About().Title, d)
		}
	}
	for _, want := range []string{"f32 (float32 without TF32; CDA-VSR and compact models)", "auto (bf16 for SwiftVR, else f16)", "fp8 (SwiftVR: "} {
		if !strings.Contains(d, want) {
			t.Errorf("--dtype's help: %q, want %q in it", d, want)
		}
	}
	for _, c := range []string{"restore", "serve"} {
		cmd, _, err := newRoot().Find([]string{c})
		if err != nil {
			t.Fatal(err)
		}
		h := cmd.Flags().Lookup("model").Usage
		if !strings.Contains(h, model.Specs()) || !strings.Contains(h, "realesr-animevideov3") || strings.Contains(h, "`") {
			t.Errorf("vsr %s --model's help: %q", c, h)
		}
	}
	var synths []string
	for _, f := range synthFamilies() {
		synths = append(synths, f.Name())
	}
	if got := strings.Join(synths, ","); got != "cdavsr,swiftvr" {
		t.Errorf("synth's families: %s", got)
	}
	// checkpoint synth and inspect have a flag for each option of each
	// family that they take.
	synth, _, _ := newRoot().Find([]string{"checkpoint", "synth"})
	inspect, _, _ := newRoot().Find([]string{"checkpoint", "inspect"})
	for _, f := range model.Families() {
		var ps []model.Param
		if s, ok := f.(model.Synther); ok {
			ps = s.SynthParams()
		}
		for _, p := range ps {
			if fl := synth.Flags().Lookup(p.Name); fl == nil || !strings.Contains(fl.Usage, p.Help) {
				t.Errorf("checkpoint synth: no flag for %s's %s, or another help", f.Name(), p.Name)
			}
		}
		i, ok := f.(model.Inspector)
		if !ok {
			continue
		}
		for _, p := range i.InspectParams() {
			if fl := inspect.Flags().Lookup(p.Name); fl == nil || !strings.Contains(fl.Usage, p.Help) {
				t.Errorf("checkpoint inspect: no flag for %s's %s, or another help", f.Name(), p.Name)
			}
		}
		if !strings.Contains(inspect.Long, f.About().Title) {
			t.Errorf("checkpoint inspect's help does not name %s's checkpoints", f.Name())
		}
	}
	if n := latencyNote(family("compact"), restoreFlags{batch: 2}); n != "latency: 2 frame(s) a batch, plus the queues" {
		t.Errorf("latencyNote of compact: %q", n)
	}
	if n := latencyNote(family("swiftvr"), restoreFlags{batch: 2}); n != "latency: one chunk (28 frames, then 24) and 3 frames of lag, plus the queues" {
		t.Errorf("latencyNote of SwiftVR: %q", n)
	}
}

// family is the registered family named name, or nil.
func family(name string) model.Family {
	for _, f := range model.Families() {
		if f.Name() == name {
			return f
		}
	}
	return nil
}
