package client

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// CopyOptions qualify Copy. The zero value copies files one at a time
// with streams chosen from their size and checksums verified when the
// server offers them ("auto" is the CLI's default; "" means none).
type CopyOptions struct {
	// Recursive copies directories and everything below.
	Recursive bool
	// Streams is the number of parallel range streams per file (0: from
	// the file's size, see autoStreams).
	Streams int
	// Parallel is the number of files in flight (0: 8).
	Parallel int
	// Checksum: "auto", "none"/"", or an algorithm the server must offer.
	Checksum string
	// Continue resumes partial destinations.
	Continue bool
	// NoReplace fails files whose destination exists.
	NoReplace bool
	// Sync makes local destinations durable (fsync of the data before the
	// rename and of the directory after, as for a database); without it a
	// destination is still atomic — complete or absent — for every failure
	// but a power loss, like curl, xrdcp and rsync.
	Sync bool
	// ChunkMin and ChunkMax bound the chunk size of a stream (defaults
	// 4 MiB and 64 MiB): an upload's parts are guided between them; a
	// download's first, speculative chunks are ChunkMin (staggered up to
	// twice that), and its balanced shares at most ChunkMax.
	ChunkMin, ChunkMax int64
	// Progress, if set, receives per-file progress.
	Progress Progress
	// TPC is how remote-to-remote copies go: auto (""), pull, push or
	// never (see copyRemote).
	TPC string
}

func (o CopyOptions) chunkBounds() (int64, int64) {
	lo, hi := o.ChunkMin, o.ChunkMax
	if lo <= 0 {
		lo = 4 << 20
	}
	if hi <= 0 {
		hi = 64 << 20
	}
	return lo, max(lo, hi)
}

// Progress receives the progress of a Copy.
type Progress interface {
	// Plan is called once the sources are expanded.
	Plan(files int, bytes int64)
	// Bar starts the bar of one file (size -1 when not yet known).
	Bar(name string, size int64) Bar
}

// Bar is one file's progress.
type Bar interface {
	SetTotal(n int64)
	SetCurrent(n int64)
	Add(n int)
	Done(err error)
}

type nopBar struct{}

func (nopBar) SetTotal(int64)   {}
func (nopBar) SetCurrent(int64) {}
func (nopBar) Add(int)          {}
func (nopBar) Done(error)       {}

// Result is what happened to one file.
type Result struct {
	Src      string  `json:"src"`
	Dst      string  `json:"dst"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	MBps     float64 `json:"mb_per_s"`
	Retries  int     `json:"retries"`
	Server   string  `json:"server,omitempty"`
	Streams  int     `json:"streams,omitempty"`
	Checksum string  `json:"checksum,omitempty"`
	Verified bool    `json:"verified"`
	Resumed  int64   `json:"resumed_bytes,omitempty"`
	// Mode is how a remote-to-remote copy went: pull, push (third-party
	// copy) or stream (through this host).
	Mode              string `json:"mode,omitempty"`
	RemoteConnections string `json:"remote_connections,omitempty"`
	Error             string `json:"error,omitempty"`
}

// endpoint is a local path or a remote URL.
type endpoint struct {
	raw   string
	u     *url.URL // nil: local
	local string
}

func (e endpoint) remote() bool { return e.u != nil }

func (e endpoint) String() string {
	if e.u != nil {
		return Redact(e.u)
	}
	return e.local
}

func (e endpoint) join(name string) endpoint {
	if e.u != nil {
		v := *e.u
		v.Path = strings.TrimSuffix(v.Path, "/") + "/" + name
		v.RawPath = ""
		return endpoint{raw: v.String(), u: &v}
	}
	return endpoint{raw: filepath.Join(e.local, name), local: filepath.Join(e.local, name)}
}

func (e endpoint) base() string {
	if e.u != nil {
		return lastSeg(e.u.Path)
	}
	return filepath.Base(strings.TrimSuffix(e.local, "/"))
}

func (c *Client) endpoint(s string) (endpoint, error) {
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil {
			return endpoint{}, fmt.Errorf("%q: %w", s, err)
		}
		if _, err := c.transport(u); err != nil {
			return endpoint{}, err
		}
		if u.Host == "" {
			return endpoint{}, fmt.Errorf("%q: URL without a host", s)
		}
		return endpoint{raw: s, u: u}, nil
	}
	if s == "" {
		return endpoint{}, errors.New("empty path")
	}
	return endpoint{raw: s, local: s}, nil
}

// job is one file to copy.
type job struct {
	src, dst endpoint
	info     *Info // remote source's description when known
	size     int64
	err      error // why this entry cannot be copied (reported as its result)
}

// known is in when it says the file's size, else nil: a listing without
// sizes is no description (the copy asks the server itself).
func known(in *Info) *Info {
	if in == nil || in.Size < 0 {
		return nil
	}
	return in
}

// CopyFile copies the file src to the file dst with none of Copy's
// questions first (whether dst is a directory, what src is), for callers
// that know both name files (the transfer service): a remote-to-remote
// copy by third-party copy then starts with the COPY itself.
func (c *Client) CopyFile(ctx context.Context, src, dst string, o CopyOptions) (Result, error) {
	se, err := c.endpoint(src)
	if err != nil {
		return Result{Src: src, Dst: dst, Error: err.Error()}, err
	}
	de, err := c.endpoint(dst)
	if err != nil {
		return Result{Src: src, Dst: dst, Error: err.Error()}, err
	}
	return c.copyOne(ctx, job{src: se, dst: de, size: -1}, o)
}

// Copy copies each source to dst: files, and with Recursive directories,
// between local paths and URLs in any direction. With several sources
// (or a directory destination) each lands in dst under its own name.
// Every file gets a Result; the error says how many failed.
func (c *Client) Copy(ctx context.Context, srcs []string, dst string, o CopyOptions) ([]Result, error) {
	if len(srcs) == 0 {
		return nil, errors.New("nothing to copy")
	}
	if o.Parallel <= 0 {
		o.Parallel = 8
	}
	if _, err := planSums(o.Checksum); err != nil {
		return nil, err
	}
	de, err := c.endpoint(dst)
	if err != nil {
		return nil, err
	}
	dstDir, dstExists, err := c.isDir(ctx, de)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(dst, "/") {
		dstDir = true
	}
	if len(srcs) > 1 && !dstDir {
		return nil, fmt.Errorf("copying %d sources: the destination %s must be a directory (end it with / to create it)", len(srcs), dst)
	}
	var jobs []job
	var dirs []endpoint
	if dstDir && !dstExists {
		dirs = append(dirs, de)
	}
	for _, s := range srcs {
		se, err := c.endpoint(s)
		if err != nil {
			return nil, err
		}
		target := de
		if dstDir {
			target = de.join(se.base())
		}
		js, ds, err := c.expand(ctx, se, target, o)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, js...)
		dirs = append(dirs, ds...)
	}
	if err := c.makeDirs(ctx, dirs, o.Parallel); err != nil {
		return nil, err
	}
	var total int64
	for _, j := range jobs {
		total += max(0, j.size)
	}
	if o.Progress != nil {
		o.Progress.Plan(len(jobs), total)
	}

	results := make([]Result, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	var refused refusal
	for range min(o.Parallel, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := refused.get(); err != nil {
					errs[i] = &notTriedError{err}
					results[i] = Result{Src: jobs[i].src.String(), Dst: jobs[i].dst.String(), Error: errs[i].Error()}
					continue
				}
				results[i], errs[i] = c.copyOne(ctx, jobs[i], o)
				refused.note(errs[i])
			}
		}()
	}
feed:
	for i := range jobs {
		if err := refused.get(); err != nil {
			// The credential was refused (401): the files left would be
			// too, one request each.
			for k := i; k < len(jobs); k++ {
				errs[k] = &notTriedError{err}
				results[k] = Result{Src: jobs[k].src.String(), Dst: jobs[k].dst.String(), Error: errs[k].Error()}
			}
			break feed
		}
		select {
		case next <- i:
		case <-ctx.Done():
			for k := i; k < len(jobs); k++ {
				errs[k] = context.Cause(ctx)
				results[k] = Result{Src: jobs[k].src.String(), Dst: jobs[k].dst.String(), Error: errs[k].Error()}
			}
			break feed
		}
	}
	close(next)
	wg.Wait()
	// The errors are wrapped, not flattened to text, so that callers can
	// tell a checksum mismatch or a missing file (errors.Is).
	failed := 0
	var first error
	for i, err := range errs {
		if err != nil {
			if failed == 0 {
				first = fmt.Errorf("%s: %w", results[i].Src, err)
			}
			failed++
		}
	}
	switch {
	case failed == 1:
		return results, first
	case failed > 1:
		return results, fmt.Errorf("%d of %d files failed; first: %w", failed, len(results), first)
	}
	return results, nil
}

// isDir reports whether e is an existing directory, and whether it exists.
func (c *Client) isDir(ctx context.Context, e endpoint) (dir, exists bool, err error) {
	if !e.remote() {
		fi, err := os.Stat(e.local)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return false, false, nil
			}
			return false, false, err
		}
		return fi.IsDir(), true, nil
	}
	in, err := c.stat(ctx, e.u, nil, true)
	if errors.Is(err, ErrNotFound) {
		return false, false, nil
	}
	if err != nil {
		return false, false, err
	}
	return in.IsDir, true, nil
}

// expand turns a source into file jobs (and the directories the copy
// needs), walking directories when Recursive.
func (c *Client) expand(ctx context.Context, src, dst endpoint, o CopyOptions) ([]job, []endpoint, error) {
	if !src.remote() {
		fi, err := os.Stat(src.local)
		if err != nil {
			return nil, nil, err
		}
		if !fi.IsDir() {
			if !fi.Mode().IsRegular() {
				return nil, nil, fmt.Errorf("%s is not a regular file (%s)", src.local, fileKind(fi.Mode()))
			}
			return []job{{src: src, dst: dst, size: fi.Size()}}, nil, nil
		}
		if !o.Recursive {
			return nil, nil, fmt.Errorf("%s is a directory (use -r)", src.local)
		}
		var jobs []job
		dirs := []endpoint{dst}
		root := src.local
		if lfi, err := os.Lstat(root); err == nil && lfi.Mode()&fs.ModeSymlink != 0 {
			// The source names a link to a directory: walk the directory
			// (WalkDir does not follow a link, even its root's).
			root = filepath.Clean(root) + string(filepath.Separator)
		}
		err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src.local, p)
			if rel == "." {
				return nil
			}
			target := dst
			for _, seg := range strings.Split(filepath.ToSlash(rel), "/") {
				target = target.join(seg)
			}
			if d.IsDir() {
				dirs = append(dirs, target)
				return nil
			}
			j := job{src: endpoint{raw: p, local: p}, dst: target}
			// A symbolic link to a file is copied as that file (as cp -r
			// -L, rsync -L): the tree's content is what the user sees.
			// Links to directories are not followed (cycles, trees
			// copied twice); they and dangling links are reported.
			fi, err := os.Stat(p)
			switch {
			case err != nil && d.Type()&fs.ModeSymlink != 0 && errors.Is(err, fs.ErrNotExist):
				j.err = fmt.Errorf("%s: a dangling symbolic link (its target does not exist): not copied", p)
			case err != nil:
				j.err = err
			case fi.IsDir():
				j.err = fmt.Errorf("%s: a symbolic link to a directory: not followed (copy its target explicitly)", p)
			case !fi.Mode().IsRegular():
				j.err = fmt.Errorf("%s is not a regular file (%s): not copied", p, fileKind(fi.Mode()))
			default:
				j.size = fi.Size()
			}
			jobs = append(jobs, j)
			return nil
		})
		return jobs, dirs, err
	}
	if !o.Recursive && !dst.remote() && !strings.HasSuffix(src.u.Path, "/") {
		// One file to a local path: nothing is asked before its first
		// data request, whose answer tells the size (see transfer); a
		// directory named without -r is found out then.
		return []job{{src: src, dst: dst, size: -1}}, nil, nil
	}
	in, err := c.stat(ctx, src.u, nil, true)
	if err != nil {
		return nil, nil, err
	}
	if !in.IsDir {
		return []job{{src: src, dst: dst, info: known(&in), size: in.Size}}, nil, nil
	}
	if !o.Recursive {
		return nil, nil, fmt.Errorf("%s is a directory (use -r)", src)
	}
	return c.walkRemote(ctx, src, dst, o.Parallel)
}

// walkRemote lists a remote tree with up to par listings in flight: a
// deep tree costs its depth in round trips, not its directory count.
func (c *Client) walkRemote(ctx context.Context, src, dst endpoint, par int) ([]job, []endpoint, error) {
	var (
		mu    sync.Mutex
		jobs  []job
		dirs  = []endpoint{dst}
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, par)
	)
	var visit func(s, d endpoint)
	visit = func(s, d endpoint) {
		defer wg.Done()
		sem <- struct{}{}
		entries, err := c.list(ctx, s.u)
		<-sem
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if first == nil {
				first = err
			}
			return
		}
		for _, e := range entries {
			if e.Name == "" || e.Name == "." || e.Name == ".." || strings.Contains(e.Name, "/") {
				continue
			}
			cs, cd := s.join(e.Name), d.join(e.Name)
			if e.IsDir {
				dirs = append(dirs, cd)
				wg.Add(1)
				go visit(cs, cd)
				continue
			}
			in := e
			in.URL = cs.u.String()
			jobs = append(jobs, job{src: cs, dst: cd, info: known(&in), size: e.Size})
		}
	}
	wg.Add(1)
	go visit(src, dst)
	wg.Wait()
	sort.Slice(jobs, func(i, j int) bool { return jobs[i].src.raw < jobs[j].src.raw })
	return jobs, dirs, first
}

// makeDirs creates destination directories, parents before children,
// each level in parallel. The shallowest level may sit below missing
// directories (cp -r dir http://h/data/x/y/ with no /data/x): its
// parents are created too.
func (c *Client) makeDirs(ctx context.Context, dirs []endpoint, par int) error {
	byDepth := map[int][]endpoint{}
	minDepth, maxDepth := -1, 0
	for _, d := range dirs {
		p := d.local
		if d.remote() {
			p = d.u.Path
		}
		n := strings.Count(strings.Trim(p, "/"), "/")
		byDepth[n] = append(byDepth[n], d)
		maxDepth = max(maxDepth, n)
		if minDepth < 0 || n < minDepth {
			minDepth = n
		}
	}
	for depth := max(minDepth, 0); depth <= maxDepth; depth++ {
		level := byDepth[depth]
		errs := make([]error, len(level))
		var wg sync.WaitGroup
		sem := make(chan struct{}, par)
		for i, d := range level {
			wg.Add(1)
			go func() {
				defer wg.Done()
				sem <- struct{}{}
				defer func() { <-sem }()
				if !d.remote() {
					errs[i] = os.MkdirAll(d.local, 0o755)
					return
				}
				if err := c.mkdirParents(ctx, d.u, depth == minDepth); err != nil && !errors.Is(err, ErrExist) {
					errs[i] = err
				}
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// mkdirParents makes u (and its parents when top is set: the tree's root
// may sit below missing directories).
func (c *Client) mkdirParents(ctx context.Context, u *url.URL, top bool) error {
	if !top {
		return c.mkdir(ctx, u)
	}
	err := c.mkdir(ctx, u)
	if err == nil || errors.Is(err, ErrExist) {
		return err
	}
	return c.Mkdir(ctx, u.String(), true)
}

// copyOne copies one file and reports how it went.
func (c *Client) copyOne(ctx context.Context, j job, o CopyOptions) (Result, error) {
	res := Result{Src: j.src.String(), Dst: j.dst.String()}
	var bar Bar = nopBar{}
	if o.Progress != nil {
		bar = o.Progress.Bar(path.Base(filepath.ToSlash(j.src.base())), j.size)
	}
	start := time.Now()
	var err error
	switch {
	case j.err != nil:
		err = j.err
	case j.src.remote() && !j.dst.remote():
		err = c.download(ctx, j.src.u, j.info, j.dst.local, o, &res, bar)
	case !j.src.remote() && j.dst.remote():
		err = c.upload(ctx, j.src.local, j.dst.u, o, &res, bar)
	case j.src.remote() && j.dst.remote():
		err = c.copyRemote(ctx, j.src.u, j.info, j.dst.u, o, &res, bar)
	default:
		err = copyLocal(ctx, j.src.local, j.dst.local, o, &res, bar)
	}
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBps = float64(res.Bytes-res.Resumed) / 1e6 / res.Seconds
	}
	if err != nil {
		res.Error = err.Error()
	}
	bar.Done(err)
	return res, err
}

// fileKind names what a non-regular file is, for an error.
func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "type " + m.Type().String()
}

// FormatBytes prints a byte count in binary units.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
