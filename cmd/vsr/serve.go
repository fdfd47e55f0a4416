package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vsr-dev/vsr/app"
	"github.com/vsr-dev/vsr/model"
	"github.com/vsr-dev/vsr/pipeline"
	"github.com/vsr-dev/vsr/serve"
)

type serveFlags struct {
	listen     string
	data       string
	inputRoot  string
	outputRoot string
	maxQueue   int
	maxUpload  int64
	maxConns   int
	// minUploadRate is the slowest upload accepted, in bytes/s.
	minUploadRate int64
	token         string
	tokenFile     string
	models        []string
	warmup        bool
	warmupSize    string
	ranksPerTask  int
	// natsListen, natsURLs, natsTokenFile and natsReplicas keep the tasks
	// on NATS JetStream (see serve.NATS).
	natsListen, natsURLs, natsTokenFile string
	natsNkeyFile                        string
	natsTLSCert, natsTLSKey, natsTLSCA  string
	natsReplicas                        int
	streamAllow                         []string
	natsFiles                           bool
	// workers is how many tasks this process runs at once (-1: one per
	// group of devices; 0: none, the API of vsr worker processes);
	// maxAttempts the runs a task may start.
	workers, maxAttempts int
	base                 restoreFlags // device and per-request defaults
	// params are the model parameters set by flags: the defaults of
	// requests that do not set them.
	params model.Values

	// maxUploadTotal bounds the uploads in the input root; keepFinished
	// and keepFinishedCount are the retention of finished tasks.
	maxUploadTotal    int64
	keepFinished      time.Duration
	keepFinishedCount int
	// readTokenFile holds the read-only token (else $VSR_READ_TOKEN).
	readTokenFile string
	// maxOutputPixels bounds a task's output frames (width x height).
	maxOutputPixels int64
	// publicHosts are the names clients reach the API by, besides IP
	// addresses, localhost and --listen's host (serve.Config.PublicHosts).
	publicHosts []string
}

func newServe() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve restore requests over HTTP (LightX2V-compatible task API)",
		Long: `Serve restore requests over HTTP with LightX2V's task API (see docs/API.md).

Models are loaded once and stay resident; tasks run one at a time on the
device, in the order they came, and survive restarts: they are kept in a
database in --data. Without --model the bundled realesr-animevideov3 is
served, with sr_ratio 2, 3 or 4 picking its graph (2 by default).`,
		Example: `  vsr serve
  vsr serve --listen 127.0.0.1:8000 --data /srv/vsr --device cuda:0 --warmup
  VSR_TOKEN=secret vsr serve --listen 0.0.0.0:8000 --input-root /videos --output-root /results`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd, f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8000", "address to listen on (loopback by default)")
	fl.StringVar(&f.data, "data", defaultDataDir(), "directory of the task database (and of the default input and output roots)")
	fl.StringVar(&f.inputRoot, "input-root", "", "directory that video_path must resolve inside; uploads are stored here (default DATA/input)")
	fl.StringVar(&f.outputRoot, "output-root", "", "directory that save_result_path must resolve inside (default DATA/output)")
	fl.IntVar(&f.maxQueue, "max-queue", 100, "most tasks waiting in the queue; more get 503")
	fl.StringSliceVar(&f.streamAllow, "stream-allow", nil, "URLs live sessions (POST /v1/streams) may read and write, as scheme://host[:port] (host * for any; ?listen to let them listen there), repeatable; none: no live sessions")
	fl.StringSliceVar(&f.publicHosts, "public-host", nil, "a name clients reach the API by, NAME or NAME:PORT (repeatable): requests whose Host header names anything but an IP address, localhost, --listen's host or one of these get 421, so that a DNS name rebound to this machine reads nothing")
	fl.Int64Var(&f.maxUpload, "max-upload", 2<<30, "largest upload in bytes; larger get 413")
	fl.IntVar(&f.maxConns, "max-conns", 256, "most open client connections; a new one closes the longest idle one, and waits only when all are in a request")
	fl.Int64Var(&f.maxUploadTotal, "max-upload-bytes-total", 0, "most bytes of all uploads in the input root, stored for their tasks or arriving; an upload past it gets 507 (0 = no limit)")
	fl.DurationVar(&f.keepFinished, "keep-finished", 0, "how long finished tasks stay listed after they end (e.g. 168h); older ones are deleted from the task store, their results kept (0 = forever)")
	fl.IntVar(&f.keepFinishedCount, "keep-finished-count", 0, "most finished tasks kept listed, the latest (0 = no limit)")
	fl.Int64Var(&f.minUploadRate, "min-upload-rate", 64<<10, "slowest upload accepted, in bytes/s on average after its first 30 s; slower clients are dropped (408)")
	fl.StringVar(&f.token, "token", "", "bearer token required on every endpoint but /healthz (default $VSR_TOKEN; none = no authentication); other processes can read a flag's value: prefer $VSR_TOKEN or --token-file")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (instead of --token)")
	fl.StringVar(&f.readTokenFile, "read-token-file", "", "file holding a read-only bearer token, for dashboards: GET requests only (default $VSR_READ_TOKEN; needs --token)")
	fl.Int64Var(&f.maxOutputPixels, "max-output-pixels", serve.DefaultMaxOutputPixels, "largest output frame a task may ask for, width x height in pixels (8192x8192 by default); larger requests get 400 at submit")
	fl.StringSliceVar(&f.models, "model", nil, "model to serve, repeatable: "+model.Specs()+"; the first is the default (default: "+model.DefaultModel()+")")
	fl.BoolVar(&f.warmup, "warmup", false, "load every graph at start (x2, x3 and x4 of the bundled model) instead of at first use")
	fl.StringVar(&f.warmupSize, "warmup-size", "", "run a synthetic request at this output size (WxH, e.g. 2560x1440) at start through each served model that can run one, so that the first task does not compile kernels, choose algorithms or record CUDA graphs")
	fl.IntVar(&f.ranksPerTask, "ranks-per-task", 0, "devices per task with a device list: tasks run on groups of this many devices, one task per group at once (0 = all devices in one group when a "+model.List(model.Titles(model.IsGrouped), "or")+" model is served, else one device per task)")
	fl.StringVar(&f.natsListen, "nats-listen", "", "keep the tasks on NATS JetStream with an embedded NATS server listening here (host:port; files under --data/nats); clients need a credential: beyond loopback give one (--nats-token-file, --nats-nkey-file, --nats-tls-ca), on loopback without one the token of local workers is made in --data/nats/worker.token")
	fl.StringVar(&f.natsURLs, "nats", "", "keep the tasks on an external NATS JetStream server or cluster instead (nats://host:4222,...)")
	fl.StringVar(&f.natsTokenFile, "nats-token-file", "", "file holding the NATS token: with --nats-listen the workers' tokens, one a line (one per worker, so that each can be revoked; they get the worker role), else the token given to the external server")
	fl.StringVar(&f.natsNkeyFile, "nats-nkey-file", "", "file holding an nkey seed (nk -gen user): with --nats-listen, workers that sign with it are let in (the worker role); else this process signs in with it")
	addNATSTLSFlags(fl, &f)
	fl.IntVar(&f.natsReplicas, "nats-replicas", 1, "replicas of the NATS task bucket (3 on a cluster of 3)")
	fl.BoolVar(&f.natsFiles, "nats-files", false, "keep uploads and their results in a NATS object store, for workers that share no filesystem with this machine")
	fl.IntVar(&f.workers, "workers", -1, "tasks this process runs at once: -1 = one per group of devices; 0 = none, the API alone for vsr worker processes (needs --nats-listen or --nats)")
	fl.IntVar(&f.maxAttempts, "max-attempts", 3, "runs a task may start (one interrupted by a crash, or whose worker died, runs again) before it fails")
	addTaskFlags(fl, &f.base)
	return cmd
}

// addTaskFlags adds the device flags and the defaults of tasks of vsr
// serve and vsr worker: the encoder's settings and the models' parameters.
func addTaskFlags(fl *pflag.FlagSet, b *restoreFlags) {
	fl.StringVar(&b.device, "device", "auto", "compute device: auto (the first GPU if any, else cpu), cpu, cuda, cuda:N, or a list (cuda:0,cuda:1, cuda:all; see --ranks-per-task)")
	fl.StringVar(&b.dtype, "dtype", "auto", dtypeHelp())
	fl.StringVar(&b.codec, "codec", "", "default ffmpeg video encoder (a request's codec wins; default: the output container's, as restore's --codec)")
	fl.IntVar(&b.crf, "crf", 18, "default encoder quality (a request's crf wins)")
	fl.StringVar(&b.preset, "preset", "medium", "default libx264/libx265 preset (a request's preset wins)")
	fl.StringVar(&b.pixFmt, "pix-fmt", "", "default output pixel format (a request's pix_fmt wins); unset: yuv420p, or the input's depth and chroma subsampling above 8 bits")
	fl.IntVar(&b.batch, "batch", 0, "frames per model call (0 = 8 on a GPU, 1 on the CPU)")
	fl.IntVar(&b.segments, "segments", 0, "segments encoded in parallel (0 = 4 on a GPU with 8+ CPU cores, else 1)")
	fl.IntVar(&b.threads, "encoder-threads", 0, "threads per encoder (0 = the encoder's default)")
	addFamilyFlags(fl)                     // model parameters: defaults of the requests that do not set them
	if s := fl.Lookup("scale"); s != nil { // unset, LightX2V's sr_ratio 2 is the default (see newServeRunner)
		s.DefValue = "2"
	}
}

func defaultDataDir() string {
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "vsr", "serve")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "vsr", "serve")
	}
	return "vsr-serve"
}

func runServe(cmd *cobra.Command, f serveFlags) error {
	if f.maxQueue < 1 || f.maxUpload < 1 || f.maxOutputPixels < 1 {
		return fmt.Errorf("--max-queue, --max-upload and --max-output-pixels must be at least 1")
	}
	if f.maxUploadTotal < 0 || f.keepFinished < 0 || f.keepFinishedCount < 0 {
		return fmt.Errorf("--max-upload-bytes-total, --keep-finished and --keep-finished-count must be 0 (no limit) or more")
	}
	var err error
	if !cmd.Flags().Changed("token") {
		f.token = os.Getenv("VSR_TOKEN") // not the flag's default, which --help would print
	}
	if f.tokenFile != "" {
		if cmd.Flags().Changed("token") {
			return fmt.Errorf("--token and --token-file: give one")
		}
		if f.token, err = readToken("--token-file", f.tokenFile); err != nil {
			return err
		}
	}
	readToken, err := readTokenOf(f)
	if err != nil {
		return err
	}
	if f.params, err = familyValues(cmd.Flags()); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
	ctx := cmd.Context()
	if f.workers == 0 && f.warmupSize != "" {
		return fmt.Errorf("--warmup-size with --workers 0: this server runs no task (its models are opened without their weights); warm up the vsr worker processes")
	}
	run, err := newServeRunner(cmd, f, f.workers == 0)
	if err != nil {
		return err
	}
	defer run.Close()
	def := run.Models()[0]
	nc, err := natsConfig(f)
	if err != nil {
		return err
	}
	if f.workers == 0 && nc == nil {
		return fmt.Errorf("--workers 0 serves the API alone for vsr worker processes, which take the tasks from NATS JetStream: add --nats-listen or --nats")
	}
	workers := run.Workers()
	if f.workers > 0 {
		workers = min(f.workers, run.Workers())
	}
	open := serve.New
	if f.workers == 0 {
		open = serve.NewRemote // the API alone: vsr worker processes run the tasks
	}
	svc, err := open(serve.Config{
		NATS: nc, MaxAttempts: f.maxAttempts,
		Data: f.data, InputRoot: f.inputRoot, OutputRoot: f.outputRoot,
		MaxQueue: f.maxQueue, MaxUpload: f.maxUpload, Token: f.token, ReadToken: readToken, MaxOutputPixels: f.maxOutputPixels,
		Version: versionString(), Logger: log,
		Model: cmp.Or(def.Spec, def.Model.Name()), ModelClass: def.Family.Name(),
		MaxConns: f.maxConns, MinUploadRate: f.minUploadRate, Workers: workers,
		StreamAllow: f.streamAllow, PublicHosts: publicHosts(f), MaxUploadTotal: f.maxUploadTotal,
		KeepFinished: f.keepFinished, KeepFinishedCount: f.keepFinishedCount,
	}, run)
	if err != nil {
		return err
	}
	defer svc.Close()
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	if host, _, _ := net.SplitHostPort(f.listen); f.token == "" && !serve.IsLoopback(host) {
		log.Warn("listening beyond loopback without --token: anyone who can reach the port can run tasks")
	}
	var names []string
	for _, m := range run.Models() {
		names = append(names, m.Model.Name())
	}
	log.Info("vsr serve listening", "url", "http://"+ln.Addr().String(), "devices", run.Devices(), "tasks_at_once", run.Workers(),
		"models", strings.Join(names, ","), "data", f.data, "input_root", svc.InputRoot(), "output_root", svc.OutputRoot())
	if u := svc.NATSURL(); u != "" {
		log.Info("tasks kept on NATS JetStream", "nats", u)
		if nc.Listen != "" && nc.Token == "" && nc.NkeySeed == "" && nc.TLSCA == "" {
			log.Info("workers on this machine sign in to NATS with", "nats_token_file", serve.WorkerTokenFile(f.data))
		}
	}
	return svc.Serve(ctx, ln)
}

// publicHosts returns the names the API answers to besides IP addresses
// and localhost: --public-host's, and --listen's host when it is a name.
func publicHosts(f serveFlags) []string {
	hosts := slices.Clone(f.publicHosts)
	if host, _, err := net.SplitHostPort(f.listen); err == nil && host != "" && net.ParseIP(host) == nil {
		hosts = append(hosts, host)
	}
	return hosts
}

// readTokenOf returns the read-only token: --read-token-file's, else
// $VSR_READ_TOKEN. It needs --token, and must differ from it.
func readTokenOf(f serveFlags) (string, error) {
	tok := os.Getenv("VSR_READ_TOKEN")
	if f.readTokenFile != "" {
		var err error
		if tok, err = readToken("--read-token-file", f.readTokenFile); err != nil {
			return "", err
		}
	}
	switch {
	case tok != "" && f.token == "":
		return "", fmt.Errorf("a read-only token (--read-token-file, $VSR_READ_TOKEN) needs --token (or $VSR_TOKEN): without it every client may write")
	case tok != "" && tok == f.token:
		return "", fmt.Errorf("the read-only token is the --token: give it a different one")
	}
	return tok, nil
}

// addNATSTLSFlags adds the TLS flags of serve and worker.
func addNATSTLSFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.natsTLSCert, "nats-tls-cert", "", "PEM certificate this process presents: the embedded server's with --nats-listen (its port then speaks only TLS), else a client certificate")
	fl.StringVar(&f.natsTLSKey, "nats-tls-key", "", "PEM key of --nats-tls-cert")
	fl.StringVar(&f.natsTLSCA, "nats-tls-ca", "", "PEM CA: with --nats-listen, clients must present a certificate it signed (a credential); else it verifies the server's certificate (default: the system's roots)")
}

// natsConfig returns the NATS JetStream store f asks for (nil: bbolt).
func natsConfig(f serveFlags) (*serve.NATS, error) {
	if f.natsListen == "" && f.natsURLs == "" {
		if f.natsTokenFile != "" || f.natsNkeyFile != "" || f.natsFiles || f.natsTLSCert != "" || f.natsTLSKey != "" || f.natsTLSCA != "" {
			return nil, fmt.Errorf("--nats-token-file, --nats-nkey-file, --nats-tls-* and --nats-files need --nats-listen or --nats")
		}
		return nil, nil
	}
	c := &serve.NATS{Listen: f.natsListen, URLs: f.natsURLs, Replicas: f.natsReplicas, Files: f.natsFiles, NkeySeed: f.natsNkeyFile,
		TLSCert: f.natsTLSCert, TLSKey: f.natsTLSKey, TLSCA: f.natsTLSCA}
	if f.natsTokenFile != "" {
		// The embedded server takes one token per worker, a line each;
		// a client gives one.
		toks, err := readTokens("--nats-token-file", f.natsTokenFile, 1<<20)
		if err != nil {
			return nil, err
		}
		if f.natsListen == "" && len(toks) != 1 {
			return nil, fmt.Errorf("--nats-token-file %s: want one token on one line", f.natsTokenFile)
		}
		c.Token, c.WorkerTokens = toks[0], toks[1:]
	}
	return c, nil
}

// readTokens reads the tokens in file, one a line (blank lines and lines
// starting with # skipped): at least one, each without spaces.
func readTokens(flag, file string, limit int64) ([]string, error) {
	b, err := readSmallFile(file, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	var toks []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.ContainsAny(l, " \t") || strings.ContainsFunc(l, unicode.IsControl) {
			return nil, fmt.Errorf("%s %s: want one token on one line", flag, file)
		}
		toks = append(toks, l)
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("%s %s: want one token on one line", flag, file)
	}
	return toks, nil
}

// readToken reads the one token of a file named by flag.
func readToken(flag, file string) (string, error) {
	toks, err := readTokens(flag, file, 4096)
	if err != nil {
		return "", err
	}
	if len(toks) != 1 {
		return "", fmt.Errorf("%s %s: want one token on one line", flag, file)
	}
	return toks[0], nil
}

// readSmallFile reads a regular file of at most limit bytes, checking the
// file it opened (not the name) so that a swapped link cannot hand it a
// device or a pipe.
func readSmallFile(name string, limit int64) ([]byte, error) {
	fh, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() || st.Size() > limit {
		return nil, fmt.Errorf("%s is not a regular file of at most %d bytes", name, limit)
	}
	return io.ReadAll(io.LimitReader(fh, limit))
}

// newServeRunner opens the device and loads the models of f (with
// headersOnly, those that can be without their weights: a server that
// runs no task): the service's runner. Requests that do not set sr_ratio get LightX2V's 2
// (the flag --sr-ratio, or --scale for the compact models, changes it).
func newServeRunner(cmd *cobra.Command, f serveFlags, headersOnly bool) (*app.Runner, error) {
	devs, err := app.OpenDevices(f.base.device, app.StorageType(f.base.dtype, f.models...))
	if err != nil {
		return nil, err
	}
	fieldDefaults := map[string]any{"sr_ratio": 2.0}
	if v, ok := f.params["sr-ratio"].(float64); ok {
		fieldDefaults["sr_ratio"] = v
	}
	run, err := app.NewRunner(devs, app.Served{
		Specs: f.models, Defaults: f.params, FieldDefaults: fieldDefaults, RanksPerTask: f.ranksPerTask, HeadersOnly: headersOnly,
		Base: app.Job{Encode: encodeOptions(f.base), Batch: f.base.batch, Segments: f.base.segments},
	})
	if err != nil {
		return nil, err
	}
	if f.warmup {
		err = run.Preload()
	}
	if err == nil && f.warmupSize != "" {
		var w, h int
		if _, serr := fmt.Sscanf(f.warmupSize, "%dx%d", &w, &h); serr != nil || w < 8 || h < 8 || fmt.Sprintf("%dx%d", w, h) != f.warmupSize {
			err = fmt.Errorf("--warmup-size %q: want WxH, e.g. 2560x1440", f.warmupSize)
		} else {
			err = run.Warmup(context.Background(), w, h, pipeline.OutputFormat(f.base.pixFmt, w, h))
		}
	}
	if err != nil {
		run.Close()
		return nil, err
	}
	return run, nil
}
