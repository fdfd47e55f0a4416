package serve

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
)

// Tasks on other machines. With the tasks on NATS JetStream (Config.NATS)
// a Service can be the API alone (NewRemote, vsr serve --workers 0):
// it records each task in the task bucket and puts its id on the work
// queue of its model, and follows the bucket (a watch), where the workers
// write the tasks' states. A worker (NewWorker, vsr worker) is a Service
// without HTTP that takes task ids from the work queue instead of its own
// queue, runs them with its runner and its own roots (a task carries its
// paths relative to the roots), and writes their states to the bucket:
//   - while a task runs, the worker marks its message in progress every
//     AckWait/3, so a worker that dies is noticed within AckWait and the
//     task goes to another worker; a task delivered more than MaxAttempts
//     times fails with that reason; a redelivered task first removes the
//     temporaries its previous attempt left beside its output;
//   - cancelling a running task is a message on its cancel subject, which
//     the worker that runs it listens to;
//   - every write to the bucket names the revision it replaces, so a
//     worker and the API never overwrite each other's change (a task the
//     API cancelled while a worker took it is skipped).
//
// The API's side is in remote.go, the worker's in worker.go; both reach
// the bucket and the work queue through the store's WorkQueue capability
// only (jetstream.go implements it).

// cluster is the Service's state for tasks on other machines (NewRemote,
// NewWorker). wq is set in every Service whose store has the capability
// (nil otherwise), and hashes always (empty for New); the rest only for
// the kind of Service that the comments below name.
type cluster struct {
	wq      WorkQueue         // the store's WorkQueue capability (Service.st), or nil
	hashes  map[string]string // the served models' content hashes (see hashModels)
	trusted sync.Map          // the signers found in the signers' bucket (see verifySeal)

	// The API of remote workers (remote.go): its key that signs task
	// records and its public key in hex (see seal.go).
	signKey ed25519.PrivateKey
	signer  string

	// A worker (worker.go): its work queues, one per model it serves;
	// closed when it has left the worker bucket; its copies of uploads
	// (see localPaths).
	pullFrom  []WorkSource
	announced chan struct{}
	copies    *privateDir
}

// served names the models of the runner ("" for a runner that does not
// name them: every task is its).
func (s *Service) served() []string {
	if mn, ok := s.runner.(ModelNamer); ok {
		return mn.ModelNames()
	}
	return []string{""}
}

// outputExt returns the extension of path when it is a plain one (a dot
// and 1 to 9 letters or digits), else "": the extension of a stored
// upload's name, and of a worker's own files.
func outputExt(path string) string {
	ext := filepath.Ext(path)
	if len(ext) < 2 || len(ext) > 10 || strings.ContainsFunc(ext[1:], func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		return ""
	}
	return ext
}

// uploadObject names the object of task t's upload (NATS.Files): unique
// to this submission, as the file name of its upload is, so that a
// refused submission never replaces another task's upload.
func uploadObject(t *Task) string { return "in/" + filepath.Base(t.Input) }

// hashModels records the content hash of each served model (ModelHasher;
// "" for a runner that has none) when tasks run on workers (remoteAPI's
// and worker's open; New's Service leaves hashes empty): the API records
// it in each task, and a worker runs only the tasks whose hash is its
// own.
func (s *Service) hashModels() error {
	mh, ok := s.runner.(ModelHasher)
	if !ok {
		return nil
	}
	for _, m := range s.served() {
		h, err := mh.ModelHash(m)
		if err != nil {
			return fmt.Errorf("model %s: its content hash: %w", m, err)
		}
		s.hashes[m] = h
	}
	return nil
}

// errNoJetStream refuses remote workers without the JetStream store.
var errNoJetStream = errors.New("serve: workers on other machines need the tasks on NATS JetStream (--nats-listen or --nats)")

// resultObject names the object of task id's result.
func resultObject(id string) string { return "out/" + id }
