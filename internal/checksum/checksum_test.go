package checksum

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/adler32"
	"hash/crc32"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func reference(alg string, b []byte) []byte {
	switch alg {
	case Adler32:
		return binary.BigEndian.AppendUint32(nil, adler32.Checksum(b))
	case CRC32C:
		return binary.BigEndian.AppendUint32(nil, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	case MD5:
		s := md5.Sum(b)
		return s[:]
	case SHA256:
		s := sha256.Sum256(b)
		return s[:]
	}
	panic(alg)
}

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"adler32": Adler32, "ADLER32": Adler32, "adler": Adler32, " Adler32 ": Adler32,
		"crc32c": CRC32C, "CRC32C": CRC32C,
		"md5": MD5, "MD5": MD5,
		"sha256": SHA256, "sha-256": SHA256, "SHA-256": SHA256,
		"": "", "crc32": "", "sha-512": "", "unixsum": "", "sha": "",
	} {
		if got := Canonical(in); got != want {
			t.Errorf("Canonical(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCompute(t *testing.T) {
	ctx := t.Context()
	inputs := [][]byte{nil, []byte("a"), []byte("The quick brown fox"), bytes.Repeat([]byte{0xff, 0, 7}, 1<<20)}
	for _, alg := range Names {
		for _, in := range inputs {
			got, err := Compute(ctx, alg, bytes.NewReader(in))
			if err != nil || !bytes.Equal(got, reference(alg, in)) {
				t.Errorf("Compute(%s, %d bytes) = %x, %v; want %x", alg, len(in), got, err, reference(alg, in))
			}
			// A reader returning data together with io.EOF, one byte at a time.
			got, err = Compute(ctx, alg, iotest.DataErrReader(iotest.OneByteReader(bytes.NewReader(in[:min(len(in), 100)]))))
			if want := reference(alg, in[:min(len(in), 100)]); err != nil || !bytes.Equal(got, want) {
				t.Errorf("Compute(%s) through a DataErrReader = %x, %v", alg, got, err)
			}
		}
	}
	if sum, _ := Compute(ctx, Adler32, strings.NewReader("")); Hex(sum) != "00000001" {
		t.Errorf("adler32 of nothing = %s", Hex(sum))
	}
	if _, err := Compute(ctx, "sha1", strings.NewReader("x")); err == nil {
		t.Error("Compute(sha1) succeeded")
	}
	if _, err := New("nope"); err == nil {
		t.Error("New(nope) succeeded")
	}
	boom := errors.New("boom")
	if _, err := Compute(ctx, MD5, iotest.ErrReader(boom)); !errors.Is(err, boom) {
		t.Errorf("read error: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Compute(cctx, MD5, strings.NewReader("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}

func TestMulti(t *testing.T) {
	m := NewMulti([]string{"ADLER32", "md5", "adler", "bogus", "sha-256"})
	data := bytes.Repeat([]byte("multi"), 5000)
	// Written in pieces, as an upload streams in.
	if _, err := io.Copy(m, iotest.HalfReader(bytes.NewReader(data))); err != nil {
		t.Fatal(err)
	}
	sums := m.Sums()
	if len(sums) != 3 {
		t.Errorf("Sums has %d entries: %x", len(sums), sums)
	}
	for _, alg := range []string{Adler32, MD5, SHA256} {
		if !bytes.Equal(sums[alg], reference(alg, data)) {
			t.Errorf("Sums[%s] = %x, want %x", alg, sums[alg], reference(alg, data))
		}
	}
	if got := NewMulti(nil).Sums(); len(got) != 0 {
		t.Errorf("empty Multi sums %v", got)
	}
}

func TestHexUint32(t *testing.T) {
	if got := Hex([]byte{0, 0, 0x0a, 0xff}); got != "00000aff" {
		t.Errorf("Hex = %q", got)
	}
	if got := Uint32([]byte{0, 0, 1, 2}); got != 258 {
		t.Errorf("Uint32 = %d", got)
	}
	if got := Uint32([]byte{1, 2, 3}); got != 0 {
		t.Errorf("Uint32 of 3 bytes = %d", got)
	}
}
