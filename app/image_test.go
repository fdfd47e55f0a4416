package app_test

import (
	"bytes"
	"compress/zlib"
	"context"
	"encoding/binary"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/video"
)

// The tests of PrepareImage: tiny images made with ffmpeg, restored by the
// bundled model at scale 2 on the CPU.

// alphaSrc is a 24x16 picture whose alpha runs 0 to 230 left to right.
const alphaSrc = "testsrc2=size=24x16,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='10*X'"

func ffmpegT(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command("ffmpeg", append([]string{"-v", "error", "-y"}, args...)...).Output()
	if err != nil {
		t.Fatalf("ffmpeg %v: %v", args, err)
	}
	return out
}

// raw decodes the first frame of path in pixFmt, through vf if set.
func raw(t *testing.T, path, pixFmt, vf string) []byte {
	t.Helper()
	args := []string{"-i", path}
	if vf != "" {
		args = append(args, "-vf", vf)
	}
	return ffmpegT(t, append(args, "-frames:v", "1", "-f", "rawvideo", "-pix_fmt", pixFmt, "-")...)
}

func pixFmt(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("ffprobe", "-v", "error", "-show_entries", "stream=pix_fmt", "-of", "csv=p=0", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	return strings.TrimSpace(string(out))
}

// imageModel loads the bundled model at scale 2 on the CPU.
func imageModel(t *testing.T) (*app.Loaded, model.Values) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed")
	}
	devs, err := app.OpenDevices("cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { devs[0].Close() })
	params := model.Values{"scale": 2}
	ld, err := app.Load(devs[0], "", params, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ld.Close)
	return ld, params
}

// restoreImage restores in into out as a single image and returns the
// notices.
func restoreImage(t *testing.T, ld *app.Loaded, params model.Values, in, out string) []string {
	t.Helper()
	enc, err := app.ImageEncode(filepath.Ext(out), video.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	if _, err := ld.Run(context.Background(), app.Job{Input: in, Output: out, Params: params, Encode: enc, Warn: func(m string) { notes = append(notes, m) }}); err != nil {
		t.Fatalf("restore %s: %v", filepath.Base(in), err)
	}
	return notes
}

// near fails unless a and b are as long and differ by at most tol.
func near(t *testing.T, what string, a, b []byte, tol int) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("%s: %d bytes, want %d", what, len(a), len(b))
	}
	for i := range a {
		if d := int(a[i]) - int(b[i]); d > tol || d < -tol {
			t.Fatalf("%s: byte %d is %d, want %d (within %d)", what, i, a[i], b[i], tol)
		}
	}
}

// TestImageAlphaPNG: an RGBA PNG comes out as an RGBA PNG (and TIFF) at
// twice the size, its colour the model's (as the same picture without
// alpha) and its alpha the input's scaled by bicubic.
func TestImageAlphaPNG(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.png")
	ffmpegT(t, "-f", "lavfi", "-i", alphaSrc, "-frames:v", "1", in)
	rgb := filepath.Join(dir, "rgb.png")
	ffmpegT(t, "-i", in, "-vf", "format=rgb24", rgb)
	restoreImage(t, ld, params, rgb, filepath.Join(dir, "rgb_x2.png"))
	for _, out := range []string{filepath.Join(dir, "out.png"), filepath.Join(dir, "out.tif")} {
		if notes := restoreImage(t, ld, params, in, out); len(notes) > 0 {
			t.Errorf("notices %q", notes)
		}
		if pf := pixFmt(t, out); pf != "rgba" {
			t.Fatalf("%s: pixel format %s, want rgba", filepath.Base(out), pf)
		}
		near(t, "colour", raw(t, out, "rgb24", ""), raw(t, filepath.Join(dir, "rgb_x2.png"), "rgb24", ""), 0)
		alpha := raw(t, out, "gray", "alphaextract")
		near(t, "alpha", alpha, raw(t, in, "gray", "alphaextract,scale=48:32:flags=bicubic"), 1)
		if alpha[0] > 5 || alpha[47] < 200 {
			t.Errorf("alpha runs %d to %d across the first row, want about 0 to 230", alpha[0], alpha[47])
		}
	}
}

// TestImageAlphaJPEG: a translucent image written as JPEG is flattened on
// white, with a notice.
func TestImageAlphaJPEG(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.png"), filepath.Join(dir, "out.jpg")
	// The left half transparent, the right half opaque.
	ffmpegT(t, "-f", "lavfi", "-i", "testsrc2=size=24x16,format=rgba,geq=r='r(X,Y)':g='g(X,Y)':b='b(X,Y)':a='255*gte(X,12)'", "-frames:v", "1", in)
	notes := restoreImage(t, ld, params, in, out)
	if len(notes) != 1 || !strings.Contains(notes[0], "flattened on white") {
		t.Fatalf("notices %q, want one saying the alpha is flattened on white", notes)
	}
	px := raw(t, out, "rgb24", "")
	at := func(x, y int) []byte { return px[3*(y*48+x):][:3] }
	for _, c := range at(8, 16) {
		if c < 245 {
			t.Errorf("a transparent pixel is %v, want white", at(8, 16))
			break
		}
	}
	if s := int(at(36, 4)[0]) + int(at(36, 4)[1]) + int(at(36, 4)[2]); s > 3*235 {
		t.Errorf("an opaque pixel is %v: the picture is gone", at(36, 4))
	}
}

// TestImageLosslessWebP: a lossless WebP (argb to ffmpeg) without
// transparency is restored as an opaque picture; one with transparency
// comes out as a WebP with alpha.
func TestImageLosslessWebP(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	opaque, clear := filepath.Join(dir, "opaque.webp"), filepath.Join(dir, "clear.webp")
	ffmpegT(t, "-f", "lavfi", "-i", "testsrc2=size=24x16", "-frames:v", "1", "-c:v", "libwebp", "-lossless", "1", opaque)
	if pf := pixFmt(t, opaque); pf != "argb" {
		t.Fatalf("ffmpeg decodes a lossless WebP as %s, the test expects argb", pf)
	}
	restoreImage(t, ld, params, opaque, filepath.Join(dir, "opaque_x2.png"))
	if pf := pixFmt(t, filepath.Join(dir, "opaque_x2.png")); pf != "rgb24" {
		t.Errorf("an opaque WebP came out %s, want rgb24", pf)
	}
	ffmpegT(t, "-f", "lavfi", "-i", alphaSrc, "-frames:v", "1", "-c:v", "libwebp", "-lossless", "1", clear)
	out := filepath.Join(dir, "clear_x2.webp")
	restoreImage(t, ld, params, clear, out)
	if pf := pixFmt(t, out); pf != "yuva420p" && pf != "argb" {
		t.Fatalf("a transparent WebP came out %s, want one with alpha", pf)
	}
	near(t, "alpha", raw(t, out, "gray", "alphaextract"), raw(t, clear, "gray", "alphaextract,scale=48:32:flags=bicubic"), 2)
}

// exifOrientation6 is an APP1 Exif segment whose TIFF structure (big
// endian) holds one tag: Orientation = 6 (turn 90 degrees clockwise).
func exifOrientation6() []byte {
	tiff := []byte("MM\x00\x2a\x00\x00\x00\x08")
	tiff = append(tiff, 0, 1)                                     // one entry
	tiff = append(tiff, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 6, 0, 0) // Orientation, SHORT, 1, 6
	tiff = append(tiff, 0, 0, 0, 0)                               // no next IFD
	p := append([]byte("Exif\x00\x00"), tiff...)
	return append([]byte{0xff, 0xe1, byte((len(p) + 2) >> 8), byte(len(p) + 2)}, p...)
}

// TestImageEXIFOrientation: a JPEG stored on its side with EXIF
// orientation 6 comes out upright: 32x16 stored, red left and blue right,
// is 16x32 upright (red on top), so 32x64 at scale 2.
func TestImageEXIFOrientation(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	plain, in, out := filepath.Join(dir, "plain.jpg"), filepath.Join(dir, "in.jpg"), filepath.Join(dir, "out.png")
	ffmpegT(t, "-f", "lavfi", "-i", "color=red:size=16x16,format=rgb24[a];color=blue:size=16x16,format=rgb24[b];[a][b]hstack", "-frames:v", "1", "-q:v", "2", plain)
	b, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(in, append(append([]byte{0xff, 0xd8}, exifOrientation6()...), b[2:]...), 0o644)
	restoreImage(t, ld, params, in, out)
	info, err := video.Probe(context.Background(), out)
	if err != nil {
		t.Fatal(err)
	}
	if info.Width != 32 || info.Height != 64 {
		t.Fatalf("output %dx%d, want 32x64 (upright)", info.Width, info.Height)
	}
	px := raw(t, out, "rgb24", "")
	top, bottom := px[3*(12*32+16):][:3], px[3*(52*32+16):][:3]
	if top[0] < 200 || top[2] > 60 || bottom[2] < 200 || bottom[0] > 60 {
		t.Errorf("top %v, bottom %v: want red above blue", top, bottom)
	}
}

// pngICC returns the profile of the PNG b's iCCP chunk, decompressed
// (nil if none); a reader of its own, apart from vsr's.
func pngICC(t *testing.T, b []byte) []byte {
	t.Helper()
	for at := 8; at+8 <= len(b); {
		n := int(binary.BigEndian.Uint32(b[at:]))
		if at+12+n > len(b) {
			break
		}
		if string(b[at+4:at+8]) == "iCCP" {
			d := b[at+8 : at+8+n]
			z, err := zlib.NewReader(bytes.NewReader(d[bytes.IndexByte(d, 0)+2:]))
			if err != nil {
				t.Fatal(err)
			}
			icc, err := io.ReadAll(z)
			if err != nil {
				t.Fatal(err)
			}
			return icc
		}
		at += 12 + n
	}
	return nil
}

// TestImageICC: a PNG's ICC profile (an iCCP chunk spliced into a PNG
// ffmpeg wrote) is in the output PNG, the same bytes.
func TestImageICC(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	plain, in, out := filepath.Join(dir, "plain.png"), filepath.Join(dir, "in.png"), filepath.Join(dir, "out.png")
	ffmpegT(t, "-f", "lavfi", "-i", "testsrc2=size=24x16", "-frames:v", "1", plain)
	b, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	icc := bytes.Repeat([]byte("a test profile, not a real one "), 20)
	var z bytes.Buffer
	zw := zlib.NewWriter(&z)
	zw.Write(icc)
	zw.Close()
	data := append([]byte("Test\x00\x00"), z.Bytes()...)
	chunk := binary.BigEndian.AppendUint32(nil, uint32(len(data)))
	chunk = append(append(chunk, "iCCP"...), data...)
	chunk = binary.BigEndian.AppendUint32(chunk, crc32.ChecksumIEEE(chunk[4:]))
	const ihdrEnd = 8 + 8 + 13 + 4
	os.WriteFile(in, append(append(append([]byte(nil), b[:ihdrEnd]...), chunk...), b[ihdrEnd:]...), 0o644)
	if got := pngICC(t, mustRead(t, in)); !bytes.Equal(got, icc) {
		t.Fatal("the test's own input holds no profile")
	}
	restoreImage(t, ld, params, in, out)
	if got := pngICC(t, mustRead(t, out)); !bytes.Equal(got, icc) {
		t.Errorf("the output's profile is %d bytes, want the input's %d", len(got), len(icc))
	}
	tif := filepath.Join(dir, "out.tif")
	if notes := restoreImage(t, ld, params, in, tif); len(notes) != 1 || !strings.Contains(notes[0], "ICC") {
		t.Errorf("a TIFF output: notices %q, want one saying the profile is not carried", notes)
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRunImagesAlpha: in a folder's batch, an RGBA PNG keeps its alpha
// and an opaque one beside it stays RGB.
func TestRunImagesAlpha(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	enc, err := app.ImageEncode(".png", video.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var imgs []app.Image
	for i, src := range []string{alphaSrc, "testsrc2=size=24x16"} {
		in := filepath.Join(dir, "in"+string(rune('a'+i))+".png")
		ffmpegT(t, "-f", "lavfi", "-i", src, "-frames:v", "1", in)
		info, err := video.Probe(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		imgs = append(imgs, app.Image{Info: info, Output: filepath.Join(dir, "out"+string(rune('a'+i))+".png"), Encode: enc})
	}
	_, errs := ld.RunImages(context.Background(), imgs, params, 2, nil)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("image %d: %v", i, err)
		}
	}
	if pf := pixFmt(t, imgs[0].Output); pf != "rgba" {
		t.Fatalf("the RGBA image came out %s", pf)
	}
	near(t, "alpha", raw(t, imgs[0].Output, "gray", "alphaextract"), raw(t, imgs[0].Info.Path, "gray", "alphaextract,scale=48:32:flags=bicubic"), 1)
	if pf := pixFmt(t, imgs[1].Output); pf != "rgb24" {
		t.Errorf("the opaque image came out %s", pf)
	}
}

// alpha16 writes a 16-bit RGBA PNG (rgba64be) of alphaSrc to dir/name.
func alpha16(t *testing.T, dir, name string) string {
	t.Helper()
	in := filepath.Join(dir, name)
	ffmpegT(t, "-f", "lavfi", "-i", alphaSrc+",format=rgba64be", "-frames:v", "1", in)
	if pf := pixFmt(t, in); pf != "rgba64be" {
		t.Fatalf("the 16-bit input is %s", pf)
	}
	return in
}

// TestImageAlpha16: a transparent 16-bit PNG restores to a 16-bit RGBA
// PNG with its alpha (ffmpeg 5.1 could not negotiate the formats when the
// alpha graph trimmed before alphaextract).
func TestImageAlpha16(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	in, out := alpha16(t, dir, "in.png"), filepath.Join(dir, "out.png")
	restoreImage(t, ld, params, in, out)
	if pf := pixFmt(t, out); pf != "rgba64be" {
		t.Fatalf("pixel format %s, want rgba64be", pf)
	}
	near(t, "alpha", raw(t, out, "gray", "alphaextract"), raw(t, in, "gray", "alphaextract,scale=48:32:flags=bicubic"), 1)
}

// TestRunImagesAlpha16: in a folder, a transparent 16-bit PNG comes out
// 16-bit with its alpha, as it does alone.
func TestRunImagesAlpha16(t *testing.T) {
	ld, params := imageModel(t)
	dir := t.TempDir()
	enc, err := app.ImageEncode(".png", video.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	in := alpha16(t, dir, "in.png")
	info, err := video.Probe(context.Background(), in)
	if err != nil {
		t.Fatal(err)
	}
	imgs := []app.Image{{Info: info, Output: filepath.Join(dir, "out.png"), Encode: enc}}
	if _, errs := ld.RunImages(context.Background(), imgs, params, 2, nil); errs[0] != nil {
		t.Fatal(errs[0])
	}
	if pf := pixFmt(t, imgs[0].Output); pf != "rgba64be" {
		t.Fatalf("pixel format %s, want rgba64be", pf)
	}
	near(t, "alpha", raw(t, imgs[0].Output, "gray", "alphaextract"), raw(t, in, "gray", "alphaextract,scale=48:32:flags=bicubic"), 1)
}
