package xrdclient

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/wanda-fed/wanda/internal/client"
)

// BenchmarkCopy downloads a 256 MiB file over loopback with the engine
// (1 and 4 streams) from XRootD's server and from wanda's.
func BenchmarkCopy(b *testing.B) {
	const size = 256 << 20
	data := randomBytes(size, 21)
	for _, name := range []string{"xrootd", "wanda"} {
		b.Run(name, func(b *testing.B) {
			p := startPeer(b, name)
			p.writeFile(b, "/data/big", data)
			for _, streams := range []int{1, 4} {
				b.Run(fmt.Sprintf("streams=%d", streams), func(b *testing.B) {
					c := client.New()
					tr := Register(c)
					defer tr.CloseIdle()
					dst := filepath.Join(b.TempDir(), "big")
					b.SetBytes(size)
					b.ReportAllocs()
					for b.Loop() {
						if _, err := c.Copy(context.Background(), []string{p.URL("/data/big")}, dst, client.CopyOptions{Streams: streams}); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// BenchmarkReadV reads 1024 segments of 4 KiB per operation.
func BenchmarkReadV(b *testing.B) {
	data := randomBytes(64<<20, 22)
	for _, name := range []string{"xrootd", "wanda"} {
		b.Run(name, func(b *testing.B) {
			p := startPeer(b, name)
			p.writeFile(b, "/data/v", data)
			tr := New(Options{})
			defer tr.CloseIdle()
			u, _ := url.Parse(p.URL("/data/v"))
			want := make([]client.Range, 1024)
			dst := make([][]byte, 1024)
			for i := range want {
				want[i] = client.Range{Off: int64(i) * 60000, Len: 4096}
				dst[i] = make([]byte, 4096)
			}
			b.SetBytes(1024 * 4096)
			for b.Loop() {
				if err := tr.ReadV(context.Background(), u, want, dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
