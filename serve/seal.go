package serve

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Sealed task records. Workers may write the task bucket (they record
// their tasks' states there), and subject permissions cannot tell one
// task's record from another's: a worker could rewrite a queued task's
// paths, overwrite flag or upload. So the API signs, at submit, the fields
// of a task that never change afterwards (sealedFields) with an ed25519
// key of its own (signingKeyFile in its data directory, made once), and
// publishes the public key in the signers' bucket, which workers may read
// but not write. A worker runs a task only when its record carries the
// signature of a key in that bucket over these fields (checkRecord); the
// API takes these fields of a record another wrote from its own copy
// (watch), and removes only uploads its signature covers (removeUpload).

// signerBucket holds one key per trusted signer: its public key in hex.
const signerBucket = "vsr_signers"

// signingKeyFile, in the API's data directory, holds the seed of its
// signing key (hex, mode 0600).
const signingKeyFile = "task-signing.key"

// sealedFields are the fields of a task that the API signs: its id, the
// request (paths and overwrite flag included), the resolved paths, the
// upload and object-store flags, the model and its hash, the time of
// submission.
type sealedFields struct {
	ID                                 string
	Request                            Request
	Input, Output, InputRel, OutputRel string
	Upload, Files                      bool
	ModelName, ModelHash               string
	Created                            time.Time
}

// sealedBytes returns the bytes signed for t: its sealed fields in JSON,
// which a record's JSON reproduces exactly once decoded.
func sealedBytes(t *Task) []byte {
	b, _ := json.Marshal(sealedFields{t.ID, t.Request, t.Input, t.Output, t.InputRel, t.OutputRel,
		t.Upload, t.Files, t.ModelName, t.ModelHash, t.Created})
	return append([]byte("vsr task record v1\n"), b...)
}

// unseal copies the sealed fields of from into t.
func unseal(t, from *Task) {
	t.ID, t.Request, t.Input, t.Output, t.InputRel, t.OutputRel = from.ID, from.Request, from.Input, from.Output, from.InputRel, from.OutputRel
	t.Upload, t.Files, t.ModelName, t.ModelHash, t.Created = from.Upload, from.Files, from.ModelName, from.ModelHash, from.Created
	t.Signer, t.Signature = from.Signer, from.Signature
}

// openSigner gives the API of remote workers (NewRemote) its signing
// key, made once in its data directory, and records the public key in the
// signers' bucket; it also makes the buckets workers write refuse
// roll-ups (Protect).
func (s *Service) openSigner() error {
	if err := s.wq.Protect(); err != nil {
		return err
	}
	key, err := loadSigningKey(filepath.Join(s.cfg.Data, signingKeyFile))
	if err != nil {
		return err
	}
	pub := hex.EncodeToString(key.Public().(ed25519.PublicKey))
	if err := s.wq.Trust(pub); err != nil {
		return err
	}
	s.signKey, s.signer = key, pub
	return nil
}

// loadSigningKey returns the key whose seed file holds, making the file
// (mode 0600) with a new key when there is none.
func loadSigningKey(file string) (ed25519.PrivateKey, error) {
	if b, err := os.ReadFile(file); err == nil {
		seed, err := hex.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("the task signing key %s is not a hex ed25519 seed: remove it to make a new one", file)
		}
		return ed25519.NewKeyFromSeed(seed), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("the task signing key: %w", err)
	}
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed)
	if err := writeSecret(file, hex.EncodeToString(seed)+"\n"); err != nil {
		return nil, fmt.Errorf("the task signing key %s: %w", file, err)
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// seal signs t's sealed fields (an API of remote workers; else a no-op).
func (s *Service) seal(t *Task) {
	if s.signKey != nil {
		t.Signer, t.Signature = s.signer, ed25519.Sign(s.signKey, sealedBytes(t))
	}
}

// signedHere reports whether t's sealed fields carry this API's own
// signature (always, for a service without workers, which signs nothing).
func (s *Service) signedHere(t *Task) bool {
	return s.signKey == nil || t.Signer == s.signer && ed25519.Verify(s.signKey.Public().(ed25519.PublicKey), sealedBytes(t), t.Signature)
}

// verifySeal checks that t's record carries the signature of a trusted
// signer (one in the signers' bucket) over its sealed fields. It reads
// the bucket: s.mu must not be held.
func (s *Service) verifySeal(t *Task) error {
	pub, err := hex.DecodeString(t.Signer)
	if t.Signer == "" || err != nil || len(pub) != ed25519.PublicKeySize {
		return errors.New("the record carries no signature of the API (a record written by an older vsr, or not by the API): submit the task again")
	}
	if !ed25519.Verify(pub, sealedBytes(t), t.Signature) {
		return errors.New("the record's fields set at submit (paths, overwrite, upload, model) are not those the API signed: it was changed after submit")
	}
	if _, ok := s.trusted.Load(t.Signer); ok {
		return nil
	}
	if ok, err := s.wq.Trusted(t.Signer); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("the record is signed by key %.16s, which is not in the NATS signers' bucket %s", t.Signer, signerBucket)
	}
	s.trusted.Store(t.Signer, true)
	return nil
}

// writeSecret writes a secret file atomically (a temporary beside it,
// mode 0600, renamed over it): a reader finds the whole secret or none.
func writeSecret(file, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), "."+filepath.Base(file)+".vsr-*")
	if err != nil {
		return err
	}
	_, err = tmp.WriteString(content)
	if serr := tmp.Sync(); err == nil {
		err = serr
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
