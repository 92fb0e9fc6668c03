package xrdpeer_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/wanda-fed/wanda/internal/xrdpeer"
)

// XRootD's own data server over a directory, as a test peer: skipped
// where XRootD is not installed.
func ExampleStart() {
	s, err := xrdpeer.Start(context.Background(), xrdpeer.Options{Dir: "/srv/data", HTTP: true})
	if errors.Is(err, xrdpeer.ErrNotInstalled) {
		fmt.Println("skipped:", err)
		return
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	fmt.Println(s.URL("/store/f.root"), s.HTTP)
}

// A cmsd redirector with two data servers holding the same files.
func ExampleStartCluster() {
	c, err := xrdpeer.StartCluster(context.Background(), xrdpeer.ClusterOptions{
		Dirs: []string{"/srv/data", "/srv/data"}, Export: "/store",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println("root://" + c.Redirector + "//store/f.root")
}
