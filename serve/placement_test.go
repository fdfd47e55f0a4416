package serve

import "testing"

// TestUploadFilesWithoutWorkQueue: NATS.Files with a store of the
// caller's that has no WorkQueue capability keeps the upload on disk, as
// without NATS, instead of reaching for an object store there is none of.
func TestUploadFilesWithoutWorkQueue(t *testing.T) {
	e := newEnv(t, Config{Store: NewMemStore(), NATS: &NATS{Files: true}}, newFake(false))
	code, m := e.upload(map[string]string{"save_result_path": "up.mkv"}, "clip.mp4", []byte("video bytes"))
	if code != 200 {
		t.Fatalf("upload: %d %v", code, m)
	}
	e.wait(m["task_id"].(string), Completed)
}
