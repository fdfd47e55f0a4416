package app

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/nvidia/dl"
	"github.com/vsr-dev/vsr/pipeline"
)

// OpenDevices opens the devices of spec through the backend registry: a
// device name ("cpu", "cuda", "cuda:1"), "auto" (the first GPU when there
// is one, else the CPU), a configuration string with its own settings
// ("cuda:0?dtype=bf16"), or a comma-separated list of these, one rank
// each: "cuda:0,cuda:1", "cuda:all" (every GPU that opens), or one device
// named more than once ("cpu,cpu", "cuda:0,cuda:0": several ranks on one
// device). A GPU gets dtype ("f16", "bf16", "f32" or "auto" = f16) and the extra
// settings ("fused_conv=off") in its configuration string.
func OpenDevices(spec, dtype string, extra ...string) ([]backend.Backend, error) {
	switch dtype {
	case "auto":
		dtype = "f16"
	case "f16", "fp16", "bf16", "f32", "fp32":
	default:
		return nil, fmt.Errorf("--dtype %q: want f16, bf16, f32 or auto", dtype)
	}
	gpu := func(dev string) string {
		return dev + "?" + strings.Join(append([]string{"dtype=" + dtype}, extra...), "&")
	}
	var devs []backend.Backend
	fail := func(err error) ([]backend.Backend, error) {
		for _, d := range devs {
			d.Close()
		}
		return nil, err
	}
	names := strings.Split(spec, ",")
	for _, one := range names {
		one = strings.TrimSpace(one)
		var b backend.Backend
		var err error
		switch {
		case one == "":
			return fail(fmt.Errorf("--device %q: an empty name in the list", spec))
		case one == "auto" && len(names) > 1:
			return fail(fmt.Errorf("--device %q: auto stands alone; list devices by name (cuda:0,cuda:1, cuda:all)", spec))
		case one == "cuda:all":
			n := 0
			for ; ; n++ {
				d, err := backend.Open(gpu(fmt.Sprintf("cuda:%d", n)))
				if err != nil {
					if n == 0 {
						return fail(fmt.Errorf("--device cuda:all: no GPU opens on this host (%v); use --device cpu", err))
					}
					break
				}
				devs = append(devs, d)
			}
			continue
		case one == "auto":
			if b, err = backend.Open(gpu("cuda")); err != nil {
				b, err = backend.Open("cpu")
			}
		case strings.Contains(one, "?"):
			b, err = backend.Open(one)
		case one == "cuda" || strings.HasPrefix(one, "cuda:"):
			b, err = backend.Open(gpu(one))
		default:
			b, err = backend.Open(one)
		}
		if err != nil {
			return fail(noDriver(err))
		}
		devs = append(devs, b)
	}
	if err := sameKind(devs); err != nil {
		return fail(fmt.Errorf("--device %s: %w", spec, err))
	}
	return devs, nil
}

// noDriver shortens err when it is a missing NVIDIA library: one line
// that says so and sends to vsr doctor, which lists the places searched
// (dl.NotFoundError's message lists them all: hundreds of characters).
// It unwraps to err.
func noDriver(err error) error {
	var nf *dl.NotFoundError
	if !errors.As(err, &nf) {
		return err
	}
	what := "the NVIDIA driver (" + nf.Name + ") was not found"
	if nf.Name != "libcuda" {
		what = "the NVIDIA library " + nf.Name + " was not found"
	}
	return &shortError{"no usable NVIDIA GPU: " + what + ": run vsr doctor for the details, or use --device cpu", err}
}

// shortError is an error with a shorter message than the error it wraps.
type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }

// sameKind refuses ranks of different kinds: a CPU beside a GPU, GPUs of
// different models or storage types. Ranks must compute the same bytes
// for the same work (several ranks give the output of one).
func sameKind(devs []backend.Backend) error {
	kind := func(b backend.Backend) string {
		if g, ok := b.(backend.GPU); ok {
			return g.DeviceName() + " (" + g.StorageType() + ")"
		}
		return "CPU"
	}
	for _, d := range devs[1:] {
		if a, b := kind(devs[0]), kind(d); a != b {
			return fmt.Errorf("the ranks must be devices of one kind, not %s (%s) and %s (%s)", devs[0].Name(), a, d.Name(), b)
		}
	}
	return nil
}

// StorageType resolves dtype "auto" for the models of specs: the storage
// type a family needs (bf16 for SwiftVR), else f16.
func StorageType(dtype string, specs ...string) string {
	switch dtype {
	case "fp8": // bf16 storage, the SwiftVR DiT's linear layers in fp8 (dit-dtype)
		return "bf16"
	case "auto":
	default:
		return dtype
	}
	for _, s := range specs {
		if f, err := model.Find(s); err == nil && f.StorageType() != "" {
			return f.StorageType()
		}
	}
	return "f16"
}

// IsGPU reports whether b runs on a GPU (a capability, not a name).
func IsGPU(b backend.Backend) bool {
	_, ok := b.(backend.GPU)
	return ok
}

// BatchSize is n, or the automatic choice: 8 frames per model call on a
// GPU, 1 on the CPU.
func BatchSize(n int, b backend.Backend) int {
	switch {
	case n > 0:
		return n
	case IsGPU(b):
		return 8
	}
	return 1
}

// SegmentCount is n, or the automatic choice: on a GPU with 8+ CPU cores,
// 4 segments for a model that reads the video as independent parts (each
// with its decoder) and 8 for a causal one, whose single stream reaches
// the encoders one segment after the other, so that shorter segments leave
// less work for the last encoder (docs/BENCHMARKS.md).
func SegmentCount(n int, b backend.Backend, eng pipeline.Engine) int {
	_, causal := eng.(model.Planner)
	switch {
	case n > 0:
		return n
	case IsGPU(b) && runtime.NumCPU() >= 8 && causal:
		return 8
	case IsGPU(b) && runtime.NumCPU() >= 8:
		return 4
	}
	return 1
}
