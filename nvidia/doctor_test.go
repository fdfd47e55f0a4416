package nvidia

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/nvidia/cuda"
)

func TestReport(t *testing.T) {
	r, err := GetReport(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s := r.String()
	t.Logf("report:\n%s", s)
	js, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Libraries) != 6 {
		t.Errorf("%d libraries in the report, want 6", len(back.Libraries))
	}
	for _, l := range r.Libraries {
		if !l.Found && !strings.Contains(l.Error, "not found (searched: ") {
			t.Errorf("missing %s without the search list: %q", l.Name, l.Error)
		}
	}
	if cerr := cuda.Init(); cerr != nil {
		if r.NoGPU == "" || len(r.GPUs) != 0 {
			t.Fatalf("no driver (%v) but the report has GPUs or no reason", cerr)
		}
		if !strings.Contains(s, "no NVIDIA GPU found: ") || !strings.Contains(string(js), `"no_gpu"`) {
			t.Errorf("report does not say plainly that there is no GPU")
		}
		t.Skip("no CUDA driver: " + cerr.Error())
	}
	if len(r.GPUs) == 0 || r.NoGPU != "" {
		t.Fatalf("driver present but no GPU in the report: %s", r.NoGPU)
	}
	g := r.GPUs[0]
	if g.Name == "" || g.SMCount == 0 || g.MemoryTotal == 0 || g.MemoryFree == 0 || g.MemoryFree > g.MemoryTotal || g.Error != "" {
		t.Errorf("GPU 0: %+v", g)
	}
	if r.DriverVersion == "" || r.CUDAVersion == "" {
		t.Errorf("driver %q, CUDA %q", r.DriverVersion, r.CUDAVersion)
	}
	for _, l := range r.Libraries {
		if l.Found && l.Version == "" {
			t.Errorf("%s found at %s without a version: %s", l.Name, l.Path, l.Error)
		}
	}
	t.Logf("json:\n%s", js)
}

func TestReportCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := GetReport(ctx); err == nil {
		t.Error("cancelled context gave no error")
	}
}

// TestPeersText: on a host of several GPUs each line says which others it
// reaches directly.
func TestPeersText(t *testing.T) {
	r := &Report{GPUs: []GPU{{Index: 0, Name: "A", Peers: []int{1, 2}}, {Index: 1, Name: "A", Peers: []int{0}}, {Index: 2, Name: "A", Peers: []int{}}}}
	s := r.Text(false)
	for _, want := range []string{"GPU 0: A, compute capability , 0 SMs, memory 0.0 GiB total, 0.0 GiB free, peer access to GPU 1, 2\n",
		", peer access to GPU 0\n", ", peer access to GPU none (ranks on other GPUs exchange through the host)\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	r.GPUs = r.GPUs[:1]
	if strings.Contains(r.Text(false), "peer") {
		t.Error("a host of one GPU reports peer access")
	}
}
