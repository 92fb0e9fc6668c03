// Package demo generates the sample data the demo and the interop tests
// serve: files of several sizes with deterministic contents, a directory
// tree, and a real ROOT file with a TTree (written with go-hep's groot)
// whose branch values follow formulas a test can recompute exactly in any
// language.
package demo

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"

	"go-hep.org/x/hep/groot"
	"go-hep.org/x/hep/groot/rtree"
)

// Sizes of the generated binary files.
var Sizes = map[string]int64{
	"data/file-1k.bin":  1 << 10,
	"data/file-1m.bin":  1 << 20,
	"data/file-64m.bin": 64 << 20,
}

// RootEntries is the number of entries in the demo TTree.
const RootEntries = 50000

// RootPath is the ROOT file's path below the data directory.
const RootPath = "root/events.root"

// Event is one entry of the "events" tree. Values are exact in binary
// floating point so other languages can check them with ==:
//
//	run   = 1 + i/10000        (int32)
//	event = i                  (int64)
//	px    = i * 0.5            (float64)
//	e     = (i % 100) * 1.25   (float32)
//	nhits = i % 5              (int32)
//	hits  = [i + j for j in 0..nhits-1] (float32, variable length)
type Event struct {
	Run   int32
	Event int64
	Px    float64
	E     float32
	NHits int32
	Hits  []float32
}

// MakeEvent returns entry i.
func MakeEvent(i int64) Event {
	ev := Event{
		Run:   int32(1 + i/10000),
		Event: i,
		Px:    float64(i) * 0.5,
		E:     float32(i%100) * 1.25,
		NHits: int32(i % 5),
	}
	for j := int64(0); j < int64(ev.NHits); j++ {
		ev.Hits = append(ev.Hits, float32(i+j))
	}
	return ev
}

// Generate writes the sample tree under dir and returns the relative paths
// of the files it made.
func Generate(dir string) ([]string, error) {
	var made []string
	for name, size := range Sizes {
		if err := writeRandom(filepath.Join(dir, name), size, uint64(size)); err != nil {
			return nil, err
		}
		made = append(made, name)
	}
	text := map[string]string{
		"hello.txt":                "Hello from wanda: WAN data access for scientific data.\n",
		"tree/a/one.txt":           "one\n",
		"tree/a/b/two.txt":         "two\n",
		"tree/a/b/c/three.txt":     "three\n",
		"tree/README":              "A small directory tree for listings.\n",
		"mc/2026/run1/summary.txt": "run 1: 50000 events\n",
	}
	for name, body := range text {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return nil, err
		}
		made = append(made, name)
	}
	if err := WriteRootFile(filepath.Join(dir, RootPath), RootEntries); err != nil {
		return nil, err
	}
	return append(made, RootPath), nil
}

// writeRandom writes size deterministic pseudo-random bytes.
func writeRandom(p string, size int64, seed uint64) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		_, _ = rng.Read(buf[:n])
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	return f.Close()
}

// WriteRootFile writes a ROOT file with a TTree "events" of n entries.
func WriteRootFile(p string, n int64) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := groot.Create(p)
	if err != nil {
		return fmt.Errorf("create %s: %w", p, err)
	}
	var ev Event
	vars := []rtree.WriteVar{
		{Name: "run", Value: &ev.Run},
		{Name: "event", Value: &ev.Event},
		{Name: "px", Value: &ev.Px},
		{Name: "e", Value: &ev.E},
		{Name: "nhits", Value: &ev.NHits},
		{Name: "hits", Value: &ev.Hits, Count: "nhits"},
	}
	w, err := rtree.NewWriter(f, "events", vars, rtree.WithTitle("wanda demo events"))
	if err != nil {
		f.Close()
		return fmt.Errorf("create tree: %w", err)
	}
	for i := int64(0); i < n; i++ {
		ev = MakeEvent(i)
		if _, err := w.Write(); err != nil {
			w.Close()
			f.Close()
			return fmt.Errorf("write entry %d: %w", i, err)
		}
	}
	if err := w.Close(); err != nil {
		f.Close()
		return fmt.Errorf("close tree: %w", err)
	}
	return f.Close()
}
