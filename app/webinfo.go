package app

import (
	"fmt"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/nvidia/nvml"
	"github.com/vsr-dev/vsr/serve"
)

// familyParams lists each registered family with the parameters a
// request may set (not the command line's own), for the service's
// metadata: the page builds its form from it, so that a new family's
// parameters appear there by themselves.
func familyParams() []map[string]any {
	kinds := map[model.Kind]string{model.Int: "int", model.Float: "float", model.String: "string", model.Shape: "shape"}
	var out []map[string]any
	for _, f := range model.Families() {
		params := []map[string]any{}
		for _, p := range f.Params() {
			if p.Local {
				continue
			}
			d := p.Default
			if _, ok := d.(model.Size); ok {
				d = nil
			}
			params = append(params, map[string]any{"field": p.FieldName(), "flag": p.Name, "kind": kinds[p.Kind], "default": d, "help": p.Help})
		}
		out = append(out, map[string]any{"name": f.Name(), "title": f.About().Title, "params": params})
	}
	return out
}

var _ serve.DeviceReporter = (*Runner)(nil)

// DeviceStats describes the runner's devices now: a GPU's memory and
// utilisation from NVML, the CPU as serve.CPUDevice.
func (s *Runner) DeviceStats() []serve.Device {
	var out []serve.Device
	for _, d := range s.devs {
		g, ok := d.(backend.GPU)
		if !ok {
			c := serve.CPUDevice()
			c.Name = d.Name()
			out = append(out, c)
			continue
		}
		v := serve.Device{Name: d.Name(), Kind: "gpu", Model: g.DeviceName(), PoolPeak: g.PeakBytes()}
		if err := gpuStats(g, &v); err != nil {
			v.Error = err.Error()
		}
		out = append(out, v)
	}
	return out
}

// gpuStats fills in v's memory and utilisation from NVML.
func gpuStats(g backend.GPU, v *serve.Device) error {
	if err := nvml.Init(); err != nil {
		return fmt.Errorf("NVML: %w", err)
	}
	uuid, err := g.UUID()
	if err != nil {
		return err
	}
	dev, err := nvml.DeviceByUUID(uuid)
	if err != nil {
		return err
	}
	m, err := dev.Memory()
	if err != nil {
		return err
	}
	v.MemoryTotal, v.MemoryUsed = int64(m.Total), int64(m.Used)
	u, err := dev.Utilization()
	if err != nil {
		return err
	}
	gpu, mem := int(u.GPU), int(u.Memory)
	v.Utilization, v.MemoryUtilization = &gpu, &mem
	return nil
}
