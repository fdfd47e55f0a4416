package compact

import (
	"testing"

	"github.com/vsr-dev/vsr/model"
)

// TestScalePrecedence: the request's scale, else the size it sets, else
// the loader's size, else the default.
func TestScalePrecedence(t *testing.T) {
	def := model.Params{Set: model.Values{"size": model.Size{W: 80, H: 60}}, Default: model.Values{"scale": 4}}
	m := &bundledModel{def: def}
	for _, c := range []struct {
		set   model.Values
		fixed int
		want  int
	}{
		{model.Values{}, 0, 2},                                   // the loader's size: x2 of 40x30
		{model.Values{"scale": 3}, 0, 3},                         // the request's scale wins over the loader's size
		{model.Values{"size": model.Size{W: 160, H: 120}}, 0, 4}, // the request's size
	} {
		m.fixed = c.fixed
		got, err := m.scale(model.Params{Set: c.set, Default: model.Values{"scale": 4}}, 40, 30)
		if err != nil || got != c.want {
			t.Errorf("set %v: scale %d, %v; want %d", c.set, got, err, c.want)
		}
	}
}
