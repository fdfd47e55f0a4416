package compact

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend/cpu"
)

// TestReorg runs ncnn's Reorg (space to depth) in both its channel orders
// against the layer's definition: output channel c*s*s + i*s + j (mode
// 0, PyTorch's pixel_unshuffle) or (i*s + j)*C + c (mode 1) holds
// channel c at offset (i, j) of each s x s block.
func TestReorg(t *testing.T) {
	b := cpu.New(1)
	const w, h, c = 12, 6, 3
	rgb := make([]byte, w*h*c)
	for i := range rgb {
		rgb[i] = byte(i * 7 % 251)
	}
	for _, s := range []int{2, 3} {
		for _, mode := range []int{0, 1} {
			param := fmt.Sprintf("7767517\n2 2\nInput in 0 1 data\nReorg r 1 1 data out 0=%d 1=%d\n", s, mode)
			g, err := Load(b, "reorg", strings.NewReader(param), nil)
			if err != nil {
				t.Fatal(err)
			}
			x, _ := b.FromRGB8(rgb, 1, h, w)
			y, err := g.Forward(x)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := b.Download(y)
			oc, ow := c*s*s, w/s
			for ch := 0; ch < c; ch++ {
				for i := 0; i < s; i++ {
					for j := 0; j < s; j++ {
						p := ch*s*s + i*s + j
						if mode == 1 {
							p = (i*s+j)*c + ch
						}
						for yy := 0; yy < h/s; yy++ {
							for xx := 0; xx < ow; xx++ {
								want := float32(rgb[((yy*s+i)*w+xx*s+j)*c+ch]) / 255
								if v := got[(yy*ow+xx)*oc+p]; v != want {
									t.Fatalf("stride %d mode %d: channel %d at (%d, %d) is %g, want %g", s, mode, p, yy, xx, v, want)
								}
							}
						}
					}
				}
			}
			x.Free()
			y.Free()
			g.Close()
		}
	}
}
