package mount

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/authtest"
	"github.com/wanda-fed/wanda/internal/config"
	"github.com/wanda-fed/wanda/internal/cred"
	"github.com/wanda-fed/wanda/internal/fedtest"
	"github.com/wanda-fed/wanda/internal/storage/storagetest"
	"github.com/wanda-fed/wanda/internal/testserver"
)

// readWhileKilling reads the file at p through the mount in 64 KiB
// pieces and calls kill once the first quarter is in; it returns what
// was read and the error the read ended with.
func readWhileKilling(t *testing.T, p string, size int, kill func()) ([]byte, error) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got bytes.Buffer
	buf := make([]byte, 64<<10)
	var killed atomic.Bool
	for {
		n, err := f.Read(buf)
		got.Write(buf[:n])
		if !killed.Load() && got.Len() >= size/4 {
			killed.Store(true)
			kill()
		}
		if err == io.EOF {
			return got.Bytes(), nil
		}
		if err != nil {
			return got.Bytes(), err
		}
	}
}

// A server killed mid-read: the engine fails over to the replica the
// redirector named, and the reader gets every byte.
func TestServerKilledFailover(t *testing.T) {
	requireFUSE(t)
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 2, Window: time.Second,
		Server: func(_, server int, cfg *config.Config) { cfg.Server.Federation.Priority = server }})
	const p = "/store/fo/f.bin"
	want := storagetest.RandBytes(11, 12<<20+7)
	f.Put(t, 0, 0, p, want)
	f.Put(t, 0, 1, p, want)
	_, mnt := mountT(t, f.Sites[0].Redirector.URL+"/store", func(o *Options) {
		o.BlockSize, o.Prefetch = 256<<10, 2 // little ahead: most of the file is read after the kill
	})
	got, err := readWhileKilling(t, filepath.Join(mnt, "fo", "f.bin"), len(want), func() { f.Server(0, 0).Kill() })
	if err != nil {
		t.Fatalf("read through the failover: %v", err)
	}
	if d := testserver.DiffBytes(got, want); d != "" {
		t.Fatal(d)
	}
	if f.Server(0, 1).Requests() == 0 {
		t.Error("the replica served nothing")
	}
}

// A server killed mid-read with no replica: the read fails with EIO in
// bounded time, and the mount stays up: the blocks already read are
// still there, and stat of the mount works.
func TestServerKilledNoReplica(t *testing.T) {
	requireFUSE(t)
	f := fedtest.Start(t, fedtest.Options{Sites: 1, ServersPerSite: 1})
	const p = "/store/solo/f.bin"
	want := storagetest.RandBytes(12, 12<<20+7)
	f.Put(t, 0, 0, p, want)
	_, mnt := mountT(t, f.Server(0, 0).URL+"/store", func(o *Options) {
		o.BlockSize, o.Prefetch, o.Stall = 256<<10, 2, 2*time.Second
	})
	start := time.Now()
	var killedAt time.Time
	got, err := readWhileKilling(t, filepath.Join(mnt, "solo", "f.bin"), len(want), func() {
		killedAt = time.Now()
		f.Server(0, 0).Kill()
	})
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read after the kill: %v (%d bytes), want EIO", err, len(got))
	}
	t.Logf("EIO %v after the kill (read began %v before it)", time.Since(killedAt).Round(time.Millisecond), killedAt.Sub(start).Round(time.Millisecond))
	if took := time.Since(killedAt); took > 20*time.Second {
		t.Errorf("EIO took %v", took)
	}
	if !bytes.Equal(got, want[:len(got)]) {
		t.Errorf("bytes before the failure differ")
	}
	// Still mounted and answering.
	if _, err := os.Stat(mnt); err != nil {
		t.Fatalf("stat of the mount after the failure: %v", err)
	}
	if !IsMountPoint(mnt) {
		t.Fatal("the mount went away")
	}
	fd, err := os.Open(filepath.Join(mnt, "solo", "f.bin"))
	if err == nil {
		head := make([]byte, 64<<10)
		if _, err := fd.ReadAt(head, 0); err != nil {
			t.Errorf("cached head after the failure: %v", err)
		} else if !bytes.Equal(head, want[:len(head)]) {
			t.Errorf("cached head differs")
		}
		fd.Close()
	} else if !errors.Is(err, syscall.EIO) {
		t.Errorf("open after the failure: %v, want success or EIO", err)
	}
	// The server back: reads work again without remounting.
	f.Server(0, 0).Restart()
	waitFor(t, 20*time.Second, "reads after the restart", func() bool {
		b, err := os.ReadFile(filepath.Join(mnt, "solo", "f.bin"))
		return err == nil && bytes.Equal(b, want)
	})
}

// The token file is read again when it changes: a mount refused with a
// token for another path works once the file holds a good one, without
// remounting.
func TestTokenFileReread(t *testing.T) {
	is := authtest.NewIssuer(t)
	data := t.TempDir()
	s := testserver.StartWith(t, testserver.Options{Configure: authtest.Protect(is, "/", false)},
		config.Export{Prefix: "/data", Path: data})
	// The server fetches the issuer's keys in the background; until they
	// arrive it refuses tokens ("unknown key id").
	probe := is.Token(t, "storage.read:/data", nil)
	waitFor(t, 10*time.Second, "the server to have the issuer's keys", func() bool {
		req, err := http.NewRequest(http.MethodHead, s.URL+"/data/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+probe)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode != http.StatusUnauthorized
	})
	tokFile := filepath.Join(t.TempDir(), "token")
	// Good for reading /data/other, not for writing there.
	if err := os.WriteFile(tokFile, []byte(is.Token(t, "storage.read:/data/other", nil)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src, err := cred.File(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(data, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, mnt2 := mountT(t, s.URL+"/data/other", func(o *Options) {
		o.Client.HTTP.Token, o.Client.HTTP.RenewToken = src.Token, src.Renew
		o.Client.HTTP.TrustURL(s.URL)
	})
	if err := os.WriteFile(filepath.Join(data, "other", "f"), []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt2, "f")); err != nil || string(b) != "ok" {
		t.Fatalf("read with a good token: %q, %v", b, err)
	}
	// Writing is refused (read-only scope), then allowed once the file
	// holds a token with storage.create, without remounting.
	err = os.WriteFile(filepath.Join(mnt2, "new"), []byte("n"), 0o644)
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("write with a read-only token: %v, want EACCES", err)
	}
	if err := os.WriteFile(tokFile, []byte(is.Token(t, "storage.read:/data storage.create:/data storage.modify:/data", nil)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a write with the new token", func() bool {
		return os.WriteFile(filepath.Join(mnt2, "new"), []byte("n"), 0o644) == nil
	})
	if b, err := os.ReadFile(filepath.Join(data, "other", "new")); err != nil || string(b) != "n" {
		t.Errorf("on the server: %q, %v", b, err)
	}
}

// freezer relays TCP to a server until frozen: then it accepts and reads
// but passes nothing on, as a hung server does (no reset, no answer).
type freezer struct {
	ln     net.Listener
	to     string
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startFreezer(t *testing.T, to string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fz := &freezer{ln: ln, to: to}
	t.Cleanup(func() {
		ln.Close()
		fz.mu.Lock()
		for _, c := range fz.conns {
			c.Close()
		}
		fz.mu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fz.mu.Lock()
			fz.conns = append(fz.conns, c)
			fz.mu.Unlock()
			go fz.relay(c)
		}
	}()
	return fz
}

func (fz *freezer) relay(c net.Conn) {
	if fz.frozen.Load() {
		_, _ = io.Copy(io.Discard, c)
		return
	}
	up, err := net.Dial("tcp", fz.to)
	if err != nil {
		c.Close()
		return
	}
	fz.mu.Lock()
	fz.conns = append(fz.conns, up)
	fz.mu.Unlock()
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			for fz.frozen.Load() && err == nil {
				// Hold the bytes: a hung server sends nothing more.
				time.Sleep(10 * time.Millisecond)
			}
			if n > 0 {
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				dst.Close()
				return
			}
		}
	}
	go pipe(up, c)
	pipe(c, up)
}

// A server that hangs (accepts, never answers): a read of bytes not
// cached fails with EIO once the stall timeout has passed (for each of
// the engine's tries), not before and not never; the mount stays up.
func TestServerHangsStallTimeout(t *testing.T) {
	s, data, _ := startServer(t)
	want := storagetest.RandBytes(21, 8<<20)
	if err := os.WriteFile(filepath.Join(data, "h.bin"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	fz := startFreezer(t, s.Addr)
	const stall = time.Second
	_, mnt := mountT(t, "http://"+fz.ln.Addr().String()+"/data", func(o *Options) {
		o.BlockSize, o.Prefetch, o.Stall = 256<<10, 1, stall
	})
	f, err := os.Open(filepath.Join(mnt, "h.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	head := make([]byte, 64<<10)
	if _, err := f.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	fz.frozen.Store(true)
	start := time.Now()
	_, err = f.ReadAt(make([]byte, 64<<10), 6<<20)
	took := time.Since(start)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read from a hung server: %v, want EIO", err)
	}
	t.Logf("EIO after %v (stall timeout %v)", took.Round(time.Millisecond), stall)
	if took < stall || took > 30*time.Second {
		t.Errorf("EIO after %v, want between the stall timeout %v and 30s", took, stall)
	}
	if _, err := f.ReadAt(head, 0); err != nil || !bytes.Equal(head, want[:len(head)]) {
		t.Errorf("cached head after the stall: %v", err)
	}
	if !IsMountPoint(mnt) {
		t.Error("the mount went away")
	}
}
