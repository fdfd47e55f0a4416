package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// NATS configures the task store on NATS JetStream (Config.NATS), the
// store of deployments beyond one process: an embedded NATS server that
// workers on other machines reach, or an external NATS cluster.
type NATS struct {
	// Listen starts an embedded NATS server with JetStream on this
	// address (host:port; port -1 picks a free one), its files under
	// Data/nats. Its clients need a credential: Token, WorkerTokens,
	// NkeySeed or TLSCA; on loopback without one, the server makes a
	// token for the workers of this machine in Data/nats/worker.token
	// (see natsAuth). Its own process connects in process, with a
	// credential of its own.
	Listen string
	// URLs connects to an external NATS server or cluster instead
	// (nats://host:port, comma-separated).
	URLs string
	// Token is the credential a client gives, and one the embedded
	// server accepts; WorkerTokens are more that the embedded server
	// accepts (one per worker, so that each can be revoked). NkeySeed is
	// the file of an nkey seed (nk -gen user), with which a client signs
	// in and whose public key the embedded server accepts. The embedded
	// server gives these clients the worker role (workerPermissions).
	Token        string
	WorkerTokens []string
	NkeySeed     string
	// TLSCert and TLSKey are the certificate this process presents: the
	// embedded server's (its port then speaks only TLS), or a client's to
	// an external server that asks for one. TLSCA is a CA file: with
	// Listen, clients must present a certificate it signed (mutual TLS, a
	// credential in itself); otherwise it verifies the server's
	// certificate (default: the system's roots). A tls:// URL asks for
	// TLS of a server.
	TLSCert, TLSKey, TLSCA string
	// Replicas is the task bucket's replica count (default 1; 3 on a
	// cluster of 3).
	Replicas int
	// Files keeps the uploads and the results of tasks in a JetStream
	// object store (fileBucket), for workers that share no filesystem with
	// the API (vsr serve --nats-files).
	Files bool
}

// taskBucket is the key-value bucket of task records.
const taskBucket = "vsr_tasks"

// natsTimeout bounds each call to the NATS server.
const natsTimeout = 10 * time.Second

// jsStore keeps tasks in a JetStream key-value bucket, one JSON record
// per task under its id. Every write names the revision it replaces (or
// creates the key), so two writers never silently lose each other's
// change: the second is refused.
type jsStore struct {
	srv *server.Server // the embedded server (nil: an external one)
	nc  *nats.Conn
	js  jetstream.JetStream
	kv  jetstream.KeyValue // tasks
	// stream is the work queue.
	stream jetstream.Stream
	// workers holds the workers connected now (see WorkerInfo).
	workers jetstream.KeyValue
	// signers holds the public keys of the APIs that sign task records
	// (see seal.go).
	signers jetstream.KeyValue
	// uploads and files hold uploads and results (NATS.Files).
	uploads, files jetstream.ObjectStore

	mu  sync.Mutex
	rev map[string]uint64 // the revision this store last wrote or read of each task
}

var _ WorkQueue = (*jsStore)(nil)

// openJetStream starts or connects to the NATS server of c and opens the
// task bucket; more are options of the connection (a worker's pings).
func openJetStream(data string, c NATS, more ...nats.Option) (*jsStore, error) {
	s := &jsStore{rev: map[string]uint64{}}
	url := c.URLs
	if c.Listen != "" {
		if url != "" {
			return nil, errors.New("serve: both an embedded NATS server to listen on and an external one to connect to: give one")
		}
		srv, self, err := startNATS(filepath.Join(data, "nats"), c)
		if err != nil {
			return nil, err
		}
		s.srv, url = srv, srv.ClientURL()
		// This process signs in with its own token, not the workers'.
		c.Token, c.NkeySeed = self, ""
	}
	if url == "" {
		return nil, errors.New("serve: no NATS server to listen on or to connect to")
	}
	var err error
	if s.srv != nil {
		// This process reaches its own server in process: no port, no
		// TLS handshake (a tls:// URL would ask for one).
		s.nc, err = connect(strings.Replace(url, "tls://", "nats://", 1), c, append(more, nats.InProcessServer(s.srv))...)
	} else {
		s.nc, err = connect(url, c, more...)
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	s.js, err = jetstream.New(s.nc)
	if err == nil {
		// A cluster that has just started may still be electing its
		// JetStream leader: try again for a while.
		deadline := time.Now().Add(2 * natsTimeout)
		for err = s.setup(c); err != nil && time.Now().Before(deadline); err = s.setup(c) {
			time.Sleep(500 * time.Millisecond)
		}
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("NATS JetStream at %s: the task bucket and work queue: %w (is JetStream enabled on the server, with room for %d replicas?)", url, err, max(c.Replicas, 1))
	}
	return s, nil
}

// setup finds the task bucket, the work queue, the workers' bucket, the
// signers' bucket and the object stores, making those missing with c's
// replica count. What exists is never changed here: a worker's setup must
// not alter the service's replication (the API of remote workers makes
// the key-value buckets refuse roll-ups: Protect).
func (s *jsStore) setup(c NATS) error {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	r := max(c.Replicas, 1)
	kv := func(cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
		b, err := s.js.KeyValue(ctx, cfg.Bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			cfg.Replicas = r
			b, err = s.js.CreateKeyValue(ctx, cfg)
		}
		return b, err
	}
	var err error
	if s.kv, err = kv(jetstream.KeyValueConfig{Bucket: taskBucket, Description: "vsr task records", History: 1, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	if s.stream, err = s.js.Stream(ctx, workStream); errors.Is(err, jetstream.ErrStreamNotFound) {
		s.stream, err = s.js.CreateStream(ctx, jetstream.StreamConfig{
			Name: workStream, Description: "vsr tasks waiting for a worker", Subjects: []string{workSubjects},
			Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Replicas: r,
		})
	}
	if err != nil {
		return err
	}
	if s.workers, err = kv(jetstream.KeyValueConfig{Bucket: workerBucket, Description: "vsr workers connected now", History: 1, TTL: workerTTL, Storage: jetstream.MemoryStorage}); err != nil {
		return err
	}
	if s.signers, err = kv(jetstream.KeyValueConfig{Bucket: signerBucket, Description: "the public keys of vsr APIs that sign task records", History: 1, Storage: jetstream.FileStorage}); err != nil {
		return err
	}
	obj := func(bucket, desc string) (jetstream.ObjectStore, error) {
		o, err := s.js.ObjectStore(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			o, err = s.js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: bucket, Description: desc, Storage: jetstream.FileStorage, Replicas: r})
		}
		return o, err
	}
	if s.uploads, err = obj(uploadBucket, "vsr uploads"); err != nil {
		return err
	}
	s.files, err = obj(fileBucket, "vsr results")
	return err
}

// Protect makes the streams of the task and worker buckets refuse
// messages with a Nats-Rollup header and purge requests, old buckets too:
// workers may write records there (subject permissions cannot tell their
// tasks from others'), but one such message would erase every record of
// the bucket. Nothing in vsr purges a key (Delete leaves a delete marker,
// which History 1 keeps alone). The signers' bucket and the uploads need
// no such guard: workers cannot write them.
func (s *jsStore) Protect() error {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	for _, b := range []string{taskBucket, workerBucket} {
		st, err := s.js.Stream(ctx, "KV_"+b)
		if err != nil {
			return err
		}
		cfg := st.CachedInfo().Config
		if !cfg.AllowRollup && cfg.DenyPurge {
			continue
		}
		cfg.AllowRollup, cfg.DenyPurge = false, true
		if _, err := s.js.UpdateStream(ctx, cfg); err != nil {
			return fmt.Errorf("NATS stream KV_%s: making it refuse roll-ups and purges: %w (the API needs the permission to update it)", b, err)
		}
	}
	return nil
}

// fileBucket is the object store of results ("out/ID"), and uploadBucket
// that of uploads ("in/" and the upload's unique file name, see
// uploadObject), when the machines share no filesystem. Workers may write
// results, but only read uploads: an object store allows roll-ups, with
// which one message erases every object of the bucket.
const (
	fileBucket   = "vsr_files"
	uploadBucket = "vsr_uploads"
)

// PutUpload stores the file at path as upload object.
func (s *jsStore) PutUpload(object, path string) error { return s.putFile(s.uploads, object, path) }

// PutResult stores the file at path as result object.
func (s *jsStore) PutResult(object, path string) error { return s.putFile(s.files, object, path) }

// RemoveUpload removes upload object, if it can.
func (s *jsStore) RemoveUpload(object string) { s.removeObject(s.uploads, object) }

// OpenResult opens result object.
func (s *jsStore) OpenResult(ctx context.Context, object string) (io.ReadCloser, uint64, error) {
	obj, err := s.files.Get(ctx, object)
	if err != nil {
		return nil, 0, errors.New("task result is not in the NATS object store: " + err.Error())
	}
	info, err := obj.Info()
	if err != nil {
		obj.Close()
		return nil, 0, errors.New("task result: " + err.Error())
	}
	return obj, info.Size, nil
}

// putFile stores the file at path as object name of o.
func (s *jsStore) putFile(o jetstream.ObjectStore, name, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // a large video over a slow link
	defer cancel()
	if _, err := o.Put(ctx, jetstream.ObjectMeta{Name: name}, f); err != nil {
		return fmt.Errorf("NATS object store, %s: %w", name, err)
	}
	return nil
}

// removeObject removes object name of o, if it can.
func (s *jsStore) removeObject(o jetstream.ObjectStore, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	o.Delete(ctx, name)
}

// GetUpload writes upload object to a new file name in root (refusing
// to replace one), until ctx ends or an hour has passed; a partial file
// is removed.
func (s *jsStore) GetUpload(ctx context.Context, root *os.Root, object, name string) error {
	// The hour is a timer, not ctx's deadline: the object's reader waits
	// for data until ctx's deadline when it has one (so a cancel would go
	// unseen until then), and a few seconds at a time otherwise, looking
	// at ctx between waits.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hour := time.AfterFunc(time.Hour, cancel)
	defer hour.Stop()
	obj, err := s.uploads.Get(ctx, object)
	if err != nil {
		return fmt.Errorf("NATS object store, %s: %w", object, err)
	}
	defer obj.Close()
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, obj)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(name)
		return fmt.Errorf("NATS object store, %s: %w", object, err)
	}
	return nil
}

// The work queue: a task to run is its id in a message on the subject of
// its model (workSubject), in a work-queue stream; the workers that serve
// a model take its tasks through one durable pull consumer of that
// subject with explicit acks, and a task's cancellation is a message on
// cancelSubject + id. Workers say they are there in a bucket whose
// entries expire (workerBucket).
const (
	workStream    = "VSR_WORK"
	workSubjects  = "vsr.work.>"
	cancelSubject = "vsr.cancel."
	workerBucket  = "vsr_workers"
	workerTTL     = 15 * time.Second
)

// modelToken names a model in subjects and consumer names.
func modelToken(model string) string {
	h := sha256.Sum256([]byte(model))
	return hex.EncodeToString(h[:8])
}

// workSubject is the subject of the tasks of model.
func workSubject(model string) string { return "vsr.work." + modelToken(model) }

// Enqueue hands the task id of model to the workers that serve it.
func (s *jsStore) Enqueue(id, model string) error {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	if _, err := s.js.Publish(ctx, workSubject(model), []byte(id)); err != nil {
		return fmt.Errorf("NATS work queue: %w", err)
	}
	return nil
}

// Consume returns the durable consumer of model's tasks: a task not
// acknowledged (done) or marked in progress within ackWait goes to
// another worker. The work queue's subject also reaches plain
// subscribers: a task's arrival calls arrived at once, until Close
// (which drains that subscription with the connection).
func (s *jsStore) Consume(model string, ackWait time.Duration, arrived func()) (WorkSource, error) {
	c, err := s.consumer(model, ackWait)
	if err != nil {
		return nil, err
	}
	if _, err := s.nc.Subscribe(workSubject(model), func(*nats.Msg) { arrived() }); err != nil {
		return nil, err
	}
	return &jsSource{c: c, model: model, nc: s.nc}, nil
}

// jsSource takes a model's tasks from its durable consumer.
type jsSource struct {
	c     jetstream.Consumer
	model string
	nc    *nats.Conn
}

// Next fetches one message if one waits.
func (c *jsSource) Next() (Work, error) {
	batch, err := c.c.FetchNoWait(1)
	if err != nil {
		return nil, err
	}
	var w Work
	for m := range batch.Messages() {
		w = &jsWork{m: m, model: c.model, nc: c.nc}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return w, err
	}
	return w, nil
}

// jsWork is a work queue message: its data is the task id.
type jsWork struct {
	m     jetstream.Msg
	model string
	nc    *nats.Conn
}

func (w *jsWork) ID() string    { return string(w.m.Data()) }
func (w *jsWork) Model() string { return w.model }
func (w *jsWork) Ack() error    { return w.m.Ack() }
func (w *jsWork) Nak() error    { return w.m.Nak() }
func (w *jsWork) Term() error   { return w.m.Term() }

func (w *jsWork) NakAfter(d time.Duration) error { return w.m.NakWithDelay(d) }

func (w *jsWork) InProgress() error { return w.m.InProgress() }

func (w *jsWork) Delivered() (int, error) {
	md, err := w.m.Metadata()
	if err != nil {
		return 0, err
	}
	return int(md.NumDelivered), nil
}

// Renew marks the message in progress and waits up to timeout for the
// server to answer (InProgress alone does not wait).
func (w *jsWork) Renew(timeout time.Duration) error {
	if timeout <= 0 {
		return context.DeadlineExceeded
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err := w.nc.RequestWithContext(ctx, w.m.Reply(), []byte("+WPI"))
	return err
}

// consumer returns the durable consumer of model's tasks.
func (s *jsStore) consumer(model string, ackWait time.Duration) (jetstream.Consumer, error) {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	c, err := s.js.CreateOrUpdateConsumer(ctx, workStream, jetstream.ConsumerConfig{
		Durable: "vsr-workers-" + modelToken(model), FilterSubject: workSubject(model), Description: "workers of " + model,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1,
		Replicas: s.stream.CachedInfo().Config.Replicas, // as the work queue's: it survives what the queue survives
	})
	if err != nil {
		return nil, fmt.Errorf("NATS work queue: %w", err)
	}
	return c, nil
}

// WorkerInfo is what a worker says of itself in the worker bucket.
type WorkerInfo struct {
	Name    string    `json:"name"`
	Models  []string  `json:"models"`
	Devices string    `json:"devices,omitempty"`
	Running []string  `json:"running_tasks"`
	Started time.Time `json:"start_time"`
}

// Announce records w in the worker bucket (it expires after workerTTL).
func (s *jsStore) Announce(w WorkerInfo) error {
	b, _ := json.Marshal(w)
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	_, err := s.workers.Put(ctx, w.Name, b)
	return err
}

// Leave removes the worker name from the bucket.
func (s *jsStore) Leave(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	s.workers.Delete(ctx, name)
}

// Workers lists the workers connected now.
func (s *jsStore) Workers() ([]WorkerInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	keys, err := s.workers.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	defer keys.Stop()
	var out []WorkerInfo
	for k := range keys.Keys() {
		e, err := s.workers.Get(ctx, k)
		if err != nil {
			continue // expired meanwhile
		}
		var w WorkerInfo
		if json.Unmarshal(e.Value(), &w) == nil {
			out = append(out, w)
		}
	}
	return out, nil
}

// Get returns the task id as recorded now (nil: there is none).
func (s *jsStore) Get(id string) (*Task, error) {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("NATS task bucket, task %s: %w", id, err)
	}
	var t Task
	if err := json.Unmarshal(e.Value(), &t); err != nil {
		return nil, fmt.Errorf("NATS task bucket: the record of %s is not a task (%v)", id, err)
	}
	s.mu.Lock()
	s.rev[id] = e.Revision()
	s.mu.Unlock()
	return &t, nil
}

// startNATS starts an embedded NATS server with JetStream file storage in
// dir, listening on c.Listen, and returns the token with which this
// process signs in (the API role). Every client needs a credential (see
// natsAuth); listening beyond loopback needs one given in c.
func startNATS(dir string, c NATS) (*server.Server, string, error) {
	addr := c.Listen
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	if err != nil || perr != nil || port < -1 || port > 65535 {
		return nil, "", fmt.Errorf("--nats-listen %q: want host:port (port -1: any free one)", addr)
	}
	auth := &natsAuth{api: randomToken(), certs: c.TLSCA != "", tokens: c.WorkerTokens}
	if c.Token != "" {
		auth.tokens = append(auth.tokens, c.Token)
	}
	if c.NkeySeed != "" {
		pub, err := nkeyPublic(c.NkeySeed)
		if err != nil {
			return nil, "", err
		}
		auth.nkeys = []string{pub}
	}
	given := len(auth.tokens) > 0 || len(auth.nkeys) > 0 || auth.certs
	if !given && !IsLoopback(host) {
		return nil, "", fmt.Errorf("--nats-listen %s is reachable from other machines: give it a credential with --nats-token-file, --nats-nkey-file or --nats-tls-ca (client certificates), or listen on 127.0.0.1", addr)
	}
	var tlsConfig *tls.Config
	if c.TLSCert != "" || c.TLSKey != "" || c.TLSCA != "" {
		if c.TLSCert == "" || c.TLSKey == "" {
			return nil, "", errors.New("--nats-listen with TLS needs both --nats-tls-cert and --nats-tls-key (the server's certificate and key)")
		}
		tlsConfig, err = server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.TLSCert, KeyFile: c.TLSKey, CaFile: c.TLSCA, Verify: c.TLSCA != ""})
		if err != nil {
			return nil, "", fmt.Errorf("--nats-tls-cert %s, --nats-tls-key %s, --nats-tls-ca %q: %v", c.TLSCert, c.TLSKey, c.TLSCA, err)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", fmt.Errorf("NATS storage: %w", err)
	}
	if !given {
		tok, err := localToken(filepath.Join(dir, workerTokenFile))
		if err != nil {
			return nil, "", err
		}
		auth.tokens = []string{tok}
	}
	srv, err := server.NewServer(&server.Options{
		ServerName: "vsr", Host: host, Port: port, CustomClientAuthentication: auth, AlwaysEnableNonce: true,
		TLS: tlsConfig != nil, TLSConfig: tlsConfig, TLSVerify: c.TLSCA != "", TLSTimeout: 2,
		JetStream: true, StoreDir: dir, SyncAlways: true, NoSigs: true, NoLog: true, // each task record on disk before its ack, as bbolt does
	})
	if err != nil {
		return nil, "", fmt.Errorf("embedded NATS server on %s: %w", addr, err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(natsTimeout) {
		srv.Shutdown()
		return nil, "", fmt.Errorf("embedded NATS server on %s did not start within %v (is the port in use?)", addr, natsTimeout)
	}
	return srv, auth.api, nil
}

// workerTokenFile, in the embedded server's directory, holds the token it
// makes for the workers of this machine when it listens on loopback and
// was given no credential.
const workerTokenFile = "worker.token"

// WorkerTokenFile is the file of the token that the embedded NATS server
// of a service with data directory data made for local workers (when it
// listens on loopback and was given no credential).
func WorkerTokenFile(data string) string { return filepath.Join(data, "nats", workerTokenFile) }

// localToken returns the token in file, making the file (mode 0600) with
// a new token when there is none, so that workers configured with it keep
// working across restarts.
func localToken(file string) (string, error) {
	if b, err := os.ReadFile(file); err == nil {
		if tok := strings.TrimSpace(string(b)); tok != "" {
			return tok, nil
		}
	}
	tok := randomToken()
	if err := writeSecret(file, tok+"\n"); err != nil {
		return "", fmt.Errorf("the NATS token of local workers, %s: %w", file, err)
	}
	return tok, nil
}

// randomToken returns 32 random bytes in hex.
func randomToken() string {
	var b [32]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// natsAuth signs in the clients of the embedded server: the process that
// runs it with its own token (the API role: everything), and the workers
// with one of tokens, a signature by one of nkeys, or (certs) a
// certificate the TLS CA signed (the worker role: workerPermissions).
// With certs and a token or nkey configured, a worker needs both.
type natsAuth struct {
	api           string
	tokens, nkeys []string
	certs         bool
}

// Check implements server.Authentication.
func (a *natsAuth) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o.Token != "" && subtle.ConstantTimeCompare([]byte(o.Token), []byte(a.api)) == 1 {
		c.RegisterUser(&server.User{Username: "vsr-api"})
		return true
	}
	if a.certs {
		st := c.GetTLSConnectionState()
		if st == nil || len(st.VerifiedChains) == 0 {
			return false
		}
	}
	ok := a.certs && len(a.tokens) == 0 && len(a.nkeys) == 0
	for _, t := range a.tokens {
		ok = ok || o.Token != "" && subtle.ConstantTimeCompare([]byte(o.Token), []byte(t)) == 1
	}
	if o.Nkey != "" && slices.Contains(a.nkeys, o.Nkey) {
		ok = ok || verifyNonce(o.Nkey, o.Sig, c.GetNonce())
	}
	if ok {
		c.RegisterUser(&server.User{Username: "vsr-worker", Permissions: workerPermissions(workerInbox(o.Name))})
	}
	return ok
}

// A client's inbox prefix (the subjects of the replies it gets) is
// "_INBOX.vsrw-" and 32 random hex digits, which it gives in its
// connection name, "vsr vsrw-...": a worker may subscribe to that prefix
// only, not to the replies of the API (whose prefix is "_INBOX." and a
// NUID, without a dash) or, not knowing theirs, of other workers.
const inboxTag = "vsrw-"

// inboxOptions gives a client an inbox prefix of its own (see inboxTag).
func inboxOptions() []nats.Option {
	tok := inboxTag + randomToken()[:32]
	return []nats.Option{nats.Name("vsr " + tok), nats.CustomInboxPrefix("_INBOX." + tok)}
}

// workerInbox returns the inbox prefix that a client's connection name
// claims ("": none).
func workerInbox(name string) string {
	tok, ok := strings.CutPrefix(name, "vsr ")
	hexDigits, ok2 := strings.CutPrefix(tok, inboxTag)
	if !ok || !ok2 || len(hexDigits) != 32 || strings.Trim(hexDigits, "0123456789abcdef") != "" {
		return ""
	}
	return "_INBOX." + tok
}

// verifyNonce reports whether sig (base64) is pub's signature of nonce.
func verifyNonce(pub, sig string, nonce []byte) bool {
	b, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if b, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	kp, err := nkeys.FromPublicKey(pub)
	return err == nil && kp.Verify(nonce, b) == nil
}

// workerPermissions are the subjects a worker may use: read the task
// records and write them, take work from the work queue (its consumers,
// their messages and acks), say it is there in the worker bucket, read
// uploads and store results in the object store, hear cancellations and
// arrivals, and get replies on inbox, its own prefix ("": none). It may
// not queue work, cancel tasks, write the signers' bucket or the uploads,
// or create, purge or delete streams. A worker can still write any task's
// record (subject permissions cannot tell its tasks from others'):
// workers check what they read (see checkRecord).
func workerPermissions(inbox string) *server.Permissions {
	sub := []string{workSubjects, cancelSubject + "*"}
	if inbox != "" {
		sub = append(sub, inbox+".>")
	}
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			"$JS.API.INFO",
			"$JS.API.STREAM.INFO.KV_" + taskBucket, "$JS.API.STREAM.INFO.KV_" + workerBucket, "$JS.API.STREAM.INFO.KV_" + signerBucket,
			"$JS.API.STREAM.INFO." + workStream, "$JS.API.STREAM.INFO.OBJ_" + fileBucket, "$JS.API.STREAM.INFO.OBJ_" + uploadBucket,
			"$JS.API.DIRECT.GET.KV_" + signerBucket + ".>", "$JS.API.STREAM.MSG.GET.KV_" + signerBucket,
			"$JS.API.DIRECT.GET.KV_" + taskBucket + ".>", "$JS.API.STREAM.MSG.GET.KV_" + taskBucket,
			"$KV." + taskBucket + ".*", "$KV." + workerBucket + ".*",
			"$JS.API.CONSUMER.CREATE." + workStream + ".>", "$JS.API.CONSUMER.INFO." + workStream + ".*",
			"$JS.API.CONSUMER.MSG.NEXT." + workStream + ".*", "$JS.ACK." + workStream + ".>",
			"$JS.API.DIRECT.GET.OBJ_" + fileBucket + ".>", "$JS.API.STREAM.MSG.GET.OBJ_" + fileBucket,
			"$JS.API.CONSUMER.CREATE.OBJ_" + fileBucket + ".>", "$JS.API.CONSUMER.DELETE.OBJ_" + fileBucket + ".*",
			"$JS.FC.OBJ_" + fileBucket + ".>", "$O." + fileBucket + ".C.*", "$O." + fileBucket + ".M.*",
			"$JS.API.DIRECT.GET.OBJ_" + uploadBucket + ".>", "$JS.API.STREAM.MSG.GET.OBJ_" + uploadBucket,
			"$JS.API.CONSUMER.CREATE.OBJ_" + uploadBucket + ".>", "$JS.API.CONSUMER.DELETE.OBJ_" + uploadBucket + ".*",
			"$JS.FC.OBJ_" + uploadBucket + ".>",
		}},
		Subscribe: &server.SubjectPermission{Allow: sub},
	}
}

// IsLoopback reports whether host names only this machine.
func IsLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// nkeyPublic returns the public key of the nkey seed in file.
func nkeyPublic(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--nats-nkey-file: %w", err)
	}
	kp, err := nkeys.FromSeed([]byte(strings.TrimSpace(string(b))))
	if err != nil {
		return "", fmt.Errorf("--nats-nkey-file %s: not an nkey seed (make one with nk -gen user): %v", file, err)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// Connect connects to the NATS servers c.URLs (comma-separated) with c's
// credential (a token, an nkey, a client certificate, or none) and TLS
// settings, failing at once with one line when none answers.
func Connect(c NATS) (*nats.Conn, error) { return connect(c.URLs, c) }

func connect(urls string, c NATS, more ...nats.Option) (*nats.Conn, error) {
	opts := append([]nats.Option{nats.Name("vsr"), nats.Timeout(natsTimeout / 2), nats.MaxReconnects(-1)}, more...)
	if c.Listen == "" { // the certificate files are a client's
		opts = append(opts, inboxOptions()...)
		if (c.TLSCert == "") != (c.TLSKey == "") {
			return nil, errors.New("--nats-tls-cert and --nats-tls-key go together (a client certificate and its key)")
		}
		if c.TLSCA != "" {
			opts = append(opts, nats.RootCAs(c.TLSCA))
		}
		if c.TLSCert != "" {
			opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
		}
	}
	if c.Token != "" {
		opts = append(opts, nats.Token(c.Token))
	}
	if c.NkeySeed != "" {
		o, err := nats.NkeyOptionFromSeed(c.NkeySeed)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey-file %s: %v", c.NkeySeed, err)
		}
		opts = append(opts, o)
	}
	nc, err := nats.Connect(urls, opts...)
	if err != nil {
		return nil, fmt.Errorf("NATS at %s: %v (is the server running and reachable, and are the credential and TLS settings right?)", urls, err)
	}
	return nc, nil
}

// Watch follows the task bucket until ctx ends or the watch stops,
// calling seen with each record put there (not deletions), having
// recorded its revision (seen).
func (s *jsStore) Watch(ctx context.Context, seen func(*Task)) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil || e.Operation() != jetstream.KeyValuePut {
			continue // the end of the initial values, or a deletion
		}
		var t Task
		if json.Unmarshal(e.Value(), &t) != nil || t.ID != e.Key() {
			continue
		}
		s.seen(t.ID, e.Revision())
		seen(&t)
	}
	return nil
}

// Cancel publishes on task id's cancel subject.
func (s *jsStore) Cancel(id string) error { return s.nc.Publish(cancelSubject+id, nil) }

// OnCancel subscribes to task id's cancel subject, and returns once the
// server has the subscription (a Cancel published after that reaches f).
func (s *jsStore) OnCancel(id string, f func()) (func(), error) {
	sub, err := s.nc.Subscribe(cancelSubject+id, func(*nats.Msg) { f() })
	if err != nil {
		return nil, err
	}
	if err := s.nc.FlushTimeout(natsTimeout); err != nil {
		sub.Unsubscribe()
		return nil, fmt.Errorf("NATS, cancel subject of task %s: %w", id, err)
	}
	return func() { sub.Unsubscribe() }, nil
}

// Trust puts pub in the signers' bucket.
func (s *jsStore) Trust(pub string) error {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	if _, err := s.signers.Put(ctx, pub, []byte(time.Now().UTC().Format(time.RFC3339))); err != nil {
		return fmt.Errorf("NATS signers' bucket %s: %w", signerBucket, err)
	}
	return nil
}

// Trusted looks pub up in the signers' bucket.
func (s *jsStore) Trusted(pub string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	if _, err := s.signers.Get(ctx, pub); errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	} else if err != nil {
		return false, fmt.Errorf("NATS signers' bucket %s: %w", signerBucket, err)
	}
	return true, nil
}

// Put records t: it creates the task's key, or updates it from the
// revision this store last saw.
func (s *jsStore) Put(t *Task) error {
	b, err := json.Marshal(t)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	var rev uint64
	if last, ok := s.rev[t.ID]; ok {
		rev, err = s.kv.Update(ctx, t.ID, b, last)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("task %s was changed by another writer since revision %d: not overwritten: %w", t.ID, last, errChanged)
		}
	} else {
		rev, err = s.kv.Create(ctx, t.ID, b)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("task %s exists already in the NATS task bucket: not overwritten", t.ID)
		}
	}
	if err != nil {
		return fmt.Errorf("NATS task bucket: %w", err)
	}
	s.rev[t.ID] = rev
	return nil
}

// seen records that the bucket holds revision rev of task id, when it is
// newer than the one this store knows (a watch saw another writer's).
func (s *jsStore) seen(id string, rev uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rev[id] = max(s.rev[id], rev)
}

// errChanged says a write was refused because another writer changed the
// task since this store read it.
var errChanged = errors.New("changed elsewhere")

// Load returns every task in the bucket.
func (s *jsStore) Load() ([]*Task, error) {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("NATS task bucket: %w", err)
	}
	defer keys.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Task
	for k := range keys.Keys() {
		e, err := s.kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("NATS task bucket, task %s: %w", k, err)
		}
		var t Task
		if err := json.Unmarshal(e.Value(), &t); err != nil || t.ID != k {
			return nil, fmt.Errorf("NATS task bucket %s: the record of %s is not a task (%v): delete it (nats kv del %s %s)", taskBucket, k, err, taskBucket, k)
		}
		s.rev[k] = e.Revision()
		out = append(out, &t)
	}
	return out, ctx.Err()
}

// Delete deletes task id from the bucket: a delete marker replaces its
// record (History 1). It does not purge: the bucket refuses purges (see
// Protect).
func (s *jsStore) Delete(id string) error {
	ctx, cancel := context.WithTimeout(context.Background(), natsTimeout)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.kv.Delete(ctx, id); err != nil {
		return fmt.Errorf("NATS task bucket: %w", err)
	}
	delete(s.rev, id)
	return nil
}

// Close closes the connection and stops the embedded server.
func (s *jsStore) Close() error {
	if s.nc != nil {
		s.nc.Drain()
		s.nc.Close()
	}
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv.WaitForShutdown()
	}
	return nil
}

// URL is the NATS server the store is connected to: the embedded one's
// client URL, or the external one it reached.
func (s *jsStore) URL() string {
	if s.srv != nil {
		return s.srv.ClientURL()
	}
	return s.nc.ConnectedUrl()
}

// leaseOptions are the NATS connection options of a worker: pings every
// AckWait/3, so that a connection that stopped answering is noticed (and
// redialled) within the ack wait rather than the default minutes.
func leaseOptions(c Config) []nats.Option {
	return []nats.Option{nats.PingInterval(c.AckWait / 3), nats.MaxPingsOutstanding(2)}
}
