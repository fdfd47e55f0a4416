package serve

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"
	bolt "go.etcd.io/bbolt"
)

// TestJetStreamStore: the JetStream task store keeps tasks across a
// restart of its embedded server, refuses a write from a revision another
// writer replaced, refuses to listen beyond loopback without a token,
// requires the token it was given, and names an unreachable server in one
// line.
func TestJetStreamStore(t *testing.T) {
	dir := t.TempDir()
	a, err := openJetStream(dir, NATS{Listen: "127.0.0.1:-1", Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	url := a.URL()
	if err := a.Put(&Task{ID: "t1", Status: Pending}); err != nil {
		t.Fatal(err)
	}
	// A second writer (a worker's store) on the same bucket.
	b, err := openJetStream(t.TempDir(), NATS{URLs: url, Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get("t1"); err != nil || got == nil {
		t.Fatalf("the second writer reads %v, %v", got, err)
	}
	if err := b.Put(&Task{ID: "t1", Status: Processing}); err != nil {
		t.Fatal(err)
	}
	if err := a.Put(&Task{ID: "t1", Status: Cancelled}); err == nil || !strings.Contains(err.Error(), "changed by another writer") {
		t.Errorf("a write from a stale revision: %v", err)
	}
	if err := a.Put(&Task{ID: "t2", Status: Pending}); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(&Task{ID: "t2", Status: Pending}); err == nil || !strings.Contains(err.Error(), "exists already") {
		t.Errorf("creating a task another writer made: %v", err)
	}
	b.Close()
	a.Close()
	// The same data directory after a restart (as after SIGKILL: the
	// server's files are all there is).
	a, err = openJetStream(dir, NATS{Listen: "127.0.0.1:-1", Token: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	ts, err := a.Load()
	if err != nil || len(ts) != 2 {
		t.Fatalf("after a restart: %d tasks, %v", len(ts), err)
	}
	for _, x := range ts {
		if x.ID == "t1" && x.Status != Processing {
			t.Errorf("t1 is %s after a restart, want the second writer's processing", x.Status)
		}
	}
	if err := a.Put(&Task{ID: "t1", Status: Completed}); err != nil {
		t.Errorf("an update after loading: %v", err)
	}
	if _, err := Connect(NATS{URLs: a.URL()}); err == nil {
		t.Error("a client without the token was let in")
	}
	a.Close()
	for _, c := range []struct {
		n    NATS
		want string
	}{
		{NATS{Listen: "0.0.0.0:-1"}, "reachable from other machines: give it a credential with --nats-token-file"},
		{NATS{Listen: "localhost"}, "want host:port"},
		{NATS{URLs: "nats://127.0.0.1:1"}, "NATS at nats://127.0.0.1:1:"},
		{NATS{Listen: "127.0.0.1:-1", URLs: "nats://127.0.0.1:1"}, "give one"},
	} {
		_, err := openJetStream(t.TempDir(), c.n)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%+v: %v, want one line with %q", c.n, err, c.want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "nats")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the server's files: %v %v", fi, err)
	}
}

// TestServiceOnJetStream runs the service's tests with the tasks on an
// embedded NATS server (newEnv's default store while it runs).
func TestServiceOnJetStream(t *testing.T) {
	onJetStream = true
	defer func() { onJetStream = false }()
	for name, f := range map[string]func(*testing.T){
		"Endpoints": TestEndpoints, "Upload": TestUpload, "Errors": TestErrors, "Token": TestToken,
		"QueueFull": TestQueueFull, "Cancel": TestCancel, "Restart": TestRestart,
		"ShutdownRequeues": TestShutdownRequeues, "Workers": TestWorkers,
		"OutputConflicts": TestOutputConflicts, "CancelStopping": TestCancelStopping, "SubmitChecks": TestSubmitChecks,
	} {
		t.Run(name, f)
	}
}

// TestJetStreamNkey: an embedded server given an nkey seed lets in the
// clients that sign with it, and no other; it may listen beyond loopback.
func TestJetStreamNkey(t *testing.T) {
	dir := t.TempDir()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	file := filepath.Join(dir, "user.nk")
	os.WriteFile(file, seed, 0o600)
	a, err := openJetStream(dir, NATS{Listen: "0.0.0.0:-1", NkeySeed: file})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if nc, err := Connect(NATS{URLs: a.URL(), NkeySeed: file}); err != nil {
		t.Errorf("a client with the seed: %v", err)
	} else {
		nc.Close()
	}
	if _, err := Connect(NATS{URLs: a.URL()}); err == nil {
		t.Error("a client without the seed was let in")
	}
	os.WriteFile(file, []byte("not a seed"), 0o600)
	if _, err := openJetStream(t.TempDir(), NATS{Listen: "127.0.0.1:-1", NkeySeed: file}); err == nil || !strings.Contains(err.Error(), "not an nkey seed") {
		t.Errorf("a bad seed: %v", err)
	}
}

// TestJetStreamTLS: an embedded server with a certificate speaks only
// TLS; with a CA it requires client certificates signed by it, which is
// credential enough to listen beyond loopback. A client that trusts the
// CA and presents its certificate keeps tasks there; one without a
// certificate, or one that does not trust the server's, is refused.
func TestJetStreamTLS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey := testCert(t, dir, "ca", nil, nil)
	testCert(t, dir, "server", ca, caKey)
	testCert(t, dir, "client", ca, caKey)
	other, otherKey := testCert(t, dir, "other-ca", nil, nil)
	testCert(t, dir, "stranger", other, otherKey)
	f := func(n string) string { return filepath.Join(dir, n) }

	srv, err := openJetStream(t.TempDir(), NATS{Listen: "0.0.0.0:-1", TLSCert: f("server.crt"), TLSKey: f("server.key"), TLSCA: f("ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	url := srv.URL()
	if !strings.HasPrefix(url, "tls://") {
		t.Errorf("URL %s", url)
	}
	url = strings.Replace(url, "0.0.0.0", "127.0.0.1", 1)
	client, err := openJetStream(t.TempDir(), NATS{URLs: url, TLSCA: f("ca.crt"), TLSCert: f("client.crt"), TLSKey: f("client.key")})
	if err != nil {
		t.Fatalf("a client with a certificate of the CA: %v", err)
	}
	task := &Task{ID: "t1", Status: Pending}
	if err := client.Put(task); err != nil {
		t.Fatal(err)
	}
	if got, err := srv.Get("t1"); err != nil || got.Status != Pending {
		t.Errorf("the server's view: %+v, %v", got, err)
	}
	client.Close()
	for name, c := range map[string]NATS{
		"no client certificate":      {URLs: url, TLSCA: f("ca.crt")},
		"another CA's certificate":   {URLs: url, TLSCA: f("ca.crt"), TLSCert: f("stranger.crt"), TLSKey: f("stranger.key")},
		"the system's roots":         {URLs: url, TLSCert: f("client.crt"), TLSKey: f("client.key")},
		"a certificate with no key":  {URLs: url, TLSCA: f("ca.crt"), TLSCert: f("client.crt")},
		"plain nats to a TLS server": {URLs: strings.Replace(url, "tls://", "nats://", 1)},
	} {
		if nc, err := Connect(c); err == nil {
			nc.Close()
			t.Errorf("%s: let in", name)
		} else {
			t.Logf("%s: %v", name, err)
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("%s: %q is not one line", name, err)
			}
		}
	}
	for want, c := range map[string]NATS{
		"give it a credential":       {Listen: "0.0.0.0:-1", TLSCert: f("server.crt"), TLSKey: f("server.key")},
		"needs both --nats-tls-cert": {Listen: "127.0.0.1:-1", TLSCA: f("ca.crt")},
		"X509":                       {Listen: "127.0.0.1:-1", TLSCert: f("server.crt"), TLSKey: f("client.key")},
		"no such file or directory":  {Listen: "127.0.0.1:-1", TLSCert: f("none.crt"), TLSKey: f("server.key")},
	} {
		if s, err := openJetStream(t.TempDir(), c); err == nil {
			s.Close()
			t.Errorf("%+v was accepted", c)
		} else if !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", c, err, want)
		}
	}
}

// testCert writes dir/name.crt and dir/name.key: a CA when parent is nil,
// else a certificate for 127.0.0.1 and localhost that parent signed, good
// for servers and clients.
func testCert(t *testing.T, dir, name string, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "vsr test " + name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	if parent == nil {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
		parent, parentKey = tmpl, key
	} else {
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(filepath.Join(dir, name+".key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// TestBoltCompacts: a task database whose tasks were mostly deleted
// (retention) shrinks when it is opened again, and keeps the others.
func TestBoltCompacts(t *testing.T) {
	dir := t.TempDir()
	st, err := openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 2000)
	err = st.db.Update(func(tx *bolt.Tx) error { // one transaction: quicker than 3,000 Puts
		b := tx.Bucket(bucketTasks)
		for i := range 3000 {
			v, _ := json.Marshal(&Task{ID: fmt.Sprint("t", i), Status: Completed, Error: pad})
			if err := b.Put([]byte(fmt.Sprint("t", i)), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = st.db.Update(func(tx *bolt.Tx) error { // retention's deletes, at once
		for i := range 2990 {
			if err := tx.Bucket(bucketTasks).Delete([]byte(fmt.Sprint("t", i))); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	path := filepath.Join(dir, "tasks.db")
	before, _ := os.Stat(path)
	if before.Size() < compactMin {
		t.Fatalf("the test's database is %d bytes, under compactMin", before.Size())
	}
	st, err = openStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	after, _ := os.Stat(path)
	if after.Size() > before.Size()/4 {
		t.Errorf("the database was %d bytes and is %d after opening it again: not compacted", before.Size(), after.Size())
	}
	ts, err := st.Load()
	if err != nil || len(ts) != 10 {
		t.Fatalf("after compacting: %d tasks (%v), want 10", len(ts), err)
	}
	if err := st.Put(&Task{ID: "new"}); err != nil {
		t.Errorf("a write after compacting: %v", err)
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Errorf("the compaction's temporary is left: %v", err)
	}
}
