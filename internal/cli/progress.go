package cli

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/wanda-fed/wanda/internal/client"
)

// barSet draws one bar per file in flight (removed when the file is
// done, so a copy of thousands of files stays readable) and a total bar.
type barSet struct {
	p     *mpb.Progress
	mu    sync.Mutex
	total *mpb.Bar
	files atomic.Int64
	cur   atomic.Int64
	nfile int
	// planned is the total's size: Plan's, grown by the files whose
	// size came later.
	planned int64
}

func newBarSet(w io.Writer) *barSet {
	return &barSet{p: mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithAutoRefresh())}
}

// Plan creates the total bar.
func (b *barSet) Plan(files int, bytes int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nfile = files
	b.planned = bytes
	b.total = b.p.New(bytes, mpb.BarStyle(),
		mpb.BarPriority(1<<30), // always last
		mpb.PrependDecorators(
			decor.Any(func(decor.Statistics) string {
				return "total " + itoa(b.files.Load()) + "/" + itoa(int64(files)) + " files"
			}, decor.WCSyncSpaceR),
			decor.Counters(decor.SizeB1024(0), "% .1f / % .1f", decor.WCSyncSpace),
		),
		mpb.AppendDecorators(
			decor.AverageSpeed(decor.SizeB1000(0), "% .1f", decor.WCSyncSpace),
			decor.AverageETA(decor.ET_STYLE_GO, decor.WCSyncSpace),
		),
	)
}

// Bar starts one file's bar.
func (b *barSet) Bar(name string, size int64) client.Bar {
	bar := b.p.New(max(size, 0), mpb.BarStyle(),
		mpb.BarRemoveOnComplete(),
		mpb.PrependDecorators(
			decor.Name(trimName(name, 28), decor.WCSyncSpaceR),
			decor.Counters(decor.SizeB1024(0), "% .1f / % .1f", decor.WCSyncSpace),
		),
		mpb.AppendDecorators(
			decor.AverageSpeed(decor.SizeB1000(0), "% .1f", decor.WCSyncSpace),
			decor.Percentage(decor.WCSyncSpace),
		),
	)
	return &fileBar{set: b, bar: bar, unknown: size < 0}
}

func (b *barSet) wait() {
	b.mu.Lock()
	if b.total != nil {
		b.total.SetTotal(-1, true)
	}
	b.mu.Unlock()
	b.p.Wait()
}

type fileBar struct {
	set     *barSet
	bar     *mpb.Bar
	cur     atomic.Int64
	unknown bool // the size came after Plan: the total grows by it
}

func (f *fileBar) SetTotal(n int64) {
	f.bar.SetTotal(n, false)
	if f.unknown {
		f.unknown = false
		f.set.growTotal(n)
	}
}

func (f *fileBar) SetCurrent(n int64) {
	old := f.cur.Swap(n)
	f.bar.SetCurrent(n)
	f.set.addTotal(n - old)
}

func (f *fileBar) Add(n int) {
	f.cur.Add(int64(n))
	f.bar.IncrBy(n)
	f.set.addTotal(int64(n))
}

func (f *fileBar) Done(err error) {
	f.set.files.Add(1)
	if err != nil {
		f.bar.Abort(true)
		return
	}
	f.bar.SetTotal(-1, true)
}

// growTotal adds the size of a file that was not known at Plan.
func (b *barSet) growTotal(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.planned += n
	if b.total != nil {
		b.total.SetTotal(b.planned, false)
	}
}

func (b *barSet) addTotal(n int64) {
	b.mu.Lock()
	t := b.total
	b.mu.Unlock()
	v := b.cur.Add(n)
	if t != nil {
		t.SetCurrent(v)
	}
}

func trimName(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return "…" + string(r[len(r)-n+1:])
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
