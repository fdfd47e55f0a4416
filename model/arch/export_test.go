package arch

import "github.com/vsr-dev/vsr/checkpoint/statedict"

// CountHeaderReads makes the header cache count the files it reads into
// *n and starts it empty; the returned func restores it.
func CountHeaderReads(n *int) (restore func()) {
	old := headers
	headers = &headerCache{m: map[headerKey]headerEntry{}, read: func(path string) (*statedict.Dict, []statedict.Skipped, error) {
		*n++
		return statedict.OpenHeader(path)
	}}
	return func() { headers = old }
}
