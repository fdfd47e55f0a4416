// Package assets embeds the files vsr ships inside its binary: Real-ESRGAN's
// realesr-animevideov3 compact model in ncnn format (BSD-3-Clause, see
// realesr-animevideov3/LICENSE).
package assets

import "embed"

// FS holds the bundled model files.
//
//go:embed realesr-animevideov3
var FS embed.FS
