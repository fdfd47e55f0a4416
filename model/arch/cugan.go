package arch

import "fmt"

// cugan is a Real-CUGAN (bilibili's UpCunet2x, 3x and 4x) to write as an
// ncnn graph: its scale, and whether it is a pro model (whose input is
// mapped to x*0.7+0.15 and output back).
type cugan struct {
	scale int
	pro   bool
}

// graph writes the network as the published upcunet_v3.py runs it without
// tiles: the input reflection-padded (and rounded up to a multiple of 2,
// or 4 for x3), two U-Nets of unpadded convolutions with squeeze-excitation
// blocks (global average pooling, 1x1 convolutions, a sigmoid gate), their
// skip connections cropped, the first U-Net's output cropped and added to
// the second's, cropped to the input's size times the scale; x4 has a last
// convolution, a pixel shuffle and the nearest-upsampled input added.
func (c cugan) graph(w *writer) {
	x := w.input()
	if c.pro {
		x = w.layer("BinaryOp", "pro.mul", []string{x}, fmt.Sprintf("0=2 1=1 2=%e", float32(0.7)))
		x = w.layer("BinaryOp", "pro.add", []string{x}, fmt.Sprintf("0=0 1=1 2=%e", float32(0.15)))
	}
	in := x
	mp := map[int][2]int{2: {2, 18}, 3: {4, 14}, 4: {2, 19}}[c.scale] // the multiple, the pad
	multiple, pad := mp[0], mp[1]
	x = w.layer("Padding", "pad", []string{x}, fmt.Sprintf("0=%d 1=%d 2=%d 3=%d 4=2 21=%d", pad, pad, pad, pad, multiple))
	x = c.unet1(w, x)
	x0 := c.unet2(w, x)
	x = w.layer("BinaryOp", "add", []string{x0, w.crop("unet1.crop", x, 20)}, "0=0")
	if c.scale == 4 {
		x = w.convAt("conv_final", x, 1, 0, actNone, 0)
		x = w.crop("conv_final.crop", x, 1)
		x = w.layer("PixelShuffle", "ps", []string{x}, "0=2")
	}
	x = w.layer("Crop", "fit", []string{x}, "21=1")
	if c.scale == 4 {
		up := w.layer("Interp", "upsample", []string{in}, "0=1 1=4.000000e+00 2=4.000000e+00")
		x = w.layer("BinaryOp", "add.upsample", []string{x, up}, "0=0")
	}
	if c.pro {
		x = w.layer("BinaryOp", "pro.sub", []string{x}, fmt.Sprintf("0=1 1=1 2=%e", float32(0.15)))
		w.layer("BinaryOp", "pro.div", []string{x}, fmt.Sprintf("0=2 1=1 2=%e", float32(1/0.7)))
	}
}

// unetConv is UNetConv KEY: two unpadded 3x3 convolutions with leaky ReLU
// 0.1, then with se the squeeze-excitation block KEY.seblock.
func (c cugan) unetConv(w *writer, key, x string, se bool) string {
	x = w.convAt(key+".conv.0", x, 1, 0, actLeaky, 0.1)
	x = w.convAt(key+".conv.2", x, 1, 0, actLeaky, 0.1)
	if !se {
		return x
	}
	m := w.layer("Pooling", key+".seblock.mean", []string{x}, "0=1 4=1")
	m = w.convAt(key+".seblock.conv1", m, 1, 0, actReLU, 0)
	m = w.convAt(key+".seblock.conv2", m, 1, 0, actNone, 0)
	m = w.layer("Sigmoid", key+".seblock.sigmoid", []string{m}, "")
	return w.layer("BinaryOp", key+".seblock.mul", []string{x, m}, "0=2")
}

// unet1 is UNet1 (UNet1x3 for x3), whose last layer is a transposed
// convolution (4/2/3, or 5/3/2 for x3).
func (c cugan) unet1(w *writer, x string) string {
	x1 := c.unetConv(w, "unet1.conv1", x, false)
	x2 := w.convAt("unet1.conv1_down", x1, 2, 0, actLeaky, 0.1)
	x2 = c.unetConv(w, "unet1.conv2", x2, true)
	x2 = w.deconv("unet1.conv2_up", x2, 2, 0, actLeaky, 0.1)
	x3 := w.layer("BinaryOp", "unet1.add", []string{w.crop("unet1.conv1.crop", x1, 4), x2}, "0=0")
	x3 = w.convAt("unet1.conv3", x3, 1, 0, actLeaky, 0.1)
	if c.scale == 3 {
		return w.deconv("unet1.conv_bottom", x3, 3, 2, actNone, 0)
	}
	return w.deconv("unet1.conv_bottom", x3, 2, 3, actNone, 0)
}

// unet2 is UNet2, whose last layer is an unpadded 3x3 convolution.
func (c cugan) unet2(w *writer, x string) string {
	x1 := c.unetConv(w, "unet2.conv1", x, false)
	x2 := w.convAt("unet2.conv1_down", x1, 2, 0, actLeaky, 0.1)
	x2 = c.unetConv(w, "unet2.conv2", x2, true)
	x3 := w.convAt("unet2.conv2_down", x2, 2, 0, actLeaky, 0.1)
	x3 = c.unetConv(w, "unet2.conv3", x3, true)
	x3 = w.deconv("unet2.conv3_up", x3, 2, 0, actLeaky, 0.1)
	x4 := w.layer("BinaryOp", "unet2.add4", []string{w.crop("unet2.conv2.crop", x2, 4), x3}, "0=0")
	x4 = c.unetConv(w, "unet2.conv4", x4, true)
	x4 = w.deconv("unet2.conv4_up", x4, 2, 0, actLeaky, 0.1)
	x5 := w.layer("BinaryOp", "unet2.add5", []string{w.crop("unet2.conv1.crop", x1, 16), x4}, "0=0")
	x5 = w.convAt("unet2.conv5", x5, 1, 0, actLeaky, 0.1)
	return w.convAt("unet2.conv_bottom", x5, 1, 0, actNone, 0)
}

// crop writes a Crop of n pixels from every side.
func (w *writer) crop(name, x string, n int) string {
	return w.layer("Crop", name, []string{x}, fmt.Sprintf("0=%d 1=%d 6=%d 7=%d", n, n, n, n))
}
