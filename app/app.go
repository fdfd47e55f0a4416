// Package app is vsr's application core, shared by the command line, the
// HTTP service and any future worker: it opens devices, keeps models
// resident, turns a Job into a pipeline run and a folder into the runs of
// its files (Folder). It has no flags and no HTTP; it knows no model
// family by name. Families and backends register themselves, and this
// package imports each once, below, so that adding one means adding a
// package and a line here.
package app

import (
	_ "github.com/vsr-dev/vsr/backend/cpu"  // the "cpu" device
	_ "github.com/vsr-dev/vsr/backend/cuda" // the "cuda" devices

	_ "github.com/vsr-dev/vsr/model/cdavsr"  // CDA-VSR checkpoints
	_ "github.com/vsr-dev/vsr/model/compact" // realesr-animevideov3 and ncnn graphs
	_ "github.com/vsr-dev/vsr/model/swiftvr" // SwiftVR checkpoints
)
