// Command probe is what the tests' pods on the real node run to check what a pod can reach: Go's
// own resolver and HTTP client (the static busybox of Debian 12 crashes in its resolver).
//
//	probe get URL       prints the body; exits 1 on any error or a status other than 200
//	probe connect ADDR  opens a TCP connection to host:port; exits 1 if it cannot within 5 s
//	probe serve ADDR    answers every HTTP request with "hello from <hostname>"
package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	if len(os.Args) != 3 {
		fail(fmt.Errorf("usage: probe get URL | connect HOST:PORT | serve ADDR"))
	}
	arg := os.Args[2]
	switch os.Args[1] {
	case "get":
		c := &http.Client{Timeout: 10 * time.Second}
		resp, err := c.Get(arg)
		if err != nil {
			fail(err)
		}
		defer func() { _ = resp.Body.Close() }()
		if _, err := io.Copy(os.Stdout, resp.Body); err != nil {
			fail(err)
		}
		if resp.StatusCode != http.StatusOK {
			fail(fmt.Errorf("%s: %s", arg, resp.Status))
		}
	case "connect":
		conn, err := net.DialTimeout("tcp", arg, 5*time.Second)
		if err != nil {
			fail(err)
		}
		_ = conn.Close()
		fmt.Println("connected to", arg)
	case "serve":
		host, _ := os.Hostname()
		fail(http.ListenAndServe(arg, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = fmt.Fprintf(w, "hello from %s\n", host)
		})))
	default:
		fail(fmt.Errorf("unknown command %q", os.Args[1]))
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "probe:", err)
	os.Exit(1)
}
