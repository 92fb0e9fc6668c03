package wan_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"time"

	"github.com/wanda-fed/wanda/internal/wan"
)

// A 40 ms, 100 Mbit/s path with a 4 MiB window in front of an echo server:
// the first request on a new connection pays the handshake too.
func Example() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()

	cfg := wan.Default()
	cfg.RTT = 40 * time.Millisecond
	cfg.Rate, _ = wan.ParseRate("100Mbit")
	cfg.Window, _ = wan.ParseSize("4MiB")
	r, addr, err := wan.Start(context.Background(), cfg, "", ln.Addr().String())
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()

	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	for i := range 2 {
		c.Write([]byte("ping"))
		io.ReadFull(c, make([]byte, 4))
		fmt.Printf("round trip %d: at least %v: %v\n", i+1, (2-time.Duration(i))*cfg.RTT, time.Since(start) >= (2-time.Duration(i))*cfg.RTT)
		start = time.Now()
	}
	// Output:
	// round trip 1: at least 80ms: true
	// round trip 2: at least 40ms: true
}
