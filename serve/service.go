package serve

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

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
	// PublicHosts are the names (NAME, or NAME:PORT for that port only)
	// that clients may reach the HTTP API by, besides IP addresses,
	// localhost and names under .localhost: a request whose Host header
	// names anything else gets 421 (see guard).
	PublicHosts []string
	// MaxEventClients bounds the event streams open at once (GET
	// /v1/events; 16): more get 503.
	MaxEventClients int
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
	if c.MaxEventClients <= 0 {
		c.MaxEventClients = 16
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

// Service owns the scheduler (the store, the queue and the workers), its
// cluster state and the HTTP API's shared state.
type Service struct {
	cfg    Config
	runner Runner
	m      *metrics

	scheduler // the store, the tasks, their queue and the workers that run them (scheduler.go)
	cluster   // tasks on other machines (cluster.go)

	closeOnce sync.Once
	closeErr  error

	uploads uploadBudget // Config.MaxUploadTotal
	owner   string       // this instance's id, in its uploads' names (uploads.go)

	allow []allowRule // Config.StreamAllow
	hosts []hostName  // Config.PublicHosts
	live  streams     // the live sessions

	events   *eventHub // the open event streams (GET /v1/events)
	previews *previews // rendered preview frames (GET /v1/tasks/{id}/preview)
}

// New opens the store in cfg.Data, removes temporaries left by interrupted
// tasks, requeues the tasks that were pending or processing, and starts
// cfg.Workers workers that run them with r.
func New(cfg Config, r Runner) (*Service, error) {
	return newService(cfg, r, func(s *Service) placement { return local{s} }, nil)
}

// NewRemote opens a Service that is the API of workers on other machines
// (vsr serve --workers 0): it records each task in its store, which must
// have the WorkQueue capability (cfg.NATS), queues it there for the
// workers that serve its model, and runs none itself (see cluster.go).
func NewRemote(cfg Config, r Runner) (*Service, error) {
	return newService(cfg, r, func(s *Service) placement { return remoteAPI{local{s}} }, nil)
}

// NewWorker opens a worker (vsr worker): a Service without HTTP that
// takes its tasks from the work queue of a store with the WorkQueue
// capability (cfg.NATS) and runs cfg.Workers of them at once with r (see
// cluster.go).
func NewWorker(cfg Config, r Runner) (*Service, error) {
	return newService(cfg, r, func(s *Service) placement { return worker{local{s}} }, leaseOptions)
}

// newService makes a Service whose placement is place's; dial, when set,
// gives the options of its connection to NATS (Config.NATS).
func newService(cfg Config, r Runner, place func(*Service) placement, dial func(Config) []nats.Option) (*Service, error) {
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
	hosts, err := parsePublicHosts(cfg.PublicHosts)
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
		var opts []nats.Option
		if dial != nil {
			opts = dial(cfg)
		}
		if st, err = openJetStream(cfg.Data, *cfg.NATS, opts...); err != nil {
			return nil, err
		}
	default:
		if st, err = openStore(cfg.Data); err != nil {
			return nil, err
		}
	}
	s := &Service{
		cfg: cfg, runner: r, allow: allow, hosts: hosts,
		scheduler: scheduler{
			st: st, log: cfg.Logger,
			tasks: map[string]*Task{}, outputs: map[string][]string{}, queue: &fifo{},
			wake: make(chan struct{}, 1),
		},
		cluster:  cluster{hashes: map[string]string{}},
		events:   newEventHub(),
		previews: newPreviews(),
	}
	if s.owner, err = openOwner(cfg.Data); err != nil {
		st.Close()
		return nil, err
	}
	s.placement = place(s)
	s.wq, _ = st.(WorkQueue)
	s.m = newMetrics(s)
	if err := s.placement.open(); err != nil {
		st.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.placement.start(ctx)
	return s, nil
}

// Close stops the worker (see Serve) and closes the store.
func (s *Service) Close() error {
	s.stopWorker()
	s.events.close()
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
