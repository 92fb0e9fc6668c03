package xrdclient_test

import (
	"context"
	"fmt"

	"github.com/wanda-fed/wanda/internal/client"
	"github.com/wanda-fed/wanda/internal/xrootd/xrdclient"
)

// A download from an XRootD site with four parallel streams, its adler32
// compared with the server's.
func Example() {
	c := client.New()
	xrdclient.Register(c)
	res, err := c.Copy(context.Background(), []string{"root://xrootd.example.org//store/data/run1.root"}, "run1.root",
		client.CopyOptions{Streams: 4, Checksum: "adler32"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(res[0].Bytes, res[0].Checksum, res[0].Verified)
}
