//go:build !unix

package serve

import (
	"errors"
	"os"
)

const syscallNoFollow = 0

// errNoFlock: this system has no flock. Owners then run without a lock,
// and sweeps count every temporary as another's: they remove none.
var errNoFlock = errors.New("no flock on this system")

func tryFlock(*os.File) error { return errNoFlock }

func identity(os.FileInfo) (FileID, bool) { return FileID{}, false }
