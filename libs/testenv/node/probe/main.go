// Command probe is what the tests' pods on the real node run to check what a pod can reach: Go's
// own resolver and HTTP client (the static busybox of Debian 12 crashes in its resolver).
//
//	probe get URL       prints the body; exits 1 on any error or a status other than 200
//	probe retry URL     as get, asking again every half second for up to a minute (a pod that a
//	                    NetworkPolicy admits only once its enforcer has seen the pod's address)
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
		fail(fmt.Errorf("usage: probe get URL | retry URL | connect HOST:PORT | serve ADDR"))
	}
	arg := os.Args[2]
	switch os.Args[1] {
	case "get":
		body, err := get(arg)
		if err != nil {
			fail(err)
		}
		fmt.Print(body)
	case "retry":
		deadline := time.Now().Add(time.Minute)
		for {
			body, err := get(arg)
			if err == nil {
				fmt.Print(body)
				return
			}
			if time.Now().After(deadline) {
				fail(err)
			}
			time.Sleep(500 * time.Millisecond)
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

// get returns the body of url, or an error for any failure or a status other than 200.
func get(url string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "probe:", err)
	os.Exit(1)
}
