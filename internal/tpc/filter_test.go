package tpc

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestFilter(t *testing.T) {
	def, err := NewFilter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	open, err := NewFilter([]string{"127.0.0.0/8", "10.1.0.0/16", "::1"}, []string{"10.1.2.0/24", "8.8.8.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    *Filter
		addr string
		ok   bool
	}{
		{def, "127.0.0.1", false},
		{def, "::1", false},
		{def, "::ffff:127.0.0.1", false}, // v4-mapped
		{def, "10.0.0.1", false},
		{def, "172.16.5.4", false},
		{def, "192.168.1.1", false},
		{def, "169.254.169.254", false}, // cloud metadata
		{def, "fe80::1", false},
		{def, "fc00::1", false},
		{def, "0.0.0.0", false},
		{def, "::", false},
		{def, "224.0.0.1", false},
		{def, "100.64.0.1", false},
		{def, "8.8.8.8", true},
		{def, "2001:4860:4860::8888", true},
		{open, "127.0.0.1", true},
		{open, "127.5.5.5", true},
		{open, "::1", true},
		{open, "10.1.9.9", true},
		{open, "10.1.2.3", false}, // deny wins
		{open, "10.2.0.1", false},
		{open, "8.8.8.8", false},
		{open, "8.8.4.4", true},
	} {
		err := tc.f.Allowed(netip.MustParseAddr(tc.addr))
		if (err == nil) != tc.ok {
			t.Errorf("%s: allowed=%v, want %v (%v)", tc.addr, err == nil, tc.ok, err)
		}
		if err != nil && !errors.Is(err, ErrNotAllowed) {
			t.Errorf("%s: %v is not ErrNotAllowed", tc.addr, err)
		}
	}
	if err := def.Control("tcp", "127.0.0.1:1094", nil); !errors.Is(err, ErrNotAllowed) || !strings.Contains(err.Error(), "--tpc-allow") {
		t.Errorf("Control: %v", err)
	}
	if err := def.CheckHost("localhost:1094"); err == nil {
		t.Error("localhost allowed by default")
	}
	if err := def.CheckHost("[::1]:1094"); err == nil {
		t.Error("[::1] allowed by default")
	}
	if err := def.CheckHost("example.org:443"); err != nil {
		t.Errorf("a name is checked when dialed, not before: %v", err)
	}
	for _, bad := range []string{"10.0.0.0/33", "not-an-address", "10.0.0.1/"} {
		if _, err := NewFilter([]string{bad}, nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMarkers(t *testing.T) {
	var b strings.Builder
	m := NewMarkers(&b)
	p := NewProgress()
	p.bytes.Store(12345)
	p.remotes = []string{"tcp:127.0.0.1:1094", "tcp:[::1]:1094"}
	m.Marker(p, time.Unix(1700000000, 0))
	m.End(p, time.Unix(1700000001, 0), "", errors.Join(ErrNotAllowed, errors.New("two\nlines")))
	marker := func(ts string) string {
		return "Perf Marker\nTimestamp: " + ts + "\nStripe Index: 0\nStripe Bytes Transferred: 12345\nTotal Stripe Count: 1\n" +
			"RemoteConnections: tcp:127.0.0.1:1094,tcp:[::1]:1094\nEnd\n"
	}
	want := marker("1700000000") + marker("1700000001") + "failure: remote not allowed: remote address not allowed two lines\n"
	if b.String() != want {
		t.Errorf("markers:\n%s\nwant:\n%s", b.String(), want)
	}
	b.Reset()
	m.End(p, time.Unix(1700000002, 0), "adler32:0a1b2c3d", nil)
	if want := marker("1700000002") + "Wanda-Checksum-Verified: adler32:0a1b2c3d\nsuccess: Created\n"; b.String() != want {
		t.Errorf("end of a verified copy:\n%s\nwant:\n%s", b.String(), want)
	}
}
