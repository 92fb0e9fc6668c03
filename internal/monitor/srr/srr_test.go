package srr

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/monitor/srr/srrtest"
)

// df is what df(1) says of dir: its size and used bytes.
func df(t *testing.T, dir string) (size, used int64) {
	t.Helper()
	out, err := exec.Command("df", "-B1", "--output=size,used", dir).Output()
	if err != nil {
		t.Skipf("df: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	size, _ = strconv.ParseInt(f[0], 10, 64)
	used, _ = strconv.ParseInt(f[1], 10, 64)
	return size, used
}

func du(t *testing.T, dir string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-s", "-B1", dir).Output()
	if err != nil {
		t.Skipf("du: %v", err)
	}
	n, _ := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	return n
}

func TestDocument(t *testing.T) {
	store, area := t.TempDir(), t.TempDir()
	for i := range 3 {
		if err := os.WriteFile(filepath.Join(area, "f"+strconv.Itoa(i)), bytes.Repeat([]byte("x"), 10000*(i+1)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Options{Name: "site-se", ID: "site-se-1", Version: "v1.2", Shares: []Share{
		{Name: "store", Paths: []string{"/store"}, Dir: store, VOs: []string{"cms"}},
		{Name: "user", Paths: []string{"/store/user"}, Dir: area, Quota: 1 << 30, VOs: []string{"cms"}},
	}})
	s.SetEndpoints([]Endpoint{{Name: "https", URL: "https://se.example:1094", Type: "https"}, {Name: "root", URL: "root://se.example:1094", Type: "root"}})
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", WellKnown, nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("before the first refresh: %d", rec.Code)
	}
	if err := s.Refresh(); err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest("GET", WellKnown, nil))
	if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("GET: %d %v", rec.Code, rec.Header())
	}
	srrtest.Validate(t, rec.Body.Bytes())
	var d document
	if err := json.Unmarshal(rec.Body.Bytes(), &d); err != nil {
		t.Fatal(err)
	}
	ss := d.StorageService
	if ss.Name != "site-se" || ss.Implementation != "wanda" || ss.ImplementationVersion != "v1.2" || len(ss.StorageEndpoints) != 2 ||
		len(ss.StorageShares) != 2 {
		t.Fatalf("service: %+v", ss)
	}
	size, used := df(t, store)
	sh := ss.StorageShares[0]
	if sh.TotalSize != size || abs(sh.UsedSize-used) > 64<<20 {
		t.Errorf("store share: total %d used %d; df says %d %d", sh.TotalSize, sh.UsedSize, size, used)
	}
	if ss.StorageCapacity.Online.TotalSize != size {
		t.Errorf("online capacity %d; df says %d", ss.StorageCapacity.Online.TotalSize, size)
	}
	q := ss.StorageShares[1]
	if q.TotalSize != 1<<30 || q.UsedSize != du(t, area) || q.NumberOfFiles == nil || *q.NumberOfFiles != 3 {
		t.Errorf("quota share: %+v (du says %d)", q, du(t, area))
	}
	head := httptest.NewRecorder()
	s.ServeHTTP(head, httptest.NewRequest("HEAD", WellKnown, nil))
	if head.Code != 200 || head.Body.Len() != 0 {
		t.Errorf("HEAD: %d, %d bytes", head.Code, head.Body.Len())
	}
	post := httptest.NewRecorder()
	s.ServeHTTP(post, httptest.NewRequest("POST", WellKnown, nil))
	if post.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", post.Code)
	}
	// A share that cannot be measured keeps its numbers; the error says so.
	if err := os.RemoveAll(area); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(); err == nil || !strings.Contains(err.Error(), area) {
		t.Errorf("refresh with a share gone: %v", err)
	}
	var d2 document
	_ = json.Unmarshal(*s.doc.Load(), &d2)
	if len(d2.StorageService.StorageShares) != 2 || d2.StorageService.StorageShares[1].UsedSize != q.UsedSize {
		t.Errorf("after the share went: %+v", d2.StorageService.StorageShares)
	}
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
