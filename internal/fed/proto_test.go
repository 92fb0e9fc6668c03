package fed

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

func validMember() Member {
	return Member{
		Version:  Version,
		ID:       "http://127.0.0.1:1094",
		Instance: "i-1",
		Role:     RoleServer,
		URL:      "http://127.0.0.1:1094",
		Exports:  []Export{{Prefix: "/store"}, {Prefix: "/user", ReadOnly: true}},
		Labels:   map[string]string{"site": "A"},
		Priority: 2,
		Load:     Load{Active: 1, Connections: 2, FreeBytes: 3, TotalBytes: 4},
	}
}

func TestDecode(t *testing.T) {
	good, _ := json.Marshal(validMember())
	tests := []struct {
		name    string
		in      string
		wantErr string
	}{
		{"valid", string(good), ""},
		{"unknown field", `{"version":"wanda.fed/v1","id":"x","bogus":1}`, "unknown field"},
		{"trailing data", string(good) + `{}`, "trailing data"},
		{"trailing garbage", string(good) + `x`, "trailing data"},
		{"trailing space is fine", string(good) + " \n", ""},
		{"other version", `{"version":"wanda.fed/v2","id":"x"}`, `"wanda.fed/v2"`},
		{"no version", `{"id":"x"}`, `protocol version ""`},
		{"not json", `<html>`, "bad message"},
		{"empty", ``, "bad message"},
		{"wrong type", `{"version":"wanda.fed/v1","priority":"high"}`, "bad message"},
		{"too large", `{"version":"wanda.fed/v1","software":"` + strings.Repeat("a", MaxBody) + `"}`, "larger than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Member
			err := Decode(strings.NewReader(tt.in), &m)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Decode: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Decode error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestDecodeVersionChecked(t *testing.T) {
	for _, v := range []any{&Member{}, &HeartbeatReply{}, &Located{}, &AdminRequest{}, &Node{}} {
		if err := Decode(strings.NewReader(`{"version":"x"}`), v); err == nil {
			t.Errorf("%T: another version accepted", v)
		}
		if err := Decode(strings.NewReader(`{"version":"`+Version+`"}`), v); err != nil {
			t.Errorf("%T: %v", v, err)
		}
	}
	// Types without a version check decode as plain strict JSON.
	var e Error
	if err := Decode(strings.NewReader(`{"error":"boom"}`), &e); err != nil || e.Error != "boom" {
		t.Errorf("Error: %v %+v", err, e)
	}
}

func TestMemberValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Member)
		ok   bool
	}{
		{"valid", func(*Member) {}, true},
		{"https and trailing slash", func(m *Member) { m.URL = "https://h.example:8443/" }, true},
		{"root export", func(m *Member) { m.Exports = []Export{{Prefix: "/"}} }, true},
		{"no id", func(m *Member) { m.ID = "" }, false},
		{"long id", func(m *Member) { m.ID = strings.Repeat("i", 513) }, false},
		{"bad role", func(m *Member) { m.Role = "boss" }, false},
		{"no url", func(m *Member) { m.URL = "" }, false},
		{"url with path", func(m *Member) { m.URL = "http://h:1/x" }, false},
		{"url with query", func(m *Member) { m.URL = "http://h:1?a=b" }, false},
		{"url with user", func(m *Member) { m.URL = "http://u:p@h:1" }, false},
		{"url scheme", func(m *Member) { m.URL = "ftp://h:1" }, false},
		{"url relative", func(m *Member) { m.URL = "/x" }, false},
		{"root:// address", func(m *Member) { m.XRootD = "xrd.example:1094" }, true},
		{"root:// address IPv6", func(m *Member) { m.XRootD = "[::1]:1094" }, true},
		{"root:// address without port", func(m *Member) { m.XRootD = "xrd.example" }, false},
		{"root:// address as URL", func(m *Member) { m.XRootD = "root://xrd.example:1094" }, false},
		{"root:// address bad port", func(m *Member) { m.XRootD = "xrd.example:0" }, false},
		{"root:// address with comma", func(m *Member) { m.XRootD = "a:1,b:2" }, false},
		{"no exports", func(m *Member) { m.Exports = nil }, false},
		{"relative export", func(m *Member) { m.Exports = []Export{{Prefix: "store"}} }, false},
		{"dotdot export", func(m *Member) { m.Exports = []Export{{Prefix: "/store/../etc"}} }, false},
		{"control export", func(m *Member) { m.Exports = []Export{{Prefix: "/st\x01re"}} }, false},
		{"too many labels", func(m *Member) {
			m.Labels = map[string]string{}
			for i := range 65 {
				m.Labels[strings.Repeat("k", i+1)] = "v"
			}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := validMember()
			tt.edit(&m)
			if err := m.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestCleanPrefix(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/", "/"},
		{"//", "/"},
		{"/store", "/store"},
		{"/store/", "/store"},
		{"/store/mc/", "/store/mc"},
		{"store", ""},
		{"", ""},
		{"/a//b", ""},
		{"/a/./b", ""},
		{"/a/../b", ""},
		{"/a\x7f", ""},
		{"/" + strings.Repeat("a", 4096), ""},
	}
	for _, tt := range tests {
		got, err := CleanPrefix(tt.in)
		if (err != nil) != (tt.want == "") || got != tt.want {
			t.Errorf("CleanPrefix(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestCovers(t *testing.T) {
	tests := []struct {
		prefix, p string
		want      bool
	}{
		{"/", "/anything", true},
		{"/store", "/store", true},
		{"/store", "/store/x", true},
		{"/store", "/storex", false},
		{"/store", "/", false},
		{"/store/mc", "/store", false},
	}
	for _, tt := range tests {
		if got := Covers(tt.prefix, tt.p); got != tt.want {
			t.Errorf("Covers(%q, %q) = %v", tt.prefix, tt.p, got)
		}
	}
}

func TestURLHelpers(t *testing.T) {
	if got := FileURL("http://h:1/", "/store/a b/c?d#e%f"); got != "http://h:1/store/a%20b/c%3Fd%23e%25f" {
		t.Errorf("FileURL = %q", got)
	}
	if got := BaseURL("http://h:1///"); got != "http://h:1" {
		t.Errorf("BaseURL = %q", got)
	}
	if got := HostOf("http://h:1/x?y"); got != "h:1" {
		t.Errorf("HostOf = %q", got)
	}
	if got := HostOf("%zz"); got != "" {
		t.Errorf("HostOf(bad) = %q", got)
	}
	if got := (HeartbeatReply{IntervalMS: 1500}).Interval(); got != 1500*time.Millisecond {
		t.Errorf("Interval = %v", got)
	}
}

// normalizeMember maps the values JSON cannot tell apart after a round
// trip (an empty labels map is omitted) to one form.
func normalizeMember(m *Member) {
	if m != nil && len(m.Labels) == 0 {
		m.Labels = nil
	}
}

// FuzzDecodeMember feeds arbitrary bytes to the membership API's decoder
// as a heartbeat and as an admin request: it must never panic, and what it
// accepts (and Validate passes) must survive encoding and decoding again.
func FuzzDecodeMember(f *testing.F) {
	m := validMember()
	good, _ := json.Marshal(m)
	f.Add(good)
	adm, _ := json.Marshal(AdminRequest{Version: Version, Member: m.ID, Add: &m})
	f.Add(adm)
	f.Add([]byte(`{"version":"wanda.fed/v1","member":"http://h:1"}`))
	f.Add([]byte(`{"version":"wanda.fed/v1","id":"x","role":"cache","url":"http://[::1]:8/","exports":[{"prefix":"/"}],"labels":{}}`))
	f.Add([]byte(`{"version":"wanda.fed/v1","id":"x","role":"server","url":"http://h","exports":[{"prefix":"/a/../b"}]}`))
	f.Add([]byte(`{"VERSION":"wanda.fed/v1","Id":"\u0000","role":"server","url":"http://h","exports":null}`))
	f.Add([]byte(`{"version":"wanda.fed/v1"} {"version":"wanda.fed/v1"}`))
	f.Add([]byte(`{"version":"wanda.fed/v1","priority":1e400}`))
	f.Add([]byte("\xff\xfe{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Member
		if Decode(bytes.NewReader(data), &m) == nil && m.Validate() == nil {
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatalf("re-encoding %+v: %v", m, err)
			}
			var m2 Member
			if err := Decode(bytes.NewReader(b), &m2); err != nil {
				t.Fatalf("decoding re-encoded %s: %v", b, err)
			}
			if err := m2.Validate(); err != nil {
				t.Fatalf("re-decoded member invalid: %v", err)
			}
			normalizeMember(&m)
			normalizeMember(&m2)
			if !reflect.DeepEqual(m, m2) {
				t.Fatalf("round trip changed the member:\n%+v\n%+v", m, m2)
			}
		}

		var a AdminRequest
		if Decode(bytes.NewReader(data), &a) == nil && (a.Add == nil || a.Add.Validate() == nil) {
			b, err := json.Marshal(a)
			if err != nil {
				t.Fatalf("re-encoding %+v: %v", a, err)
			}
			var a2 AdminRequest
			if err := Decode(bytes.NewReader(b), &a2); err != nil {
				t.Fatalf("decoding re-encoded %s: %v", b, err)
			}
			normalizeMember(a.Add)
			normalizeMember(a2.Add)
			if !reflect.DeepEqual(a, a2) {
				t.Fatalf("round trip changed the request:\n%+v\n%+v", a, a2)
			}
		}
	})
}

// Heartbeating members are wanda servers (http(s)); a static member may
// also be an XRootD server at a root:// URL.
func TestValidateStatic(t *testing.T) {
	m := validMember()
	m.URL = "root://xrd.example:1094"
	if err := m.Validate(); err == nil {
		t.Error("a heartbeat with a root:// URL was accepted")
	}
	if err := m.ValidateStatic(); err != nil {
		t.Errorf("a static root:// member: %v", err)
	}
	m.XRootD = "xrd.example:1095"
	if err := m.ValidateStatic(); err == nil {
		t.Error("a root:// member with an xrootd address was accepted")
	}
	if got := FileURL("root://xrd.example:1094", "/store/a b"); got != "root://xrd.example:1094//store/a%20b" {
		t.Errorf("FileURL of a root:// member: %s", got)
	}
}
