// Package nvidia gathers what vsr can use of a machine's NVIDIA stack: the
// driver, each GPU and the libraries found (see [Report]). The bindings
// live in the packages below: dl (library search), cuda (driver API),
// nvrtc (run-time compiler) and nvml (management library).
package nvidia

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/vsr-dev/vsr/nvidia/cuda"
	"github.com/vsr-dev/vsr/nvidia/dl"
	"github.com/vsr-dev/vsr/nvidia/nvml"
	"github.com/vsr-dev/vsr/nvidia/nvrtc"
)

// Report is what `vsr doctor` shows: the driver, the GPUs and the NVIDIA
// libraries. It formats for people with String and for programs as JSON.
type Report struct {
	// DriverVersion is the NVIDIA driver's version, e.g. "580.159.04".
	DriverVersion string `json:"driver_version,omitempty"`
	// CUDAVersion is the CUDA version the driver supports, e.g. "13.0".
	CUDAVersion string `json:"cuda_driver_api_version,omitempty"`
	// GPUs lists the CUDA devices in CUDA's order.
	GPUs []GPU `json:"gpus"`
	// NoGPU, when set, says why no GPU can be used; String prints it as
	// "no NVIDIA GPU found: <reason>".
	NoGPU string `json:"no_gpu,omitempty"`
	// Libraries lists each library vsr loads, found or not.
	Libraries []Library `json:"libraries"`
}

// GPU describes one CUDA device.
type GPU struct {
	Index             int    `json:"index"`                // CUDA ordinal
	Name              string `json:"name"`                 // e.g. "NVIDIA H200"
	UUID              string `json:"uuid,omitempty"`       // "GPU-..."
	PCIBusID          string `json:"pci_bus_id,omitempty"` // "0000:19:00.0"
	ComputeCapability string `json:"compute_capability"`   // "9.0"
	SMCount           int    `json:"sm_count"`             // streaming multiprocessors
	MemoryTotal       uint64 `json:"memory_total_bytes"`   // device memory
	MemoryFree        uint64 `json:"memory_free_bytes"`    // free now (NVML, else cuMemGetInfo)
	// Peers are the other GPUs this one reaches directly (peer access,
	// over NVLink or PCIe): what several ranks on one host exchange over
	// without the host. Empty on a host of one GPU.
	Peers []int `json:"peers"`
	// Error is set when a property could not be read.
	Error string `json:"error,omitempty"`
}

// Library is one shared library: where it was found and its version, or
// the search error.
type Library struct {
	Name    string `json:"name"`              // short name, e.g. "libnvrtc"
	Found   bool   `json:"found"`             // whether it loaded
	Path    string `json:"path,omitempty"`    // where it was loaded from
	Version string `json:"version,omitempty"` // as the library reports it
	Error   string `json:"error,omitempty"`   // search error, or version query error
}

// GetReport gathers the report. It does not fail for a missing GPU or
// library (those are in the report); the error is only ctx's, with the
// report as far as it got.
func GetReport(ctx context.Context) (*Report, error) {
	r := &Report{GPUs: []GPU{}}
	steps := []func(*Report){gatherDriver, gatherGPUs, gatherLibraries}
	for _, step := range steps {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		step(r)
	}
	return r, ctx.Err()
}

func gatherDriver(r *Report) {
	if v, err := nvml.DriverVersion(); err == nil {
		r.DriverVersion = v
	}
	if v, err := cuda.DriverVersion(); err == nil {
		r.CUDAVersion = cuda.VersionString(v)
	} else if v, err := nvml.CUDADriverVersion(); err == nil {
		r.CUDAVersion = cuda.VersionString(v)
	}
}

func gatherGPUs(r *Report) {
	if err := cuda.Init(); err != nil {
		if errors.Is(err, dl.ErrNotFound) {
			r.NoGPU = "libcuda.so.1 not found: the NVIDIA driver is not installed or not visible here (see libcuda below)"
		} else {
			r.NoGPU = err.Error()
		}
		return
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		r.NoGPU = err.Error()
		return
	}
	if n == 0 {
		r.NoGPU = "the CUDA driver reports no devices (check CUDA_VISIBLE_DEVICES)"
		return
	}
	for i := 0; i < n; i++ {
		g := GPU{Index: i}
		var errs []string
		note := func(err error) {
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
		d, err := cuda.GetDevice(i)
		if err != nil {
			g.Error = err.Error()
			r.GPUs = append(r.GPUs, g)
			continue
		}
		g.Name, err = d.Name()
		note(err)
		major, minor, err := d.ComputeCapability()
		note(err)
		g.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
		g.SMCount, err = d.SMCount()
		note(err)
		g.MemoryTotal, err = d.TotalMem()
		note(err)
		g.UUID, _ = d.UUID()
		g.PCIBusID, _ = d.PCIBusID()
		// Free memory from NVML needs no CUDA context; without NVML, ask
		// the driver through the primary context.
		free, ok := uint64(0), false
		if g.UUID != "" {
			if nd, err := nvml.DeviceByUUID(g.UUID); err == nil {
				if m, err := nd.Memory(); err == nil {
					free, ok = m.Free, true
				}
			}
		}
		if !ok {
			if c, err := d.PrimaryContext(); err == nil {
				free, _, err = c.MemInfo()
				note(err)
				c.Close()
			} else {
				note(err)
			}
		}
		g.MemoryFree = free
		g.Peers = []int{}
		for j := 0; j < n; j++ {
			if p, err := cuda.GetDevice(j); err == nil && j != i {
				if can, err := d.CanAccessPeer(p); err == nil && can {
					g.Peers = append(g.Peers, j)
				}
			}
		}
		g.Error = strings.Join(errs, "; ")
		r.GPUs = append(r.GPUs, g)
	}
}

func gatherLibraries(r *Report) {
	lib := func(spec dl.Spec, version func(*dl.Library) (string, error)) {
		e := Library{Name: spec.Name}
		l, err := dl.Load(spec)
		if err != nil {
			e.Error = err.Error()
			r.Libraries = append(r.Libraries, e)
			return
		}
		e.Found, e.Path = true, l.Path
		if version != nil {
			v, err := version(l)
			if err != nil {
				e.Error = err.Error()
			}
			e.Version = v
		}
		r.Libraries = append(r.Libraries, e)
	}
	lib(dl.CUDA, func(*dl.Library) (string, error) {
		v, err := cuda.DriverVersion()
		if err != nil {
			return "", err
		}
		return cuda.VersionString(v), nil
	})
	lib(dl.NVML, func(*dl.Library) (string, error) { return nvml.DriverVersion() })
	lib(dl.NVRTC, func(*dl.Library) (string, error) {
		ma, mi, err := nvrtc.Version()
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d.%d", ma, mi), nil
	})
	lib(dl.CUDNN, func(l *dl.Library) (string, error) {
		var get func() uintptr
		if err := l.Bind(&get, "cudnnGetVersion"); err != nil {
			return "", err
		}
		v := int(get())
		if v >= 90000 { // cuDNN 9: major*10000 + minor*100 + patch
			return dl.VersionString(v), nil
		}
		return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100), nil
	})
	lib(dl.CUBLASLT, func(l *dl.Library) (string, error) {
		var get func() uintptr
		if err := l.Bind(&get, "cublasLtGetVersion"); err != nil {
			return "", err
		}
		v := int(get()) // major*10000 + minor*100 + patch
		return dl.VersionString(v), nil
	})
	lib(dl.NCCL, func(l *dl.Library) (string, error) {
		var get func(v *int32) int32
		if err := l.Bind(&get, "ncclGetVersion"); err != nil {
			return "", err
		}
		var v int32
		if rc := get(&v); rc != 0 {
			return "", fmt.Errorf("ncclGetVersion: error %d", rc)
		}
		if v >= 10000 { // NCCL >= 2.9: major*10000 + minor*100 + patch
			return dl.VersionString(int(v)), nil
		}
		return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100), nil
	})
}

// String renders the report for people.
func (r *Report) String() string { return r.Text(true) }

// Text is the report as text; without verbose, a missing library's line
// leaves out the paths searched for it.
func (r *Report) Text(verbose bool) string {
	var b strings.Builder
	switch {
	case r.DriverVersion != "" && r.CUDAVersion != "":
		fmt.Fprintf(&b, "NVIDIA driver %s, CUDA driver API %s\n", r.DriverVersion, r.CUDAVersion)
	case r.CUDAVersion != "":
		fmt.Fprintf(&b, "CUDA driver API %s\n", r.CUDAVersion)
	case r.DriverVersion != "":
		fmt.Fprintf(&b, "NVIDIA driver %s\n", r.DriverVersion)
	}
	if r.NoGPU != "" {
		fmt.Fprintf(&b, "no NVIDIA GPU found: %s\n", r.NoGPU)
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(&b, "GPU %d: %s, compute capability %s, %d SMs, memory %.1f GiB total, %.1f GiB free",
			g.Index, g.Name, g.ComputeCapability, g.SMCount, gib(g.MemoryTotal), gib(g.MemoryFree))
		if g.PCIBusID != "" {
			fmt.Fprintf(&b, " (PCI %s)", g.PCIBusID)
		}
		if len(r.GPUs) > 1 {
			peers := "none (ranks on other GPUs exchange through the host)"
			if len(g.Peers) > 0 {
				peers = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(g.Peers)), ", "), "[]")
			}
			fmt.Fprintf(&b, ", peer access to GPU %s", peers)
		}
		b.WriteString("\n")
		if g.Error != "" {
			fmt.Fprintf(&b, "  error: %s\n", g.Error)
		}
	}
	b.WriteString("libraries:\n")
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for _, l := range r.Libraries {
		if l.Found {
			v := l.Version
			if v == "" {
				v = "?"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s", l.Name, v, l.Path)
			if l.Error != "" {
				fmt.Fprintf(tw, " (%s)", l.Error)
			}
			fmt.Fprintln(tw)
		} else {
			msg := l.Error
			if i, j := strings.Index(msg, " (searched: "), strings.LastIndex(msg, "); "); !verbose && i >= 0 && j > i {
				msg = msg[:i] + msg[j+1:]
			}
			fmt.Fprintf(tw, "  %s\tmissing\t%s\n", l.Name, msg)
		}
	}
	tw.Flush()
	return b.String()
}

// JSON returns the report as indented JSON.
func (r *Report) JSON() ([]byte, error) { return json.MarshalIndent(r, "", "  ") }

func gib(b uint64) float64 { return float64(b) / (1 << 30) }
