package transfer

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// The private keys of delegations, sealed in the store: with a sealing
// key (DelegationOptions.SealKey, every instance on one database has the
// same), a key is stored as sealPrefix and the base64 of a nonce and its
// AES-256-GCM sealing, bound to its delegation (id and DN: a sealed key
// moved to another row does not open). A database dump, a backup or a
// replica then holds no usable proxy. Without a sealing key keys are
// stored as PEM, as FTS3 stores them.

const sealPrefix = "wanda-sealed:v1:"

// SealKeySize is the size of a sealing key.
const SealKeySize = 32

// seal is keyPEM as stored for the delegation (id, dn).
func (d *delegations) seal(id, dn string, keyPEM []byte) ([]byte, error) {
	if d.aead == nil {
		return keyPEM, nil
	}
	nonce := make([]byte, d.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := d.aead.Seal(nonce, nonce, keyPEM, sealAAD(id, dn))
	return append([]byte(sealPrefix), base64.StdEncoding.EncodeToString(out)...), nil
}

// open is a stored key as PEM.
func (d *delegations) open(id, dn string, stored []byte) ([]byte, error) {
	if !bytes.HasPrefix(stored, []byte(sealPrefix)) {
		return stored, nil
	}
	if d.aead == nil {
		return nil, errors.New("the delegation's key is sealed, and this instance has no sealing key (--delegation-key)")
	}
	raw, err := base64.StdEncoding.DecodeString(string(stored[len(sealPrefix):]))
	n := d.aead.NonceSize()
	if err != nil || len(raw) < n {
		return nil, errors.New("the delegation's sealed key does not parse")
	}
	plain, err := d.aead.Open(nil, raw[:n], raw[n:], sealAAD(id, dn))
	if err != nil {
		return nil, errors.New("the delegation's sealed key does not open with this instance's sealing key (--delegation-key differs between instances?)")
	}
	return plain, nil
}

func sealAAD(id, dn string) []byte { return []byte(id + "\x00" + dn) }

// newAEAD is the cipher of a sealing key (nil key: none).
func newAEAD(key []byte) (cipher.AEAD, error) {
	if key == nil {
		return nil, nil
	}
	if len(key) != SealKeySize {
		return nil, fmt.Errorf("a delegation sealing key is %d bytes, not %d", SealKeySize, len(key))
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// ReadSealKey reads a sealing key file: 32 bytes, raw or as 64 hex
// digits (`openssl rand -hex 32`), readable by its owner alone.
func ReadSealKey(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("delegation key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("delegation key %s: readable by others (mode %v): chmod 600", path, fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("delegation key: %w", err)
	}
	if len(b) == SealKeySize {
		return b, nil
	}
	if k, err := hex.DecodeString(string(bytes.TrimSpace(b))); err == nil && len(k) == SealKeySize {
		return k, nil
	}
	return nil, fmt.Errorf("delegation key %s: want %d bytes, raw or as %d hex digits", path, SealKeySize, 2*SealKeySize)
}
