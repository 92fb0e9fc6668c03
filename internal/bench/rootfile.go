package bench

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"go-hep.org/x/hep/groot"
	"go-hep.org/x/hep/groot/rbytes"
	"go-hep.org/x/hep/groot/riofs"
	"go-hep.org/x/hep/groot/rtree"
)

// Basket is one basket of a TTree branch as it lies in a ROOT file: the
// byte range a reader fetches to decode some of the branch's entries (the
// key header and the compressed payload, as ROOT's TTreeCache fetches it).
type Basket struct {
	Branch  string
	Off     int64 // where the basket's key starts (fSeekKey)
	Len     int64 // its bytes on file (fNbytes)
	First   int64 // its first entry
	Entries int64 // its entries (fNevBuf)
}

// RootBaskets lists the baskets of the named branches of a TTree in the
// ROOT file at path, in the order an event loop needs them: by first
// entry, then by the order of names. It also returns the tree's entries.
//
// groot opens the tree and checks that the branches exist; the baskets
// come from a walk of the file's records (what ROOT's TFile::Map prints:
// every record starts with a TKey, baskets are keys of class TBasket named
// after their branch and titled after their tree), because groot keeps a
// branch's basket table (fBasketSeek, fBasketBytes) unexported. A branch's
// baskets are written in entry order, so a basket's first entry is the sum
// of the fNevBuf of the branch's baskets before it.
func RootBaskets(path, tree string, names []string) ([]Basket, int64, error) {
	entries, err := rootBranches(path, tree, names)
	if err != nil {
		return nil, 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	order := map[string]int{}
	for i, n := range names {
		order[n] = i
	}
	next := map[string]int64{} // each branch's next first entry
	var out []Basket
	err = walkRecords(f, fi.Size(), func(k *riofs.Key, r *rbytes.RBuffer) error {
		if k.ClassName() != "TBasket" || k.Title() != tree {
			return nil
		}
		if _, ok := order[k.Name()]; !ok {
			return nil
		}
		// TBasket's header after its key: version, buffer size, entry
		// offset length (negative: I/O features follow), entries.
		r.ReadI16()
		r.ReadI32()
		if r.ReadI32() < 0 {
			return fmt.Errorf("basket of %s at %d: baskets with I/O features are not supported", k.Name(), k.SeekKey())
		}
		nev := int64(r.ReadI32())
		if err := r.Err(); err != nil {
			return fmt.Errorf("basket of %s at %d: %w", k.Name(), k.SeekKey(), err)
		}
		out = append(out, Basket{Branch: k.Name(), Off: k.SeekKey(), Len: int64(k.Nbytes()), First: next[k.Name()], Entries: nev})
		next[k.Name()] += nev
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	for _, n := range names {
		if next[n] != entries {
			return nil, 0, fmt.Errorf("%s: branch %s: baskets on file hold %d entries, the tree %d", path, n, next[n], entries)
		}
	}
	slices.SortStableFunc(out, func(a, b Basket) int {
		if c := cmp.Compare(a.First, b.First); c != 0 {
			return c
		}
		return cmp.Compare(order[a.Branch], order[b.Branch])
	})
	return out, entries, nil
}

// rootBranches opens the tree with groot, checks that it has the named
// top-level branches and returns its entries.
func rootBranches(path, tree string, names []string) (int64, error) {
	f, err := groot.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	obj, err := f.Get(tree)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	t, ok := obj.(rtree.Tree)
	if !ok {
		return 0, fmt.Errorf("%s: %s is a %s, not a TTree", path, tree, obj.Class())
	}
	for _, n := range names {
		if t.Branch(n) == nil {
			var have []string
			for _, b := range t.Branches() {
				have = append(have, b.Name())
			}
			return 0, fmt.Errorf("%s: tree %s has no branch %q (it has %v)", path, tree, n, have)
		}
	}
	return t.Entries(), nil
}

// walkRecords calls fn with the key of every record of a ROOT file, from
// fBEGIN to fEND, and a buffer positioned after the key (holding the
// start of the record's payload). Free gaps are skipped.
func walkRecords(f io.ReaderAt, size int64, fn func(*riofs.Key, *rbytes.RBuffer) error) error {
	hdr := make([]byte, 64)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return fmt.Errorf("reading the header: %w", err)
	}
	r := rbytes.NewRBuffer(hdr, nil, 0, nil)
	var magic [4]byte
	if _, err := io.ReadFull(r, magic[:]); err != nil || string(magic[:]) != "root" {
		return errors.New("not a ROOT file")
	}
	version := r.ReadI32()
	pos := int64(r.ReadI32())
	end := int64(r.ReadI32())
	if version >= 1000000 {
		end = r.ReadI64()
	}
	end = min(end, size)
	buf := make([]byte, 1024) // a key header (with its names) and the basket header
	for pos < end {
		n, err := f.ReadAt(buf, pos)
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("record at %d: %w", pos, err)
		}
		rb := rbytes.NewRBuffer(buf[:n], nil, 0, nil)
		var k riofs.Key
		if err := k.UnmarshalROOT(rb); err != nil {
			return fmt.Errorf("record at %d: %w", pos, err)
		}
		nb := int64(k.Nbytes())
		switch {
		case nb < 0: // a free gap of -nb bytes
			pos -= nb
			continue
		case nb == 0:
			return fmt.Errorf("record at %d: zero length", pos)
		}
		if err := fn(&k, rb); err != nil {
			return err
		}
		pos += nb
	}
	return nil
}
