package serve

import (
	"maps"
	"reflect"
	"slices"
	"testing"
)

// TestParamFields: the model parameters with a field of their own are the
// fields tagged `vsr:"param"`, and ModelFields gives those a request sets,
// with its params, as JSON decodes them.
func TestParamFields(t *testing.T) {
	want := []string{"clip_len", "dit", "size", "sr_ratio", "target_shape", "tile"}
	if got := slices.Sorted(maps.Keys(paramFields)); !slices.Equal(got, want) {
		t.Errorf("paramFields: %v, want %v", got, want)
	}
	for k := range paramFields {
		if !requestFields[k] {
			t.Errorf("paramFields' %s is no field of a Request", k)
		}
	}
	r := Request{VideoPath: "in.mp4", Model: "m", Codec: "libx264", Batch: 2, SRRatio: 3, Params: map[string]any{"size": []any{720.0, 1280.0}, "reae_frame_batch": 0.0, "dit": "off"}}
	if err := CheckRequest(&r); err != nil {
		t.Fatal(err)
	}
	got := r.ModelFields()
	exp := map[string]any{"sr_ratio": 3.0, "size": []any{720.0, 1280.0}, "dit": "off", "reae_frame_batch": 0.0}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("ModelFields: %#v, want %#v", got, exp)
	}
	if got := (&Request{VideoPath: "in.mp4", Size: []int{}}).ModelFields(); len(got) != 0 {
		t.Errorf("ModelFields of a request that sets none: %v", got)
	}
}
