package app

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// One port, two protocols: HTTP requests reach the HTTP server with the
// connection untouched (a *net.TCPConn), a connection whose first byte is
// 0 goes to the binary handler with that byte still unread.
func TestSnifferSplitsProtocols(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	s := newSniffer(ln, 500*time.Millisecond, func(c net.Conn) {
		defer c.Close()
		b := make([]byte, 4)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Error(err)
		}
		got <- b
	})
	tcp := make(chan bool, 1)
	hs := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "http ok") }),
		ConnState: func(c net.Conn, st http.ConnState) {
			if st == http.StateNew {
				_, ok := c.(*net.TCPConn)
				tcp <- ok
			}
		},
	}
	go func() { _ = hs.Serve(s) }()
	t.Cleanup(func() { hs.Close() })

	resp, err := http.Get("http://" + ln.Addr().String() + "/x")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "http ok" {
		t.Errorf("HTTP answer %q", b)
	}
	if !<-tcp {
		t.Error("the HTTP server did not get the *net.TCPConn (no sendfile)")
	}

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte{0, 0, 0, 7}); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if b[0] != 0 || b[3] != 7 {
			t.Errorf("binary handler read %v, want the bytes sent", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("binary connection not routed")
	}

	// A client that says nothing is dropped after the timeout; the
	// listener keeps serving others.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	resp, err = http.Get("http://" + ln.Addr().String() + "/y")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := idle.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := idle.Read(make([]byte, 1)); err != io.EOF {
		t.Errorf("a silent connection: read %v, want EOF (closed by the sniffer)", err)
	}
}
