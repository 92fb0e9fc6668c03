package client_test

// The engine against a real wanda server: resume, no-replace, trees in
// both directions, many files over kept-alive connections, uploads that
// lose their connection, and reads (ReadAt, ReadV) through fronts that
// answer multi-range requests badly.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/wanda-fed/wanda/internal/client"
)

// cancelAfter is a Progress that cancels the copy once `at` bytes have
// arrived: an interrupted run (Ctrl-C, a killed job).
type cancelAfter struct {
	n      atomic.Int64
	at     int64
	cancel context.CancelFunc
}

func (p *cancelAfter) Plan(int, int64)              {}
func (p *cancelAfter) Bar(string, int64) client.Bar { return p }
func (p *cancelAfter) SetTotal(int64)               {}
func (p *cancelAfter) SetCurrent(int64)             {}
func (p *cancelAfter) Done(error)                   {}
func (p *cancelAfter) Add(n int) {
	if p.n.Add(int64(n)) >= p.at {
		p.cancel()
	}
}

// interrupt starts copying src to dst and cancels it after about half the
// file. It checks what an interrupted copy leaves (a part file and its
// state, no destination) and returns the state's done ranges.
func interrupt(t *testing.T, c *client.Client, src, dst string, size int64, o client.CopyOptions) [][2]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	o.Progress = &cancelAfter{at: size / 2, cancel: cancel}
	rs, err := c.Copy(ctx, []string{src}, dst, o)
	if err == nil {
		t.Fatal("the interrupted copy succeeded")
	}
	if !errors.Is(err, context.Canceled) || len(rs) != 1 || !strings.Contains(rs[0].Error, "--continue") {
		t.Errorf("interrupted copy: %v (%+v): want context.Canceled and a hint to --continue", err, rs)
	}
	if pathExists(dst) {
		t.Fatal("an interrupted copy left the destination")
	}
	part, state := partFilesOf(dst)
	if !pathExists(part) {
		t.Fatal("an interrupted copy left no part file")
	}
	var st struct {
		Size int64      `json:"size"`
		Done [][2]int64 `json:"done"`
	}
	if err := json.Unmarshal(mustReadFile(t, state), &st); err != nil {
		t.Fatalf("state record: %v", err)
	}
	if st.Size != size {
		t.Errorf("state record size %d, want %d", st.Size, size)
	}
	return st.Done
}

// resumeCost is what a resume reads: the missing bytes, plus the tail (up
// to 64 KiB) of each of the last 16 done ranges, re-read to verify them.
func resumeCost(size int64, done [][2]int64) (resumed, served int64) {
	for i, d := range done {
		resumed += d[1]
		if i >= len(done)-16 {
			served += min(d[1], 64<<10)
		}
	}
	return resumed, size - resumed + served
}

func TestResumeInterrupted(t *testing.T) {
	data := seededBytes(6<<20+11, 20)
	size := int64(len(data))
	for _, streams := range []int{1, 4} {
		t.Run(fmt.Sprint("streams", streams), func(t *testing.T) {
			_, fr, src := originAndFront(t, "f.bin", data)
			c := newFaultClient(t)
			dst := filepath.Join(t.TempDir(), "f.bin")
			o := client.CopyOptions{Streams: streams, ChunkMin: 256 << 10, ChunkMax: 512 << 10, Checksum: "auto"}
			done := interrupt(t, c, src, dst, size, o)
			resumed, wantServed := resumeCost(size, done)
			if resumed == 0 {
				t.Fatalf("the state records no bytes done (%v) although half the file arrived", done)
			}

			// The cancelled copy's answers may still be written (and
			// counted) after Copy returned: wait for the front to finish
			// them before counting what the resume reads.
			fr.quiesce(t, c)
			fr.Served.Store(0)
			o.Continue = true
			res, err := copySingle(t, c, src, dst, o)
			if err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "resumed destination", mustReadFile(t, dst), data)
			if res.Resumed != resumed || !res.Verified {
				t.Errorf("result %+v: want %d bytes resumed, verified", res, resumed)
			}
			if got := fr.Served.Load(); got != wantServed {
				t.Errorf("the resume read %d bytes, want %d (%d missing + verification)", got, wantServed, size-resumed)
			}
			if part, state := partFilesOf(dst); pathExists(part) || pathExists(state) {
				t.Error("part file or state left after the resumed copy")
			}
		})
	}
}

func TestResumeForeignPartial(t *testing.T) {
	data := seededBytes(3<<20+7, 21)
	size := int64(len(data))
	const k = 2<<20 + 5 // bytes already there
	cases := []struct {
		name       string
		flip       int64 // offset of a wrong byte in the prefix; -1 none
		wantServed int64
		resumed    int64
		retries    int
	}{
		// The prefix's tail is verified (64 KiB), the rest fetched.
		{"prefix", -1, 64<<10 + size - k, k, 0},
		// A wrong byte in the verified tail: the file is fetched whole.
		{"wrong tail", k - 10, 64<<10 + size, 0, 0},
		// A wrong byte before it: the checksum catches it, and the whole
		// file is fetched again.
		{"wrong head", 100, 64<<10 + size - k + size, 0, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, fr, src := originAndFront(t, "f.bin", data)
			dst := filepath.Join(t.TempDir(), "f.bin")
			prefix := bytes.Clone(data[:k])
			if tc.flip >= 0 {
				prefix[tc.flip] ^= 1
			}
			if err := os.WriteFile(dst, prefix, 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := copySingle(t, newFaultClient(t), src, dst, client.CopyOptions{Continue: true, Streams: 2, Checksum: "adler32"})
			if err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "destination", mustReadFile(t, dst), data)
			if res.Resumed != tc.resumed || res.Retries != tc.retries || !res.Verified {
				t.Errorf("result %+v: want %d resumed, %d retries, verified", res, tc.resumed, tc.retries)
			}
			if got := fr.Served.Load(); got != tc.wantServed {
				t.Errorf("served %d bytes, want %d", got, tc.wantServed)
			}
		})
	}
}

func TestResumeAfterRemoteChanged(t *testing.T) {
	data := seededBytes(4<<20, 22)
	size := int64(len(data))
	o, fr, src := originAndFront(t, "f.bin", data)
	c := newFaultClient(t)
	dst := filepath.Join(t.TempDir(), "f.bin")
	opts := client.CopyOptions{Streams: 4, ChunkMin: 256 << 10, ChunkMax: 256 << 10, Checksum: "auto"}
	interrupt(t, c, src, dst, size, opts)

	// Same size, new content: only the validators tell.
	changed := seededBytes(int(size), 23)
	o.replace(t, "f.bin", changed)
	fr.quiesce(t, c) // the interrupted copy's answers are not counted
	fr.Served.Store(0)
	opts.Continue = true
	res, err := copySingle(t, c, src, dst, opts)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "destination", mustReadFile(t, dst), changed)
	if res.Resumed != 0 {
		t.Errorf("resumed %d bytes of another version of the file", res.Resumed)
	}
	if got := fr.Served.Load(); got != size {
		t.Errorf("served %d bytes, want the whole new file (%d)", got, size)
	}
}

func TestNoReplace(t *testing.T) {
	data := seededBytes(50_000, 24)
	o, fr, src := originAndFront(t, "f.bin", data)
	c := newFaultClient(t)

	t.Run("download", func(t *testing.T) {
		dir := t.TempDir()
		dst := filepath.Join(dir, "f.bin")
		if err := os.WriteFile(dst, []byte("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := copySingle(t, c, src, dst, client.CopyOptions{NoReplace: true})
		if !errors.Is(err, client.ErrExist) {
			t.Errorf("download over an existing file: %v, want ErrExist", err)
		}
		if got := mustReadFile(t, dst); string(got) != "mine" {
			t.Errorf("the existing file was changed: %q", got)
		}
		if names := dirEntries(t, dir); !slices.Equal(names, []string{"f.bin"}) {
			t.Errorf("left %v", names)
		}
	})

	t.Run("upload", func(t *testing.T) {
		local := filepath.Join(t.TempDir(), "up.bin")
		if err := os.WriteFile(local, seededBytes(3000, 25), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := copySingle(t, c, local, src, client.CopyOptions{NoReplace: true})
		if !errors.Is(err, client.ErrExist) || !strings.Contains(err.Error(), "412") {
			t.Errorf("upload over an existing file: %v, want ErrExist (412)", err)
		}
		mustEqualBytes(t, "remote file", o.read(t, "f.bin"), data)
		if n := len(fr.requests("PUT")); n != 1 {
			t.Errorf("%d PUTs, want 1 (a refusal is not retried)", n)
		}
		// A new name is fine.
		if _, err := copySingle(t, c, local, fr.URL+"/data/new.bin", client.CopyOptions{NoReplace: true}); err != nil {
			t.Errorf("upload to a new name with NoReplace: %v", err)
		}
	})
}

// writeTree makes a small tree below dir and returns its files by
// slash-separated relative path.
func writeTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{
		"a.bin":           seededBytes(10_000, 30),
		"empty":           nil,
		"sub/b.bin":       seededBytes(70_000, 31),
		"sub/deep/c.bin":  seededBytes(1, 32),
		"sub/deep/d d.tx": []byte("spaces\n"),
	}
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub", "nothing"), 0o755); err != nil {
		t.Fatal(err)
	}
	return files
}

func checkTree(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	for rel, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes differ from the %d of the source", rel, len(got), len(want))
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "sub", "nothing")); err != nil || !fi.IsDir() {
		t.Errorf("empty directory not copied: %v", err)
	}
}

func TestTreeBothWays(t *testing.T) {
	o := startOrigin(t)
	fr := startFront(t, o.URL)
	c := newFaultClient(t)
	ctx := context.Background()
	local := filepath.Join(t.TempDir(), "tree")
	files := writeTree(t, local)

	// Up: into a directory that does not exist yet ("/" says it is one).
	rs, err := c.Copy(ctx, []string{local}, fr.URL+"/data/up/", client.CopyOptions{Recursive: true, Parallel: 4, Checksum: "auto"})
	if err != nil {
		t.Fatalf("upload -r: %v (%+v)", err, rs)
	}
	if len(rs) != len(files) {
		t.Errorf("%d results, want %d", len(rs), len(files))
	}
	checkTree(t, filepath.Join(o.Dir, "up", "tree"), files)

	// Down again, next to the original.
	back := filepath.Join(t.TempDir(), "back")
	rs, err = c.Copy(ctx, []string{fr.URL + "/data/up/tree"}, back, client.CopyOptions{Recursive: true, Parallel: 4, Checksum: "auto"})
	if err != nil {
		t.Fatalf("download -r: %v (%+v)", err, rs)
	}
	checkTree(t, back, files)

	// Without -r a directory is refused, clearly.
	_, err = c.Copy(ctx, []string{fr.URL + "/data/up/tree"}, t.TempDir(), client.CopyOptions{})
	if err == nil || !strings.Contains(err.Error(), "-r") {
		t.Errorf("directory without Recursive: %v", err)
	}
}

// Many small files share kept-alive connections: the front accepts about
// as many connections as files in flight, not one per file.
func TestManySmallFilesReuseConnections(t *testing.T) {
	o := startOrigin(t)
	files := map[string][]byte{}
	for i := range 200 {
		name := fmt.Sprintf("f%03d.bin", i)
		files[name] = seededBytes(1000+i*7, uint64(100+i))
		o.put(t, "many/"+name, files[name])
	}
	fr := startFront(t, o.URL)
	c := newFaultClient(t)
	const parallel = 16
	ctx := context.Background()

	dst := filepath.Join(t.TempDir(), "many")
	rs, err := c.Copy(ctx, []string{fr.URL + "/data/many"}, dst, client.CopyOptions{Recursive: true, Parallel: parallel, Checksum: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 200 {
		t.Fatalf("%d results, want 200", len(rs))
	}
	checkTreeFlat(t, dst, files)
	down := fr.Conns.Load()
	t.Logf("download: %d connections for %d requests", down, len(fr.requests("")))
	if down > 2*parallel {
		t.Errorf("download of 200 files with Parallel %d opened %d connections", parallel, down)
	}

	c.HTTP.Client.CloseIdleConnections()
	fr.Conns.Store(0)
	rs, err = c.Copy(ctx, []string{dst}, fr.URL+"/data/again", client.CopyOptions{Recursive: true, Parallel: parallel, Checksum: "auto"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 200 {
		t.Fatalf("%d results, want 200", len(rs))
	}
	checkTreeFlat(t, filepath.Join(o.Dir, "again"), files)
	up := fr.Conns.Load()
	t.Logf("upload: %d connections", up)
	if up > 2*parallel {
		t.Errorf("upload of 200 files with Parallel %d opened %d connections", parallel, up)
	}
}

func checkTreeFlat(t *testing.T, dir string, files map[string][]byte) {
	t.Helper()
	if n := len(dirEntries(t, dir)); n != len(files) {
		t.Errorf("%s holds %d entries, want %d", dir, n, len(files))
	}
	for name, want := range files {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: wrong content (%v)", name, err)
		}
	}
}

// An upload whose connection dies mid-body is sent again; the server never
// shows the partial file.
func TestUploadRetryAfterDrop(t *testing.T) {
	o := startOrigin(t)
	fr := startFront(t, o.URL)
	data := seededBytes(3<<20+1, 40)
	local := filepath.Join(t.TempDir(), "up.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var sawPartial atomic.Bool
	fr.add(faultRule{Method: "PUT", Times: 1, Kind: faultCutUpload, At: 1 << 20},
		faultRule{Method: "PUT", Times: 1, Kind: faultPass, Hook: func(*http.Request) {
			if pathExists(filepath.Join(o.Dir, "up.bin")) {
				sawPartial.Store(true)
			}
		}})
	res, err := copySingle(t, newFaultClient(t), local, fr.URL+"/data/up.bin", client.CopyOptions{Streams: 1, Checksum: "adler32"})
	if err != nil {
		t.Fatal(err)
	}
	if sawPartial.Load() {
		t.Error("the cut upload was visible when the retry arrived")
	}
	mustEqualBytes(t, "uploaded file", o.read(t, "up.bin"), data)
	if res.Retries != 1 || res.Server != fr.Host || !res.Verified {
		t.Errorf("result %+v: want 1 retry, server %s, verified", res, fr.Host)
	}
	if n := len(fr.requests("PUT")); n != 2 {
		t.Errorf("%d PUTs, want 2", n)
	}
	// Nothing else is left in the directory (no temp file of the cut upload).
	pollUntil(t, 5*time.Second, "temp files of the cut upload left on the server", func() bool {
		return slices.Equal(dirEntries(t, o.Dir), []string{"up.bin"})
	})
}

// Random ReadAt and ReadV calls against the file, through fronts that
// answer multi-range requests in every way servers do.
func TestReadAtReadV(t *testing.T) {
	data := seededBytes(3<<20+333, 50)
	size := int64(len(data))
	for name, tc := range map[string]struct {
		k        faultKind
		fallback bool // single-range requests must fetch what the answers lacked
	}{
		"multipart": {faultPass, false},
		"whole 200": {faultMultiWhole, false}, // used when cheap, else fallback: either is right
		"first":     {faultMultiFirst, true},
		"garbage":   {faultMultiGarbage, true},
		"long part": {faultMultiLong, true},
	} {
		k := tc.k
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, fr, src := originAndFront(t, "f.bin", data)
			fr.add(faultRule{Method: "GET", Kind: k})
			c := newFaultClient(t)
			ctx := context.Background()
			f, err := c.Open(ctx, src)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if f.Size() != size {
				t.Fatalf("Size %d, want %d", f.Size(), size)
			}
			rng := rand.New(rand.NewPCG(uint64(k), 7))

			const readAts = 40
			for i := range readAts {
				n := 1 + rng.IntN(100_000)
				off := rng.Int64N(size)
				if i == 0 {
					off = size - 10 // across the end
				}
				p := make([]byte, n)
				got, err := f.ReadAt(p, off)
				want := min(int64(n), size-off)
				if int64(got) != want || (want < int64(n)) != (err != nil) {
					t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d", n, off, got, err, want)
				}
				mustEqualBytes(t, fmt.Sprintf("ReadAt at %d", off), p[:got], data[off:off+want])
			}

			for round := range 3 {
				want := make([]client.Range, 200)
				dst := make([][]byte, len(want))
				for i := range want {
					n := 1 + rng.Int64N(8000)
					want[i] = client.Range{Off: rng.Int64N(size - n), Len: n}
					dst[i] = make([]byte, n)
				}
				if round == 2 {
					want[0], dst[0] = client.Range{Off: size - 1, Len: 1}, make([]byte, 1)
				}
				if err := f.ReadV(ctx, want, dst); err != nil {
					t.Fatalf("ReadV: %v", err)
				}
				for i, r := range want {
					mustEqualBytes(t, fmt.Sprintf("ReadV range %d (%d+%d)", i, r.Off, r.Len), dst[i], data[r.Off:r.End()])
				}
			}
			var multi, single int
			for _, r := range fr.requests("GET") {
				if strings.Contains(r.Range, ",") {
					multi++
				} else {
					single++
				}
			}
			if multi == 0 {
				t.Error("ReadV sent no multi-range request")
			}
			if tc.fallback && single <= readAts {
				t.Errorf("%d single-range GETs: ReadV did not fall back to single ranges", single-readAts)
			}
			if !tc.fallback && k == faultPass && single != readAts {
				t.Errorf("%d single-range GETs from ReadV against a server that answers multi-range", single-readAts)
			}
		})
	}
}

// A large upload goes in parallel parts; a part whose connection dies is
// sent again, and the file appears whole, once.
func TestParallelUploadPartRetry(t *testing.T) {
	o := startOrigin(t)
	fr := startFront(t, o.URL)
	data := seededBytes(16<<20+5, 41) // parts of 8 MiB, 8 MiB and 5 bytes
	local := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	fr.add(faultRule{Method: "PUT", Times: 1, Kind: faultCutUpload, At: 100_000})
	res, err := copySingle(t, newFaultClient(t), local, fr.URL+"/data/big.bin", client.CopyOptions{Streams: 4, Checksum: "adler32"})
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "uploaded file", o.read(t, "big.bin"), data)
	if res.Streams != 4 || res.Retries != 1 || !res.Verified {
		t.Errorf("result %+v: want 4 streams, 1 retry, verified", res)
	}
	if n := len(fr.requests("PUT")); n != 4 {
		t.Errorf("%d PUTs, want 4 (3 parts, one sent twice)", n)
	}
	pollUntil(t, 5*time.Second, "temp files of the cut part left on the server", func() bool {
		return slices.Equal(dirEntries(t, o.Dir), []string{"big.bin"})
	})
}

// A vector read that takes longer than the stall timeout but keeps moving
// is not aborted: the timeout is on silence, not on the whole operation.
func TestReadVSlowButMovingIsNotAborted(t *testing.T) {
	data := seededBytes(4<<20, 51)
	_, fr, src := originAndFront(t, "f.bin", data)
	c := newFaultClient(t)
	f, err := c.Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]client.Range, 32)
	dst := make([][]byte, len(want))
	for i := range want {
		want[i] = client.Range{Off: int64(i) * (128 << 10), Len: 4 << 10}
		dst[i] = make([]byte, want[i].Len)
	}
	// 128 KiB of parts in 4 KiB pieces 30 ms apart: ~1 s, against a
	// 600 ms stall timeout.
	fr.add(faultRule{Method: "GET", Kind: faultSlow, Every: 30 * time.Millisecond})
	c.Policy.Stall = 600 * time.Millisecond
	start := time.Now()
	if err := f.ReadV(context.Background(), want, dst); err != nil {
		t.Fatalf("ReadV: %v", err)
	}
	if el := time.Since(start); el < c.Policy.Stall {
		t.Fatalf("the slow vector read took only %v: not longer than the stall timeout, the test proves nothing", el)
	}
	for i, r := range want {
		mustEqualBytes(t, fmt.Sprintf("range %d", i), dst[i], data[r.Off:r.End()])
	}
	if n := f.Stats.Retries.Load(); n != 0 {
		t.Errorf("%d retries of a slow but moving vector read", n)
	}
}
