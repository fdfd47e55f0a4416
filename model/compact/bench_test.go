package compact

import (
	"context"
	"fmt"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
)

// BenchmarkUpscaleX4 measures the bundled x4 model on the CPU backend and
// reports frames/s and GFLOP/s (convolution FLOPs, 2 per multiply-add).
func BenchmarkUpscaleX4(b *testing.B) {
	for _, sz := range [][2]int{{160, 90}, {640, 360}} {
		w, h := sz[0], sz[1]
		b.Run(fmt.Sprintf("%dx%d", w, h), func(b *testing.B) {
			be := cpu.New(0)
			m, err := LoadBundled(be, 4)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			in := randFrames(1, w, h, 1)
			r := Engine{M: m}
			bt, _ := r.NewBatch(1, w, h, backend.RGB24, backend.RGB24)
			copy(bt.In(), in)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := r.Start(context.Background(), bt, 1); err != nil {
					b.Fatal(err)
				}
			}
			s := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/s, "frames/s")
			b.ReportMetric(m.FLOPs(w, h)*float64(b.N)/s/1e9, "GFLOP/s")
		})
	}
}
