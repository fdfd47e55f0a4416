package serve

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vsr-dev/vsr/video"
)

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

// Config configures a Service.
type Config struct {
	// Data is the directory of the task database.
	Data string
	// Store keeps the tasks; nil opens the bbolt database Data/tasks.db,
	// or with NATS set the JetStream task bucket. The Service closes it.
	Store TaskStore
	// NATS, when set, keeps the tasks on NATS JetStream (see NATS): a
	// store with the WorkQueue capability, which NewRemote and NewWorker
	// need (see cluster.go).
	NATS *NATS
	// AckWait is how soon a worker's death hands its task to another
	// (default 10 s; a running task's worker reports every AckWait/3).
	AckWait time.Duration
	// Name and Devices describe a worker in the list of connected workers
	// (default name: host-pid).
	Name, Devices string
	// InputRoot and OutputRoot hold inputs and outputs; they default to
	// Data/input and Data/output.
	InputRoot, OutputRoot string
	// MaxQueue bounds the number of pending tasks (default 100).
	MaxQueue int
	// Workers is how many tasks run at once (default 1): the runner's
	// groups of devices.
	Workers int
	// MaxUpload bounds an upload's size in bytes (default 2 GiB).
	// MaxUploadTotal, when set, bounds the bytes of all uploads in the
	// input root (stored for their tasks, or arriving): an upload that
	// would pass it is refused with 507.
	MaxUpload, MaxUploadTotal int64
	// Token, when set, is required as "Authorization: Bearer TOKEN".
	// ReadToken, when set (with Token), is a second token that may only
	// read: GET and HEAD requests (dashboards).
	Token, ReadToken string
	// MaxOutputPixels bounds a task's output frames, width x height
	// (default DefaultMaxOutputPixels; see Sizer).
	MaxOutputPixels int64
	// MaxAttempts is how many times a task interrupted by a crash is started
	// before it is failed (default 3).
	MaxAttempts int
	// KeepFinished, when set, is how long a finished task (completed,
	// failed or cancelled) stays listed after it ended, and
	// KeepFinishedCount how many finished tasks stay (the latest): older
	// ones are deleted from the store, at start and then every minute (or
	// every KeepFinished/2, if shorter). Their results stay in the output
	// root. Zero keeps every task.
	KeepFinished      time.Duration
	KeepFinishedCount int
	// Version is reported by the metadata endpoint.
	Version string
	// Model names the default model, and ModelClass its family, for the
	// metadata endpoint's LightX2V keys (model_path, model_cls).
	Model, ModelClass string
	Logger            *slog.Logger

	// Limits on clients (Serve); zero means the default in parentheses.
	// HeaderTimeout bounds reading a request's headers (30 s), BodyTimeout
	// a JSON body (60 s), IdleTimeout a keep-alive connection between
	// requests (120 s). An upload must arrive at MinUploadRate bytes/s
	// (64 KiB/s) on average after its first UploadGrace (30 s). MaxConns
	// bounds open connections (256; more wait to be accepted).
	HeaderTimeout, BodyTimeout, IdleTimeout time.Duration
	MinUploadRate                           int64
	UploadGrace                             time.Duration
	MaxConns                                int
	// CancelWait is how long DELETE waits for a running task to stop (60 s)
	// before it answers that the task is stopping; DrainTimeout how long
	// Serve lets requests in flight finish at shutdown (10 s).
	CancelWait, DrainTimeout time.Duration
	// StreamAllow lists the URLs live sessions may read and write, as
	// scheme://host[:port] (host * for any), with ?listen where they may
	// listen; none: no live sessions.
	StreamAllow []string
}

// withDefaults fills in the zero fields of c.
func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.HeaderTimeout, 30*time.Second)
	def(&c.BodyTimeout, 60*time.Second)
	def(&c.IdleTimeout, 120*time.Second)
	def(&c.UploadGrace, 30*time.Second)
	def(&c.CancelWait, 60*time.Second)
	def(&c.DrainTimeout, 10*time.Second)
	def(&c.AckWait, 10*time.Second)
	if c.MinUploadRate <= 0 {
		c.MinUploadRate = 64 << 10
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 256
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.MaxQueue <= 0 {
		c.MaxQueue = 100
	}
	if c.MaxUpload <= 0 {
		c.MaxUpload = 2 << 30
	}
	if c.MaxOutputPixels <= 0 {
		c.MaxOutputPixels = DefaultMaxOutputPixels
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 3
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Service owns the store, the queue and the worker.
type Service struct {
	cfg       Config
	runner    Runner
	st        TaskStore
	mode      mode               // which constructor made it
	wq        WorkQueue          // st's, when it has the capability (remote, worker)
	pullFrom  []WorkSource       // a worker's work queues, one per model it serves
	announced chan struct{}      // closed when a worker has left the worker bucket
	hashes    map[string]string  // the served models' content hashes (remote, worker; see hashModels)
	copies    *privateDir        // a worker's copies of uploads (see localPaths)
	signKey   ed25519.PrivateKey // the API's key that signs task records (remote; see seal.go)
	signer    string             // its public key in hex
	trusted   sync.Map           // the signers a worker found in the signers' bucket
	log       *slog.Logger
	m         *metrics

	mu      sync.Mutex
	tasks   map[string]*Task
	queue   Queue   // pending task ids
	running []*Task // running tasks, oldest first
	seq     uint64
	closing bool

	outputs map[string][]string // the ids of the tasks (in tasks) of each output path

	wake      chan struct{}
	workers   sync.WaitGroup
	stop      context.CancelFunc
	stopOnce  sync.Once
	closeOnce sync.Once
	closeErr  error

	uploads uploadBudget // Config.MaxUploadTotal

	allow []allowRule // Config.StreamAllow
	live  streams     // the live sessions
}

// ErrQueueFull is returned by Submit when MaxQueue tasks are pending.
var ErrQueueFull = errors.New("task queue is full")

// mode is what a Service does with its tasks.
type mode int

const (
	modeLocal  mode = iota // New: it queues its tasks and runs them
	modeRemote             // NewRemote: it queues them for workers on other machines and runs none
	modeWorker             // NewWorker: it runs tasks it takes from the work queue, with no HTTP API
)

// New opens the store in cfg.Data, removes temporaries left by interrupted
// tasks, requeues the tasks that were pending or processing, and starts
// cfg.Workers workers that run them with r.
func New(cfg Config, r Runner) (*Service, error) { return newService(cfg, r, modeLocal) }

// NewRemote opens a Service that is the API of workers on other machines
// (vsr serve --workers 0): it records each task in its store, which must
// have the WorkQueue capability (cfg.NATS), queues it there for the
// workers that serve its model, and runs none itself (see cluster.go).
func NewRemote(cfg Config, r Runner) (*Service, error) { return newService(cfg, r, modeRemote) }

// NewWorker opens a worker (vsr worker): a Service without HTTP that
// takes its tasks from the work queue of a store with the WorkQueue
// capability (cfg.NATS) and runs cfg.Workers of them at once with r (see
// cluster.go).
func NewWorker(cfg Config, r Runner) (*Service, error) { return newService(cfg, r, modeWorker) }

// newService makes a Service of mode m.
func newService(cfg Config, r Runner, m mode) (*Service, error) {
	if cfg.Data == "" {
		return nil, errors.New("serve: no data directory")
	}
	if cfg.ReadToken != "" && (cfg.Token == "" || cfg.ReadToken == cfg.Token) {
		return nil, errors.New("serve: a read-only token needs a different token for writes")
	}
	if cfg.InputRoot == "" {
		cfg.InputRoot = filepath.Join(cfg.Data, "input")
	}
	if cfg.OutputRoot == "" {
		cfg.OutputRoot = filepath.Join(cfg.Data, "output")
	}
	cfg = cfg.withDefaults()
	allow, err := parseAllow(cfg.StreamAllow)
	if err != nil {
		return nil, err
	}
	for _, d := range []*string{&cfg.InputRoot, &cfg.OutputRoot} {
		if err = os.MkdirAll(*d, 0o755); err != nil {
			return nil, err
		}
		if *d, err = filepath.Abs(*d); err != nil {
			return nil, err
		}
		if *d, err = filepath.EvalSymlinks(*d); err != nil {
			return nil, err
		}
	}
	st := cfg.Store
	switch {
	case st != nil:
	case cfg.NATS != nil:
		if st, err = openJetStream(cfg.Data, *cfg.NATS, leaseOptions(cfg, m)...); err != nil {
			return nil, err
		}
	default:
		if st, err = openStore(cfg.Data); err != nil {
			return nil, err
		}
	}
	s := &Service{
		cfg: cfg, runner: r, st: st, mode: m, log: cfg.Logger,
		tasks: map[string]*Task{}, outputs: map[string][]string{}, queue: &fifo{},
		wake: make(chan struct{}, 1), allow: allow,
	}
	s.wq, _ = st.(WorkQueue)
	s.m = newMetrics(s)
	if m != modeLocal && s.wq == nil {
		st.Close()
		return nil, errNoJetStream
	}
	if err := s.hashModels(); err != nil {
		st.Close()
		return nil, err
	}
	if err := s.openSigner(); err != nil {
		st.Close()
		return nil, err
	}
	if m == modeWorker {
		// A worker shares its roots with other workers: it removes only
		// the temporaries of the tasks it takes (see runOne).
		if s.copies, err = openPrivateDir(cfg.Data, s.log); err != nil {
			st.Close()
			return nil, err
		}
		if err := s.subscribe(); err != nil {
			s.copies.close()
			st.Close()
			return nil, err
		}
	} else {
		removeTemporaries(cfg.OutputRoot, s.log)
		removeTemporaries(cfg.InputRoot, s.log)
		if err := s.recover(); err != nil {
			st.Close()
			return nil, err
		}
		s.sweepUploads()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	workers := cfg.Workers
	if m == modeRemote {
		workers = 0
	}
	if m == modeWorker {
		s.announced = make(chan struct{})
		go s.announce(ctx)
	}
	if m == modeRemote {
		s.workers.Add(1)
		go s.watch(ctx)
	}
	if m != modeWorker && (cfg.KeepFinished > 0 || cfg.KeepFinishedCount > 0) {
		s.workers.Add(1)
		go s.retain(ctx)
	}
	for range workers {
		s.workers.Add(1)
		go s.work(ctx)
	}
	return s, nil
}

// isTemporary reports whether name is a hidden temporary of vsr's encoders
// (the private directories ".STEM.vsr-*", and the files of older
// versions) or of an upload (".upload-*").
func isTemporary(name string) bool {
	return strings.HasPrefix(name, ".") && (strings.Contains(name, ".vsr-") || strings.HasPrefix(name, ".upload-"))
}

// uploadName matches the names vsr gives uploads (upload-UUID.EXT), so
// that a user's own files in a shared input root are never swept.
var uploadName = regexp.MustCompile(`^upload-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}(\.[a-z0-9]{1,9})?$`)

// sweepUploads removes the uploads in the input root that no pending or
// running task reads: left by a crash between storing an upload and
// storing its task, or by a task whose end was not recorded. An upload
// whose task another process is storing holds a lock (see owner.go), and
// the tasks are read again once the candidates are locked, so that a task
// stored meanwhile keeps its upload.
func (s *Service) sweepUploads() {
	used := func(ts iter.Seq[*Task]) map[string]bool {
		u := map[string]bool{}
		for t := range ts {
			if t.Upload && !t.Status.Final() {
				u[filepath.Base(t.Input)] = true
			}
		}
		return u
	}
	inUse := used(maps.Values(s.tasks))
	var held []*ownerLock
	defer func() {
		for _, l := range held {
			l.release(false)
		}
	}()
	ents, _ := os.ReadDir(s.cfg.InputRoot)
	for _, e := range ents {
		if e.Type().IsRegular() && uploadName.MatchString(e.Name()) && !inUse[e.Name()] {
			if l := tryLockExisting(filepath.Join(s.cfg.InputRoot, e.Name())); l != nil {
				held = append(held, l)
			}
		}
	}
	if len(held) == 0 {
		return
	}
	ts, err := s.st.Load()
	if err != nil {
		return
	}
	inUse = used(slices.Values(ts))
	for _, l := range held {
		if !inUse[filepath.Base(l.path)] && os.Remove(l.path) == nil {
			s.log.Info("removed an upload no task reads", "path", l.path)
		}
	}
}

// recover loads the stored tasks: finished ones are listed, pending ones
// queued again in order, and those that were processing run again.
func (s *Service) recover() error {
	ts, err := s.st.Load()
	if err != nil {
		return err
	}
	slices.SortFunc(ts, func(a, b *Task) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
	if s.mode == modeRemote { // the workers' work queue holds what is left to run
		for _, t := range ts {
			s.apply(t)
		}
		s.requeue()
		return nil
	}
	for _, t := range ts {
		s.track(t)
		s.seq = max(s.seq, t.Seq)
		switch t.Status {
		case Processing:
			if t.Attempts >= s.cfg.MaxAttempts {
				now := time.Now()
				t.Status, t.Ended = Failed, &now
				t.Error = fmt.Sprintf("interrupted %d times (the server stopped while it ran)", t.Attempts)
				t.ErrorType = "Interrupted"
				if err := s.st.Put(t); err != nil {
					return err
				}
				continue
			}
			t.Status, t.FramesDone, t.Rerun = Pending, 0, true
			if err := s.st.Put(t); err != nil {
				return err
			}
			s.log.Info("task interrupted by a restart runs again", "task", t.ID)
			s.queue.Push(t.ID)
		case Pending:
			s.queue.Push(t.ID)
		}
	}
	if s.queue.Len() > 0 {
		s.signal()
	}
	return nil
}

func (s *Service) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// submit queues t; it checks the queue's room, the id and the output (the
// HTTP layer has validated the request and resolved the paths). t.ID,
// t.Input and t.Output must be set. upload, if set, is the hidden name of
// an uploaded input: it takes its name t.Input only as the task is stored,
// so that a crash leaves no visible upload without a task.
func (s *Service) submit(t *Task, upload string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errors.New("the service is shutting down")
	}
	if s.queue.Len() >= s.cfg.MaxQueue {
		return ErrQueueFull
	}
	if _, ok := s.tasks[t.ID]; ok {
		return errDuplicate
	}
	for _, id := range s.outputs[t.Output] {
		if o := s.tasks[id]; !o.Status.Final() {
			return &conflictError{fmt.Sprintf("save_result_path %s is the output of task %s (%s): wait for it to finish, or choose another path", t.Output, o.ID, o.Status)}
		}
	}
	if _, err := os.Lstat(t.Output); err == nil && !t.Request.Overwrite {
		return &conflictError{fmt.Sprintf("save_result_path %s exists: choose another path, or set \"overwrite\": true to replace it", t.Output)}
	}
	if upload != "" {
		if err := os.Rename(upload, t.Input); err != nil {
			return fmt.Errorf("store upload: %w", err)
		}
	}
	s.seq++
	t.Seq = s.seq
	t.Status = Pending
	t.Created = time.Now()
	if mn, ok := s.runner.(ModelNamer); ok {
		var err error
		if t.ModelName, err = mn.ModelOf(&t.Request); err != nil {
			return err
		}
	}
	t.ModelHash = s.hashes[t.ModelName]
	t.InputRel, _ = filepath.Rel(s.cfg.InputRoot, t.Input)
	t.OutputRel, _ = filepath.Rel(s.cfg.OutputRoot, t.Output)
	s.seal(t)
	if err := s.st.Put(t); err != nil {
		if upload != "" {
			os.Remove(t.Input)
		}
		return fmt.Errorf("store task: %w", err)
	}
	if s.mode == modeRemote {
		if err := s.wq.Enqueue(t.ID, t.ModelName); err != nil {
			now := time.Now()
			t.Status, t.Ended, t.Error, t.ErrorType = Failed, &now, oneLine(err.Error()), "QueueError"
			s.persist(t)
			return err
		}
	}
	s.track(t)
	s.queue.Push(t.ID)
	s.m.submitted.Inc()
	s.signal()
	return nil
}

var errDuplicate = errors.New("a task with this task_id exists")

// track adds t to the tasks (or replaces its record) and to the index of
// outputs, which submit reads instead of every task; s.mu is held.
func (s *Service) track(t *Task) {
	if _, ok := s.tasks[t.ID]; !ok {
		s.outputs[t.Output] = append(s.outputs[t.Output], t.ID)
	}
	s.tasks[t.ID] = t
}

// forget takes task id out of the tasks and the index; s.mu is held.
func (s *Service) forget(id string) {
	t, ok := s.tasks[id]
	if !ok {
		return
	}
	delete(s.tasks, id)
	ids := slices.DeleteFunc(s.outputs[t.Output], func(o string) bool { return o == id })
	if len(ids) == 0 {
		delete(s.outputs, t.Output)
	} else {
		s.outputs[t.Output] = ids
	}
}

// retain deletes the finished tasks past their retention (Config.
// KeepFinished, KeepFinishedCount) until ctx ends.
func (s *Service) retain(ctx context.Context) {
	defer s.workers.Done()
	every := time.Minute
	if s.cfg.KeepFinished > 0 {
		every = min(every, max(s.cfg.KeepFinished/2, 10*time.Millisecond))
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		s.prune(time.Now())
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// prune deletes from the store and the list the finished tasks that ended
// more than KeepFinished before now, and the oldest beyond
// KeepFinishedCount. It holds s.mu for a batch of deletions at a time, so
// that a first pass over a long history does not hold up requests.
func (s *Service) prune(now time.Time) {
	s.mu.Lock()
	var done []*Task
	for _, t := range s.tasks {
		if t.Status.Final() {
			done = append(done, t)
		}
	}
	s.mu.Unlock()
	ended := func(t *Task) time.Time {
		if t.Ended != nil {
			return *t.Ended
		}
		return t.Created
	}
	slices.SortFunc(done, func(a, b *Task) int { return ended(b).Compare(ended(a)) }) // latest first
	var drop []string
	for i, t := range done {
		if s.cfg.KeepFinished > 0 && now.Sub(ended(t)) > s.cfg.KeepFinished ||
			s.cfg.KeepFinishedCount > 0 && i >= s.cfg.KeepFinishedCount {
			drop = append(drop, t.ID)
		}
	}
	for batch := range slices.Chunk(drop, 64) {
		s.mu.Lock()
		for _, id := range batch {
			if err := s.st.Delete(id); err != nil {
				s.mu.Unlock()
				s.log.Warn("delete a finished task", "task", id, "err", err)
				return
			}
			s.forget(id)
		}
		s.mu.Unlock()
	}
}

// conflictError refuses a task whose output another task targets or a file
// holds (409).
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// get returns a copy of the task with id.
func (s *Service) get(id string) (*Task, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.tasks[id]
	if !ok {
		return nil, false
	}
	return t.clone(), true
}

// list returns copies of all tasks in submission order.
func (s *Service) list() []*Task {
	s.mu.Lock()
	out := make([]*Task, 0, len(s.tasks))
	for _, t := range s.tasks {
		out = append(out, t.clone())
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *Task) int { return int(a.Seq) - int(b.Seq) })
	return out
}

type cancelResult int

const (
	cancelNotFound cancelResult = iota
	cancelDone                  // the task was cancelled (now or before)
	cancelNothing               // the task had finished already
	cancelStopping              // asked to stop, still running when the wait ended
)

// cancel cancels a pending task at once, or a running one and waits (up to
// ctx) for it to stop. It returns the outcome and the task's state.
func (s *Service) cancel(ctx context.Context, id string) (cancelResult, *Task) {
	s.mu.Lock()
	t, ok := s.tasks[id]
	if !ok {
		s.mu.Unlock()
		return cancelNotFound, nil
	}
	if s.mode == modeRemote && t.Status == Pending {
		// A worker may take it meanwhile: the write names the revision
		// read, and fails if the worker's came first.
		c := t.clone()
		now := time.Now()
		c.Status, c.Ended, c.Error = Cancelled, &now, "task cancelled by user"
		if err := s.st.Put(c); err != nil {
			s.mu.Unlock()
			return s.cancelRemote(ctx, id)
		}
		*t = *c
		s.queue.Remove(id)
		s.removeUpload(t)
		s.mu.Unlock()
		return cancelDone, c.clone()
	}
	if s.mode == modeRemote && t.Status == Processing {
		s.mu.Unlock()
		return s.cancelRemote(ctx, id)
	}
	switch t.Status {
	case Pending:
		s.queue.Remove(id)
		now := time.Now()
		t.Status, t.Ended, t.Error = Cancelled, &now, "task cancelled by user"
		s.persist(t)
		if t.Upload {
			os.Remove(t.Input)
		}
		c := t.clone()
		s.mu.Unlock()
		return cancelDone, c
	case Processing:
		t.cancelAsked = true
		t.cancel()
		done := t.done
		s.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
		}
		c, _ := s.get(id)
		switch c.Status {
		case Cancelled:
			return cancelDone, c
		case Processing:
			return cancelStopping, c
		}
		return cancelNothing, c
	}
	c := t.clone()
	s.mu.Unlock()
	if c.Status == Cancelled { // as LightX2V: cancelling again succeeds
		return cancelDone, c
	}
	return cancelNothing, c
}

// persist writes t; s.mu is held. A store failure is logged: the task goes
// on in memory.
func (s *Service) persist(t *Task) {
	if t.lost { // a worker's task that is another's now: its record too
		return
	}
	s.saved(t, s.st.Put(t))
}

// saved takes in err, the outcome of writing task t; s.mu is held.
func (s *Service) saved(t *Task, err error) {
	t.unsaved = err != nil && !errors.Is(err, errChanged)
	if err == nil {
		return
	}
	if s.mode == modeWorker && errors.Is(err, errChanged) && t.cancel != nil && !t.lost {
		// Another worker took the task over (its message was delivered
		// again): the record is its now, and this run stops.
		s.log.Warn("another worker took over a running task: stopping it", "task", t.ID)
		t.lost = true
		t.cancel()
		return
	}
	s.log.Error("store task", "task", t.ID, "err", err)
}

// work runs queued tasks one at a time until ctx is cancelled (Workers
// of these run at once).
func (s *Service) work(ctx context.Context) {
	defer s.workers.Done()
	for {
		var t *Task
		var tctx context.Context
		if s.mode == modeWorker {
			if t, tctx = s.pull(ctx); t == nil {
				if ctx.Err() != nil {
					return
				}
				continue
			}
		} else if t, tctx = s.next(ctx); t == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				continue
			}
		}
		// Another idle worker may take the next pending task.
		select {
		case s.wake <- struct{}{}:
		default:
		}
		s.runOne(ctx, tctx, t)
		if s.mode == modeWorker {
			s.release(t)
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// next pops the first pending task, marks it processing and gives it a
// context of its own.
func (s *Service) next(parent context.Context) (*Task, context.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, nil
	}
	id, ok := s.queue.Pop()
	if !ok {
		return nil, nil
	}
	t := s.tasks[id]
	now := time.Now()
	t.Status, t.Started, t.Ended, t.Error = Processing, &now, nil, ""
	t.FramesDone = 0
	t.Attempts++
	t.done = make(chan struct{})
	var ctx context.Context
	ctx, t.cancel = context.WithCancel(parent)
	s.running = append(s.running, t)
	s.persist(t)
	return t, ctx
}

func (s *Service) runOne(parent, ctx context.Context, t *Task) {
	s.mu.Lock()
	cancel := t.cancel
	orig := t.clone()
	s.mu.Unlock()
	if t.in != "" { // a worker's: its own roots
		orig.Input, orig.Output = t.in, t.out
	}
	work, files, openErr := s.openTask(orig)
	if files != nil {
		defer files.close()
	}
	var output string // the output as the runner's copy names it
	var lock *ownerLock
	if openErr == nil {
		// Held while the task's temporaries live: no sweep removes them.
		lock, openErr = lockOutput(work.Output)
		output, work.Output = work.Output, resultTemp(work.Output)
	}
	if openErr == nil && orig.Rerun {
		removeStaleResults(files.out, filepath.Base(output), s.log)
	}

	// Progress is saved every second, in the background and outside s.mu
	// (a slow store must hold up neither the run nor the lease), one save
	// at a time, until the run ends: its last save lands before the result
	// is placed (an older copy of t must not overwrite the record of
	// Wrote).
	lastSave := time.Now()
	var saving sync.WaitGroup
	inFlight, ran := false, false // a save is under way, the run is over (s.mu)
	progress := func(done, total int) {
		s.mu.Lock()
		if done > t.FramesDone {
			s.m.frames.Add(float64(done - t.FramesDone))
		}
		t.FramesDone, t.FramesTotal = done, total
		var c *Task
		if time.Since(lastSave) >= time.Second && !t.lost && !inFlight && !ran {
			lastSave, c, inFlight = time.Now(), t.clone(), true
			saving.Add(1)
		}
		s.mu.Unlock()
		if c != nil {
			go func() {
				defer saving.Done()
				err := s.st.Put(c)
				s.mu.Lock()
				s.saved(t, err)
				inFlight = false
				s.mu.Unlock()
			}()
		}
	}
	start := time.Now()
	errType, err := "PathError", openErr
	if err == nil {
		work.Replace = true // its hidden result; placeResult decides
		if errType, err = s.checkRun(ctx, work); err == nil {
			errType, err = s.safeRun(ctx, work, progress)
		}
		s.mu.Lock()
		ran = true
		s.mu.Unlock()
		saving.Wait()
		if err == nil {
			errType, err = s.place(ctx, t, work.Output, output, orig)
		}
		if err != nil {
			msg := strings.ReplaceAll(err.Error(), work.Output, output)
			err = errors.New(files.names.Replace(msg))
		}
	}
	var result string
	if err == nil && orig.Files { // a worker's result goes to the object store
		if result, err = s.storeResult(orig); err != nil {
			errType = "StoreError"
		}
	}
	sec := time.Since(start).Seconds()
	cancel()
	lock.release(true)

	s.mu.Lock()
	now := time.Now()
	t.Ended = &now
	switch {
	case err == nil:
		t.Status, t.Error, t.Result = Completed, "", result
		t.Width, t.Height, t.FPS, t.Devices = work.Width, work.Height, work.FPS, work.Devices
		t.Carried, t.Dropped = work.Carried, work.Dropped
		if t.FramesTotal > 0 {
			t.FramesDone = t.FramesTotal
		}
		if sec > 0 && t.FramesDone > 0 {
			s.m.fps.Set(float64(t.FramesDone) / sec)
		}
	case t.cancelAsked:
		t.Status, t.Error = Cancelled, "task cancelled by user"
	case parent.Err() != nil || t.lost:
		// Shutting down, or a worker that lost its lease: the task runs
		// again at the next start, or on another worker.
		t.Status, t.Ended, t.FramesDone, t.Rerun = Pending, nil, 0, true
		t.Attempts--
		if s.mode == modeWorker && !t.lost {
			t.HandedBack++ // a graceful stop: not a failed delivery
		}
	default:
		t.Status, t.Error, t.ErrorType = Failed, oneLine(err.Error()), errType
		s.log.Warn("task failed", "task", t.ID, "err", t.Error)
	}
	if work != nil && work.Devices != "" {
		t.Devices = work.Devices
	}
	if t.Status.Final() {
		s.m.duration.WithLabelValues(string(t.Status)).Observe(sec)
		if t.Devices != "" {
			s.m.byDevices.WithLabelValues(t.Devices, string(t.Status)).Inc()
		}
		if t.Upload && s.mode != modeWorker { // an uploaded input is of no use once the task is over (the API removes a worker's)
			os.Remove(t.Input)
		}
	}
	s.dropUpload(t) // a worker's own copy
	s.persist(t)
	s.running = slices.DeleteFunc(s.running, func(r *Task) bool { return r == t })
	t.cancel = nil
	close(t.done)
	s.mu.Unlock()
	s.log.Info("task finished", "task", t.ID, "status", t.Status, "seconds", sec)
	// A task's frames and buffers are garbage now: give the memory back to
	// the system instead of keeping the heap at its peak between tasks.
	debug.FreeOSMemory()
}

// place puts the result tmp of running task t at output (see
// placeResult), having recorded its identity; orig is t as the run began.
// A run cancelled meanwhile (ctx), or a worker's that lost its lease to
// another, puts nothing in place: the checks and the rename are made
// under s.mu, which the lease's loss takes.
func (s *Service) place(ctx context.Context, t *Task, tmp, output string, orig *Task) (string, error) {
	id, err := resultID(tmp)
	if err != nil {
		return "RuntimeError", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Wrote = append(t.Wrote, id)
	s.persist(t)
	if err = ctx.Err(); err == nil && t.lost {
		err = errors.New("the lease on the task was lost: it runs on another worker")
	}
	if err == nil {
		err = placeResult(tmp, output, orig.Output, orig.Request.Overwrite, orig.Wrote)
	}
	if err != nil {
		os.Remove(tmp)
		return errorType(err), err
	}
	return "", nil
}

// safeRun runs the runner, turning a panic into an error so that one bad
// task cannot take the service down. It also classifies a failure for the
// status's error_type.
func (s *Service) safeRun(ctx context.Context, t *Task, progress func(int, int)) (errType string, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("runner panic", "task", t.ID, "panic", r, "stack", string(debug.Stack()))
			errType, err = "InternalError", fmt.Errorf("internal error: %v", r)
		}
	}()
	err = s.runner.Run(ctx, t, progress)
	return errorType(err), err
}

// errorType names the kind of a runner's error.
func errorType(err error) string {
	for _, k := range []struct {
		err  error
		name string
	}{
		{video.ErrNotVideo, "NotVideo"}, {video.ErrNoFrames, "NoFrames"},
		{video.ErrTruncated, "TruncatedVideo"}, {video.ErrCorrupt, "CorruptVideo"},
		{video.ErrExists, "OutputExists"}, {video.ErrNoFFmpeg, "NoFFmpeg"},
		{video.ErrFormat, "InputFormat"}, {video.ErrLimit, "InputLimit"},
	} {
		if errors.Is(err, k.err) {
			return k.name
		}
	}
	return "RuntimeError"
}

// stopWorker stops taking tasks and interrupts the running ones, which
// stay queued for the next start (their temporaries are removed by the
// runner), and waits for the workers to end. Submits are refused from then
// on.
func (s *Service) stopWorker() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.stop()
		s.stopStreams()
		s.workers.Wait()
		if s.announced != nil { // a worker: gone from the list of workers
			<-s.announced
		}
	})
}

// Close stops the worker (see Serve) and closes the store.
func (s *Service) Close() error {
	s.stopWorker()
	s.closeOnce.Do(func() {
		s.copies.close()
		s.closeErr = s.st.Close()
	})
	return s.closeErr
}

// NATSURL is the NATS server the tasks are kept on ("" with bbolt or a
// store of the caller's): the address workers on other machines connect
// to when the server is embedded.
func (s *Service) NATSURL() string {
	if j, ok := s.st.(*jsStore); ok {
		return j.URL()
	}
	return ""
}

// InputRoot and OutputRoot return the resolved roots.
func (s *Service) InputRoot() string  { return s.cfg.InputRoot }
func (s *Service) OutputRoot() string { return s.cfg.OutputRoot }

// oneLine folds a message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}
