package transfer

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A sealed key opens only with its sealing key and for its delegation;
// without a sealing key keys are stored as they are, and a key stored
// so still opens once one is configured.
func TestSeal(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, SealKeySize), bytes.Repeat([]byte{2}, SealKeySize)
	mk := func(k []byte) *delegations {
		a, err := newAEAD(k)
		if err != nil {
			t.Fatal(err)
		}
		d := newDelegations(a)
		return &d
	}
	d1, d2, none := mk(k1), mk(k2), mk(nil)
	pemKey := []byte("-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n")
	sealed, err := d1.seal("id", "/CN=a", pemKey)
	if err != nil || !bytes.HasPrefix(sealed, []byte(sealPrefix)) || bytes.Contains(sealed, []byte("PRIVATE")) {
		t.Fatalf("sealed: %q %v", sealed, err)
	}
	if got, err := d1.open("id", "/CN=a", sealed); err != nil || !bytes.Equal(got, pemKey) {
		t.Fatalf("open: %q %v", got, err)
	}
	for name, f := range map[string]func() ([]byte, error){
		"another DN":          func() ([]byte, error) { return d1.open("id", "/CN=b", sealed) },
		"another id":          func() ([]byte, error) { return d1.open("id2", "/CN=a", sealed) },
		"another sealing key": func() ([]byte, error) { return d2.open("id", "/CN=a", sealed) },
		"no sealing key":      func() ([]byte, error) { return none.open("id", "/CN=a", sealed) },
		"garbage":             func() ([]byte, error) { return d1.open("id", "/CN=a", []byte(sealPrefix+"!!")) },
	} {
		if _, err := f(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
	if plain, _ := none.seal("id", "/CN=a", pemKey); !bytes.Equal(plain, pemKey) {
		t.Error("sealed without a sealing key")
	}
	if got, err := d1.open("id", "/CN=a", pemKey); err != nil || !bytes.Equal(got, pemKey) {
		t.Errorf("a key stored before sealing: %v", err)
	}
	if _, err := newAEAD([]byte("short")); err == nil {
		t.Error("a short sealing key taken")
	}
}

func TestReadSealKey(t *testing.T) {
	d := t.TempDir()
	key := bytes.Repeat([]byte{7}, SealKeySize)
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct {
		name, path, err string
	}{
		{"raw", write("raw", key, 0o600), ""},
		{"hex", write("hex", []byte(hex.EncodeToString(key)+"\n"), 0o400), ""},
		{"readable by others", write("open", key, 0o644), "chmod 600"},
		{"short", write("short", []byte("abc"), 0o600), "want 32 bytes"},
		{"missing", filepath.Join(d, "none"), "no such file"},
	} {
		got, err := ReadSealKey(c.path)
		switch {
		case c.err == "" && (err != nil || !bytes.Equal(got, key)):
			t.Errorf("%s: %x %v", c.name, got, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want %q", c.name, err, c.err)
		}
	}
}
