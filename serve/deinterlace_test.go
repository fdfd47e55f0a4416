package serve

import "testing"

// TestDeinterlaceField: a task's "deinterlace" is one of vsr restore's
// --deinterlace modes; another is refused (400) naming the field.
func TestDeinterlaceField(t *testing.T) {
	e := newEnv(t, Config{}, newFake(false))
	e.input("a.mp4")
	code, m, _ := e.do("POST", "/v1/tasks/video/", map[string]any{"video_path": "a.mp4", "deinterlace": "weave"})
	wantError(t, "deinterlace weave", code, m, 400, "deinterlace")
	id := e.submit(map[string]any{"video_path": "a.mp4", "deinterlace": "double"})
	m = e.wait(id, Completed)
	if req := m["request"].(map[string]any); req["deinterlace"] != "double" {
		t.Errorf("stored request %v", req)
	}
}
