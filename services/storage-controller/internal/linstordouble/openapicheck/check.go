// Package openapicheck checks HTTP exchanges with LINSTOR against LINSTOR's published OpenAPI
// document (../shared/linstor/rest_v1_openapi.yaml beside the checkout, or $LINSTOR_OPENAPI):
// every request a client sends and every response the test double gives. Tests only.
package openapicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// SpecPath finds LINSTOR's OpenAPI document: $LINSTOR_OPENAPI, else shared/linstor/ in a parent
// of the working directory's parents (the checkout's sibling).
func SpecPath() (string, error) {
	if p := os.Getenv("LINSTOR_OPENAPI"); p != "" {
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		p := filepath.Join(dir, "shared", "linstor", "rest_v1_openapi.yaml")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("LINSTOR's rest_v1_openapi.yaml not found in shared/linstor/ above the working directory; set LINSTOR_OPENAPI")
}

// Checker validates exchanges and remembers every violation.
type Checker struct {
	doc    *openapi3.T
	router routers.Router

	mu         sync.Mutex
	violations []string
	exchanges  map[string]int // "METHOD /path-template STATUS" → count
}

// New loads the document. serverURL is where the API is served in the test.
func New(serverURL string) (*Checker, error) {
	path, err := SpecPath()
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %w", path, err)
	}
	if err := correct(doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	doc.Servers = openapi3.Servers{{URL: serverURL}}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("routing %s: %w", path, err)
	}
	return &Checker{doc: doc, router: router, exchanges: map[string]int{}}, nil
}

// correct makes the document say what LINSTOR's controller does where the two differ.
//
// The document's OperationFailed response (the 500 of most operations) is a single ApiCallRc,
// but the controller answers every failure with an ApiCallRc list: its REST layer serialises
// every reply through one function that writes a list (ApiCallRcRestUtils.toResponse and
// Json.apiCallRcToJson in linstor-server), and golinstor decodes a failure as a list
// (client.ApiCallError). Checked against the document as published, a faithful answer would be a
// violation, and a double that followed the document hid LINSTOR's message from its callers.
func correct(doc *openapi3.T) error {
	failed := doc.Components.Responses["OperationFailed"]
	list := doc.Components.Schemas["ApiCallRcList"]
	if failed == nil || failed.Value == nil || list == nil {
		return fmt.Errorf("no OperationFailed response or ApiCallRcList schema to correct")
	}
	// Operations refer to the one response object: changing it corrects them all.
	failed.Value.Content = openapi3.NewContentWithJSONSchemaRef(&openapi3.SchemaRef{Ref: "#/components/schemas/ApiCallRcList", Value: list.Value})
	return nil
}

// Violations returns what did not conform so far.
func (c *Checker) Violations() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.violations...)
}

// Exchanges counts the checked exchanges by operation and status.
func (c *Checker) Exchanges() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.exchanges))
	for k, v := range c.exchanges {
		out[k] = v
	}
	return out
}

func (c *Checker) violate(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// Transport wraps next so that every exchange through it is checked.
func (c *Checker) Transport(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		ctx := context.Background()
		var body []byte
		if req.Body != nil {
			b, err := io.ReadAll(req.Body)
			if err != nil {
				return nil, err
			}
			body = b
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		route, params, err := c.router.FindRoute(req)
		if err != nil {
			c.violate("%s %s: no such operation in the document: %v", req.Method, req.URL.Path, err)
			return next.RoundTrip(req)
		}
		opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
		in := &openapi3filter.RequestValidationInput{Request: req.Clone(ctx), PathParams: params, Route: route, Options: opts}
		in.Request.Body = io.NopCloser(bytes.NewReader(body))
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			c.violate("request %s %s: %v", req.Method, route.Path, err)
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		resp, err := next.RoundTrip(req)
		if err != nil {
			return resp, err
		}
		rbody, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(rbody))
		c.mu.Lock()
		c.exchanges[fmt.Sprintf("%s %s %d", req.Method, route.Path, resp.StatusCode)]++
		c.mu.Unlock()
		c.checkResponse(ctx, in, route, resp, rbody)
		return resp, nil
	})
}

// checkResponse validates a response against its operation. A failure status the operation does
// not list (the document lists few of the 404s and 500s LINSTOR gives) must carry an ApiCallRc
// list, the shape of every LINSTOR error.
func (c *Checker) checkResponse(ctx context.Context, in *openapi3filter.RequestValidationInput, route *routers.Route, resp *http.Response, body []byte) {
	responses := route.Operation.Responses
	if resp.StatusCode >= 400 && responses.Status(resp.StatusCode) == nil && responses.Default() == nil {
		var v any
		if err := json.Unmarshal(body, &v); err != nil {
			c.violate("response %s %s %d: not JSON: %v", in.Request.Method, route.Path, resp.StatusCode, err)
			return
		}
		if err := c.doc.Components.Schemas["ApiCallRcList"].Value.VisitJSON(v); err != nil {
			c.violate("response %s %s %d (not listed): not an ApiCallRcList: %v", in.Request.Method, route.Path, resp.StatusCode, err)
		}
		return
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Body: io.NopCloser(bytes.NewReader(body)), Options: in.Options,
	}
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		c.violate("response %s %s %d: %v", in.Request.Method, route.Path, resp.StatusCode, err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
