package linstor

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"time"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

// Options say how to reach LINSTOR.
type Options struct {
	// Endpoint is the LINSTOR controller's REST URL: http://host:3370 or https://host:3371.
	Endpoint string
	// CAFile, CertFile and KeyFile: the CA that signed the controller's certificate and the
	// client certificate LINSTOR's HTTPS API requires (as the LINSTOR operator issues them).
	CAFile, CertFile, KeyFile string
	// Timeout bounds each request.
	Timeout time.Duration
}

// BindFlags registers the flags of o.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Endpoint, "linstor-endpoint", "http://linstor-controller.piraeus-datastore.svc:3370", "URL of the LINSTOR controller's REST API.")
	fs.StringVar(&o.CAFile, "linstor-ca-file", "", "CA certificate that signed the LINSTOR controller's HTTPS certificate.")
	fs.StringVar(&o.CertFile, "linstor-client-cert-file", "", "Client certificate for LINSTOR's HTTPS API.")
	fs.StringVar(&o.KeyFile, "linstor-client-key-file", "", "Key of the client certificate.")
	fs.DurationVar(&o.Timeout, "linstor-timeout", 10*time.Second, "Timeout of each LINSTOR request.")
}

// Client makes the LINSTOR calls of the storage-controller.
type Client struct {
	api  *lapi.Client
	http *http.Client
	base *url.URL
}

// New returns a client for o.
func New(o Options, log logr.Logger) (*Client, error) {
	base, err := url.Parse(o.Endpoint)
	if err != nil {
		return nil, fmt.Errorf("--linstor-endpoint: %w", err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if o.CAFile != "" || o.CertFile != "" {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if o.CAFile != "" {
			pem, err := os.ReadFile(o.CAFile)
			if err != nil {
				return nil, fmt.Errorf("--linstor-ca-file: %w", err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--linstor-ca-file %s holds no PEM certificate", o.CAFile)
			}
		}
		if o.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("--linstor-client-cert-file: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		transport.TLSClientConfig = cfg
	}
	return NewWithHTTPClient(base, &http.Client{Transport: transport, Timeout: o.Timeout}, log)
}

// NewWithHTTPClient returns a client of the LINSTOR at base, through hc.
func NewWithHTTPClient(base *url.URL, hc *http.Client, log logr.Logger) (*Client, error) {
	api, err := lapi.NewClient(lapi.BaseURL(base), lapi.HTTPClient(hc), lapi.Log(logger{log}))
	if err != nil {
		return nil, err
	}
	return &Client{api: api, http: hc, base: base}, nil
}

// BaseURL is LINSTOR's address.
func (c *Client) BaseURL() *url.URL { return c.base }

// logger sends golinstor's debug lines (a curl command per request) to the verbose log.
type logger struct{ log logr.Logger }

func (l logger) Printf(format string, args ...any) { l.log.V(2).Info(fmt.Sprintf(format, args...)) }

// ResourceGroup is a LINSTOR resource group as the controller reads it.
type ResourceGroup struct {
	Name   string
	Props  map[string]string
	Filter storage.Filter
}

// ResourceGroups lists the resource groups.
func (c *Client) ResourceGroups(ctx context.Context) (map[string]ResourceGroup, error) {
	all, err := c.api.ResourceGroups.GetAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ResourceGroup, len(all))
	for _, g := range all {
		out[g.Name] = ResourceGroup{Name: g.Name, Props: g.Props, Filter: storage.Filter{
			PlaceCount:          g.SelectFilter.PlaceCount,
			StoragePoolList:     g.SelectFilter.StoragePoolList,
			ReplicasOnSame:      g.SelectFilter.ReplicasOnSame,
			ReplicasOnDifferent: g.SelectFilter.ReplicasOnDifferent,
		}}
	}
	return out, nil
}

// CreateResourceGroup creates rg.
func (c *Client) CreateResourceGroup(ctx context.Context, rg storage.ResourceGroup) error {
	return c.api.ResourceGroups.Create(ctx, lapi.ResourceGroup{
		Name:        rg.Name,
		Description: rg.Description,
		Props:       rg.Props,
		SelectFilter: lapi.AutoSelectFilter{
			PlaceCount:          rg.Filter.PlaceCount,
			StoragePoolList:     rg.Filter.StoragePoolList,
			ReplicasOnSame:      rg.Filter.ReplicasOnSame,
			ReplicasOnDifferent: rg.Filter.ReplicasOnDifferent,
		},
	})
}

// groupModify is LINSTOR's ResourceGroupModify with the select filter sent whole: golinstor's
// type omits empty lists, and LINSTOR keeps a list that a modify leaves out, so it cannot clear
// one (a node selector or topology key removed from a policy).
type groupModify struct {
	OverrideProps map[string]string `json:"override_props,omitempty"`
	DeleteProps   []string          `json:"delete_props,omitempty"`
	SelectFilter  *storage.Filter   `json:"select_filter,omitempty"`
}

// ModifyResourceGroup sends change to the group name; with change.Grow, it then lets LINSTOR
// place the replicas existing volumes now lack.
func (c *Client) ModifyResourceGroup(ctx context.Context, name string, change storage.Change, filter storage.Filter) error {
	if change.Modifies() {
		body := groupModify{OverrideProps: change.Set, DeleteProps: change.Delete}
		if change.Filter {
			body.SelectFilter = &filter
		}
		if err := c.put(ctx, "/v1/resource-groups/"+url.PathEscape(name), body); err != nil {
			return err
		}
	}
	if change.Grow {
		return c.api.ResourceGroups.Adjust(ctx, name, lapi.ResourceGroupAdjust{})
	}
	return nil
}

// DeleteResourceGroup deletes the group name; LINSTOR refuses while volumes use it.
func (c *Client) DeleteResourceGroup(ctx context.Context, name string) error {
	err := c.api.ResourceGroups.Delete(ctx, name)
	if errors.Is(err, lapi.NotFoundError) {
		return nil
	}
	return err
}

// VolumesOf lists the resource definitions (volumes) in group name.
func (c *Client) VolumesOf(ctx context.Context, name string) ([]string, error) {
	all, err := c.api.ResourceDefinitions.GetAll(ctx, lapi.RDGetAllRequest{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, rd := range all {
		if rd.ResourceGroupName == name {
			out = append(out, rd.Name)
		}
	}
	return out, nil
}

// put sends a JSON PUT as golinstor does, decoding LINSTOR's ApiCallRc list on failure.
func (c *Client) put(ctx context.Context, path string, body any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.base.JoinPath(path).String(), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode < 400 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if resp.StatusCode == http.StatusNotFound {
		return lapi.NotFoundError
	}
	var rcs lapi.ApiCallError
	if err := json.NewDecoder(resp.Body).Decode(&rcs); err != nil || len(rcs) == 0 {
		return fmt.Errorf("PUT %s: %s", path, resp.Status)
	}
	return rcs
}

// Volumes reads every resource definition and its resources.
func (c *Client) Volumes(ctx context.Context) (map[string]storage.Volume, error) {
	defs, err := c.api.ResourceDefinitions.GetAll(ctx, lapi.RDGetAllRequest{})
	if err != nil {
		return nil, err
	}
	out := map[string]storage.Volume{}
	for _, d := range defs {
		out[d.Name] = storage.Volume{Name: d.Name, Group: d.ResourceGroupName}
	}
	view, err := c.api.Resources.GetResourceView(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range view {
		v := out[r.Name]
		v.Name = r.Name
		rep := storage.Replica{Node: r.NodeName, InUse: r.State != nil && r.State.InUse != nil && *r.State.InUse}
		if len(r.Volumes) > 0 {
			vol := r.Volumes[0]
			if vol.ProviderKind != lapi.DISKLESS {
				rep.Pool = vol.StoragePoolName
			}
			rep.UpToDate = vol.State.DiskState == "UpToDate"
		}
		v.Replicas = append(v.Replicas, rep)
		out[r.Name] = v
	}
	return out, nil
}

// Nodes reads the nodes and their storage pools, as the capacity computation needs them.
func (c *Client) Nodes(ctx context.Context) ([]storage.Node, error) {
	nodes, err := c.api.Nodes.GetAll(ctx)
	if err != nil {
		return nil, err
	}
	pools, err := c.api.Nodes.GetStoragePoolView(ctx)
	if err != nil {
		return nil, err
	}
	byNode := map[string]*storage.Node{}
	out := make([]storage.Node, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, storage.Node{Name: n.Name, Props: n.Props})
	}
	for i := range out {
		byNode[out[i].Name] = &out[i]
	}
	for _, p := range pools {
		if n, ok := byNode[p.NodeName]; ok {
			n.Pools = append(n.Pools, storage.Pool{Name: p.StoragePoolName, Diskless: p.ProviderKind == lapi.DISKLESS, FreeKiB: p.FreeCapacity, TotalKiB: p.TotalCapacity})
		}
	}
	return out, nil
}
