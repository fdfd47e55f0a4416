package main

// Blank imports that pin the module's dependencies while the packages that
// use them are written. Removed once each is imported for real.
import (
	_ "github.com/ebitengine/purego"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "golang.org/x/sys/cpu"
	_ "golang.org/x/term"
)

func main() {}
