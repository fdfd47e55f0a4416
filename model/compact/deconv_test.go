package compact

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/backend"
	"github.com/vsr-dev/vsr/backend/cpu"
	"github.com/vsr-dev/vsr/internal/testutil"
)

// TestDeconvolution runs ncnn Deconvolution layers of many kernels,
// strides and paddings (square and not, with a fused activation) against
// a transposed convolution written out as its definition, in float64:
// each input pixel j adds w[k] to output pixel s*j + k - pad_before, and
// the output keeps (n-1)*s + k - before - after pixels.
func TestDeconvolution(t *testing.T) {
	b := cpu.New(0)
	const cin, cout, h, w = 3, 2, 5, 7
	r := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct{ kh, kw, s, pt, pl, pb, pr int }{
		{2, 2, 2, 0, 0, 0, 0}, {4, 4, 2, 3, 3, 3, 3}, {5, 5, 3, 2, 2, 2, 2}, {3, 3, 2, 1, 1, 1, 1},
		{3, 3, 1, 1, 1, 1, 1}, {3, 5, 2, 0, 1, 2, 0}, {4, 4, 4, 0, 0, 1, 3}, {1, 1, 1, 0, 0, 0, 0},
	} {
		t.Run(fmt.Sprintf("k%dx%d s%d pad%d,%d,%d,%d", c.kh, c.kw, c.s, c.pt, c.pl, c.pb, c.pr), func(t *testing.T) {
			wt := make([]float32, cout*cin*c.kh*c.kw) // ncnn's order: out, in, kh, kw
			bias := make([]float32, cout)
			for i := range wt {
				wt[i] = r.Float32()*2 - 1
			}
			for i := range bias {
				bias[i] = r.Float32() - 0.5
			}
			in := make([]float32, h*w*cin)
			for i := range in {
				in[i] = r.Float32()
			}
			oh, ow := (h-1)*c.s+c.kh-c.pt-c.pb, (w-1)*c.s+c.kw-c.pl-c.pr
			want := make([]float64, oh*ow*cout)
			for y := 0; y < h; y++ {
				for x := 0; x < w; x++ {
					for ky := 0; ky < c.kh; ky++ {
						for kx := 0; kx < c.kw; kx++ {
							oy, ox := c.s*y+ky-c.pt, c.s*x+kx-c.pl
							if oy < 0 || oy >= oh || ox < 0 || ox >= ow {
								continue
							}
							for o := 0; o < cout; o++ {
								for i := 0; i < cin; i++ {
									want[(oy*ow+ox)*cout+o] += float64(in[(y*w+x)*cin+i]) * float64(wt[((o*cin+i)*c.kh+ky)*c.kw+kx])
								}
							}
						}
					}
				}
			}
			for i := range want {
				want[i] += float64(bias[i%cout])
				if want[i] < 0 {
					want[i] *= 0.1 // the fused leaky ReLU
				}
			}
			param := fmt.Sprintf("7767517\n2 2\nInput in 0 1 data\nDeconvolution d 1 1 data out 0=%d 1=%d 11=%d 3=%d 4=%d 14=%d 15=%d 16=%d 5=1 6=%d 9=2 -23310=1,1.000000e-01\n",
				cout, c.kw, c.kh, c.s, c.pl, c.pt, c.pr, c.pb, len(wt))
			bin := binary.LittleEndian.AppendUint32(nil, 0) // float32 tag
			for _, v := range append(wt, bias...) {
				bin = binary.LittleEndian.AppendUint32(bin, math.Float32bits(v))
			}
			g, err := Load(b, "deconv", strings.NewReader(param), bin)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			x, err := b.Upload(backend.Shape{N: 1, H: h, W: w, C: cin}, in)
			s, got := forwardTensor(t, b, g, x, err)
			if s != (backend.Shape{N: 1, H: oh, W: ow, C: cout}) {
				t.Fatalf("output %v, want %dx%dx%d", s, oh, ow, cout)
			}
			ref := make([]float32, len(want))
			for i, v := range want {
				ref[i] = float32(v)
			}
			if e := testutil.RelErr(got, ref); e > 1e-6 {
				t.Errorf("relative error %.3g against the definition", e)
			}
		})
	}
	if _, err := Load(b, "deconv", strings.NewReader("7767517\n2 2\nInput in 0 1 data\nDeconvolution d 1 1 data out 0=1 1=2 3=3 6=6\n"),
		binary.LittleEndian.AppendUint32(make([]byte, 4), 0)); err == nil || !strings.Contains(err.Error(), "no larger than the kernel") {
		t.Errorf("a stride of 3 with a 2x2 kernel: %v", err)
	}
}
