package app_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/checkpoint/safetensors"
	"github.com/vsr-dev/vsr/internal/pthtest"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/model/arch"
	"github.com/vsr-dev/vsr/model/arch/archtest"
	"github.com/vsr-dev/vsr/model/cdavsr"
)

// TestStateDictFamily: a state dict is the compact family's, a CDA-VSR
// checkpoint (also a .safetensors file) stays the cdavsr family's, and
// no two families take either.
func TestStateDictFamily(t *testing.T) {
	dir := t.TempDir()
	sd := filepath.Join(dir, "esrgan.safetensors")
	if err := arch.Write(sd, archtest.New(1).ESRGAN(archtest.RRDB{Features: 8, Growth: 4, Blocks: 1, In: 3, Out: 3, Ups: 2}).D, nil); err != nil {
		t.Fatal(err)
	}
	cda := filepath.Join(dir, "cda.safetensors")
	if err := safetensors.Write(cda, cdavsr.Synthesize(2, 1), nil); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{sd: "compact", cda: "cdavsr"} {
		if f, err := model.Find(path); err != nil || f.Name() != want {
			t.Errorf("%s: %v %v, want family %s", filepath.Base(path), f, err, want)
		}
	}
}

// TestMetadataModelFolder: the service's metadata lists the models in
// the models folder with their architectures, and a .pth it cannot read
// (4 MB whose record inflates to 4 GiB of zeros) with its error, without
// inflating it; a state dict there loads as a served model named by its
// path.
func TestMetadataModelFolder(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("VSR_MODELS", dir)
	sd := filepath.Join(dir, "2x-tiny.safetensors")
	if err := arch.Write(sd, archtest.New(1).Compact(8, 2, 3, 2, true).D, nil); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a model"), 0o644)
	const numel = 1 << 30
	pthtest.WriteZeros(t, filepath.Join(dir, "bomb.pth"), pthtest.Dict("w", pthtest.Tensor("FloatStorage", "0", numel, 0, []int{numel}, []int{1})), "0", 4*numel)
	devs, err := app.OpenDevices("cpu", "auto")
	if err != nil {
		t.Fatal(err)
	}
	run, err := app.NewRunner(devs[:1], app.Served{Specs: []string{sd}})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	var buf bytes.Buffer
	json.NewEncoder(&buf).Encode(run.Metadata())
	for _, want := range []string{`"model_folder":{"models":[{"file":"2x-tiny.safetensors","architecture":"SRVGGNetCompact","scale":2,"runs":true},{"file":"bomb.pth","runs":false,"error":"torch: `,
		`bomb.pth\": its tensors reach 4294967296 bytes (4.0 GiB) of storage data, more than the limit of 2147483648 bytes (2.0 GiB) for one file: the file is damaged or crafted, or far larger than a super-resolution model"}]`,
		`"architecture":"SRVGGNetCompact","family":"compact"`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("metadata %s\nwant %s", buf.String(), want)
		}
	}
}
