package apiserver

import (
	"net/http"
)

// currentOpenAPI serves handler3's group-version documents without redirects. kube-apiserver's
// OpenAPI v3 aggregator lists each group-version with the hash of the document it last fetched
// (it refetches an aggregated server's root only once a minute, and an APIService change does not
// make it refetch unless its last fetch failed), proxies a client's request to us, and refuses a
// backend's redirect with 502 ("the backend attempted to redirect this request"). handler3
// redirects a stale hash to the current one; so for up to a minute after a kind was added or
// changed, kubectl got 502 here, fell back to OpenAPI v2, did not find the kind, then tried to list
// CRDs, which tenants may not. Here a stale hash is answered with the current document, marked
// uncacheable (it is not the document the hash names); the current hash keeps handler3's immutable
// caching.
func currentOpenAPI(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("hash") == "" {
			h.ServeHTTP(w, r)
			return
		}
		c := &redirectCatcher{w: w, header: http.Header{}}
		h.ServeHTTP(c, r)
		if !c.redirected {
			return
		}
		current := r.Clone(r.Context())
		q := current.URL.Query()
		q.Del("hash")
		current.URL.RawQuery = q.Encode()
		w.Header().Set("Cache-Control", "no-cache, private")
		h.ServeHTTP(w, current)
	})
}

// redirectCatcher passes a response through unless it is a redirect, which it swallows.
type redirectCatcher struct {
	w          http.ResponseWriter
	header     http.Header
	redirected bool
	started    bool
}

func (c *redirectCatcher) Header() http.Header { return c.header }

func (c *redirectCatcher) WriteHeader(code int) {
	if c.started || c.redirected {
		return
	}
	if code == http.StatusMovedPermanently || code == http.StatusFound {
		c.redirected = true
		return
	}
	c.started = true
	for k, v := range c.header {
		c.w.Header()[k] = v
	}
	c.w.WriteHeader(code)
}

func (c *redirectCatcher) Write(b []byte) (int, error) {
	if !c.started && !c.redirected {
		c.WriteHeader(http.StatusOK)
	}
	if c.redirected {
		return len(b), nil
	}
	return c.w.Write(b)
}
