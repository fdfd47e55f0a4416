package cdavsr

import (
	"fmt"

	"github.com/vsr-dev/vsr/tensor/npy"
)

// Caller-supplied side data is NumPy .npy files of float32, one pair per
// frame in display order: mv_00000.npy of shape (2, H, W) (x then y, in
// input pixels) and res_00000.npy of shape (1, H, W) (already divided by
// the luma range): the array format of the authors' data loader, holding
// the values exactly as the network receives them.
var (
	readNPY  = npy.Read
	writeNPY = npy.Write
)

// Side-data file names of frame t.
func mvName(t int) string  { return fmt.Sprintf("mv_%05d.npy", t) }
func resName(t int) string { return fmt.Sprintf("res_%05d.npy", t) }
