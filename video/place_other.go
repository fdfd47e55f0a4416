//go:build !linux

package video

// renameNoReplace renames by a hard link, which fails when out exists.
func renameNoReplace(tmp, out string) error { return linkNoReplace(tmp, out) }
