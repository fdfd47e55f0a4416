package model

import (
	"errors"
	"fmt"
	"testing"
)

// TestParamError: a refused parameter is named by its request field for
// the service and by its flag for the command line, through wrapping.
func TestParamError(t *testing.T) {
	for _, c := range []struct {
		err         *ParamError
		field, flag string
	}{
		{Refuse("scale", "sr_ratio", 5, "the bundled model takes %s", "2, 3 or 4"), "sr_ratio 5: the bundled model takes 2, 3 or 4", "--scale 5: the bundled model takes 2, 3 or 4"},
		{Refuse("temporal-grow", "", "sideways", "want before or after"), `temporal_grow "sideways": want before or after`, `--temporal-grow "sideways": want before or after`},
		{Named("frames", "max_frames", func(n string) string { return "or restore one frame (" + n + " 1)" }), "or restore one frame (max_frames 1)", "or restore one frame (--frames 1)"},
	} {
		if got := c.err.Error(); got != c.field {
			t.Errorf("Error() = %q, want %q", got, c.field)
		}
		var pe *ParamError
		if !errors.As(fmt.Errorf("task: %w", c.err), &pe) || pe.Flag() != c.flag {
			t.Errorf("Flag() = %q, want %q", pe.Flag(), c.flag)
		}
	}
}
