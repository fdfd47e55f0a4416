//go:build !unix

package pipeline

import "os"

// lockDir does nothing where there is no flock: one run at a time per
// output is then the user's to ensure.
func lockDir(*os.File) error { return nil }
