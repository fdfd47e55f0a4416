package serve

import (
	"net/http"
	"runtime"
	"strconv"
)

// Device is one compute device of the service as GET /v1/devices shows
// it. The memory and utilisation fields are those the device can report:
// a GPU's from NVML, none of them on the CPU.
type Device struct {
	Name string `json:"name"` // "cpu", "cuda:0"
	Kind string `json:"kind"` // "cpu" or "gpu"
	// Model is the product ("NVIDIA H100 80GB HBM3"), or for the CPU the
	// number of logical CPUs ("16 CPUs").
	Model string `json:"model,omitempty"`
	// MemoryTotal and MemoryUsed are the device's memory in bytes, as the
	// driver reports it (every process's); PoolPeak is the high-water mark
	// of what this service's engine allocated on it.
	MemoryTotal int64 `json:"memory_total_bytes,omitempty"`
	MemoryUsed  int64 `json:"memory_used_bytes,omitempty"`
	PoolPeak    int64 `json:"pool_peak_bytes,omitempty"`
	// Utilization is the percentage of the last sample period in which a
	// kernel ran, MemoryUtilization that in which memory was read or
	// written; nil where the device cannot say.
	Utilization       *int `json:"utilization_percent,omitempty"`
	MemoryUtilization *int `json:"memory_utilization_percent,omitempty"`
	// Error says why the device's figures are missing, when it could not
	// report them.
	Error string `json:"error,omitempty"`
}

// CPUDevice is the CPU as GET /v1/devices lists it.
func CPUDevice() Device {
	return Device{Name: "cpu", Kind: "cpu", Model: plural(runtime.NumCPU(), "CPU")}
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func (a *api) handleDevices(w http.ResponseWriter, r *http.Request) {
	devs := []Device{CPUDevice()}
	if d, ok := a.runner.(DeviceReporter); ok {
		devs = append(devs[:0], d.DeviceStats()...)
	}
	writeJSON(w, http.StatusOK, map[string]any{"devices": devs})
}
