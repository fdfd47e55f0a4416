//go:build !unix

package serve

import "os"

const syscallNoFollow = 0

func identity(os.FileInfo) (FileID, bool) { return FileID{}, false }
