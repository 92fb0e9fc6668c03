package monitor

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// The hand-written encoder writes what encoding/json would: the same
// object, field for field, for plain and hostile strings.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 18, 0, 0, 123456789, time.UTC)
	recs := []Record{
		{Type: TypeAccess, ID: 7, Start: t0, End: t0.Add(1500 * time.Millisecond), Duration: 1.5, Role: "server",
			Protocol: "http", Op: "GET", User: Anonymous, Path: "/store/f", Size: -1, Result: ResultOK},
		{Type: TypeTransfer, ID: 1 << 60, Start: t0, End: t0, Duration: 1e-7, Role: "cache", Server: "http://h:1", Site: "T2",
			Protocol: "root", Op: "read", Client: "[::1]:5", User: "/DC=org/CN=Ünïcödé \"q\" \\ back",
			Path: "/a\x00b\x1fc\n\r\t\u2028\u2029<>&\xff\xfe end", Size: 1 << 40, BytesRead: 1, BytesWritten: 2, Reads: 3, ReadBytes: 4,
			Readvs: 5, ReadvSegs: 6, ReadvBytes: 7, Writes: 8, WriteBytes: 9, Result: ResultError, ErrorClass: ClassIO, Status: 3007,
			Redirect: "h:1094", Chain: []string{"r1", "r\"2"}, CacheHitBytes: 10, CacheMissBytes: 11,
			Source: "https://s/x", Destination: "root://d//y", Mode: "pull"},
		{},
	}
	for i, rec := range recs {
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		got := appendJSON(nil, &rec)
		var a, b any
		if err := json.Unmarshal(got, &a); err != nil {
			t.Fatalf("record %d: %s is not JSON: %v", i, got, err)
		}
		if err := json.Unmarshal(want, &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("record %d:\n got %s\nwant %s", i, got, want)
		}
	}
}

func BenchmarkAppendJSON(b *testing.B) {
	rec := Record{Type: TypeAccess, ID: 7, Start: time.Now(), End: time.Now(), Duration: 0.001, Role: "server",
		Protocol: "http", Op: "GET", Client: "127.0.0.1:40000", User: Anonymous, Path: "/store/data/file.root", Size: 4096,
		BytesRead: 4096, Reads: 1, ReadBytes: 4096, Result: ResultOK, Status: 200}
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendJSON(buf[:0], &rec)
	}
}
