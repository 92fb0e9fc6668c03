package server

import (
	"context"
	"strings"
	"testing"

	"github.com/wanda-fed/wanda/internal/xrootd"
)

// A redirector with an ID adds it to the opaque of its redirects, after
// the chain the client brought, once.
func TestRedirectCarriesChain(t *testing.T) {
	rd := startServer(t, func(o *Options) {
		o.Namespace = nil
		o.Locate = func(context.Context, LocateRequest) ([]string, error) { return []string{"127.0.0.1:1094"}, nil }
		o.RedirectorID = "http://rdr-b:1095"
	})
	rc := dialRaw(t, rd.addr)
	rc.login()
	for _, c := range []struct{ path, want string }{
		{"/store/f", "127.0.0.1?wanda.rdr=http%3A%2F%2Frdr-b%3A1095"},
		{"/store/f?wanda.rdr=rdr-a", "127.0.0.1?wanda.rdr=rdr-a%2Chttp%3A%2F%2Frdr-b%3A1095"},
		{"/store/f?tried=x&wanda.rdr=rdr-a%2Chttp%3A%2F%2Frdr-b%3A1095", "127.0.0.1?wanda.rdr=rdr-a%2Chttp%3A%2F%2Frdr-b%3A1095"},
	} {
		st, body := rc.call(xrootd.ReqOpen, xrootd.OpenRequest{Options: xrootd.OpenRead}.Body(), []byte(c.path))
		red, err := xrootd.DecodeRedirectResponse(body)
		if st != xrootd.StatusRedirect || err != nil || red.Host != c.want || red.Port != 1094 {
			t.Errorf("open %s: %v %+v %v, want host %s", c.path, st, red, err, c.want)
		}
	}
	if got := chainOf("a=1&wanda.rdr=" + strings.Repeat("x,", 40) + "last"); len(got) != 16 || got[15] != "last" {
		t.Errorf("chain bounded to %d: %v", len(got), got)
	}
}
