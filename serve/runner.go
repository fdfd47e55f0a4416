package serve

import "context"

// Runner runs one task: it reads t.Input, writes t.Output (atomically: the
// file appears only when complete) and reports progress. It must stop
// promptly, leaving no output, when ctx is cancelled. It may set t.Width,
// t.Height and t.FPS on success; t is the runner's own copy.
type Runner interface {
	Run(ctx context.Context, t *Task, progress func(done, total int)) error
}

// ModelNamer is implemented by runners that serve named models: ModelOf
// names the model a request runs on (the default when it names none),
// ModelNames the models served. Workers on other machines take only the
// tasks of models they serve.
type ModelNamer interface {
	ModelOf(r *Request) (string, error)
	ModelNames() []string
}

// Validator is implemented by runners that check a request before it is
// queued; an error is reported to the client as 400. ctx is the HTTP
// request's.
type Validator interface {
	Validate(ctx context.Context, r *Request) error
}

// InputChecker is implemented by runners that check a task's input file
// when it is submitted (a playlist, a file that is no video, an input over
// the limits); an error is reported to the client as 400 and the task is
// not queued. path names the input as ffmpeg can open it: the file the
// service opened inside the input root (see video.FDPath), valid during
// the call. ctx is the HTTP request's, bounded.
type InputChecker interface {
	CheckInput(ctx context.Context, r *Request, path string) error
}

// MemoryReporter is implemented by runners that can say how much GPU memory
// they hold (for the metrics).
type MemoryReporter interface {
	GPUMemoryBytes() (int64, bool)
}

// Metadataer is implemented by runners that describe themselves for
// GET /v1/service/metadata.
type Metadataer interface {
	Metadata() map[string]any
}

// DeviceReporter is implemented by runners that can describe their
// devices for GET /v1/devices, each asked now. Without it the endpoint
// lists the CPU of the machine the service runs on.
type DeviceReporter interface {
	DeviceStats() []Device
}

// ModelHasher is implemented by runners that can tell their models'
// weights apart: ModelHash returns a hash of the content of the named
// model's files. Without it, tasks carry no hash and workers check the
// model's name only.
type ModelHasher interface {
	ModelHash(name string) (string, error)
}
