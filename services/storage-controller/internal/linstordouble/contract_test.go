package linstordouble_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"

	lapi "github.com/LINBIT/golinstor/client"
	"github.com/go-logr/logr"

	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstor"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/linstordouble/openapicheck"
	"github.com/flotilla-dev/flotilla/services/storage-controller/internal/storage"
)

const gib = 1024 * 1024 // KiB

// serve starts h behind a checker; the clients it returns send everything through the checker.
func serve(t *testing.T, h http.Handler) (*linstor.Client, *lapi.Client, *openapicheck.Checker) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	check, err := openapicheck.New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse(srv.URL)
	hc := &http.Client{Transport: check.Transport(http.DefaultTransport)}
	c, err := linstor.NewWithHTTPClient(base, hc, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := lapi.NewClient(lapi.BaseURL(base), lapi.HTTPClient(hc), lapi.Log(discard{}))
	if err != nil {
		t.Fatal(err)
	}
	return c, raw, check
}

type discard struct{}

func (discard) Printf(string, ...any) {}

func threeZones(d *linstordouble.Double) {
	for i, zone := range []string{"a", "b", "c"} {
		d.AddNode("node-"+string(rune('1'+i)), map[string]string{"Aux/topology.kubernetes.io/zone": zone},
			linstordouble.Pool{Name: "ssd", Kind: "LVM_THIN", TotalKiB: 100 * gib, FreeKiB: 100 * gib})
	}
}

// Every request the storage-controller's client and golinstor send, and every response the
// double gives (successes, LINSTOR's refusals and injected faults), conforms to LINSTOR's OpenAPI
// document; and every operation the double serves is exercised here.
func TestContract(t *testing.T) {
	ctx := context.Background()
	d := linstordouble.New(linstordouble.Options{})
	threeZones(d)
	c, raw, check := serve(t, d.Handler())
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	refused := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: no error", what)
		}
	}
	// refusedSaying: LINSTOR's message reaches the caller through golinstor, whatever the status.
	refusedSaying := func(what string, err error, message string) {
		t.Helper()
		refused(what, err)
		var rcs lapi.ApiCallError
		if !errors.As(err, &rcs) || !strings.Contains(err.Error(), message) {
			t.Errorf("%s: %T %q, want LINSTOR's ApiCallRc list saying %q", what, err, err, message)
		}
	}

	if _, err := raw.Controller.GetVersion(ctx); err != nil {
		t.Fatal(err)
	}
	rg := storage.ResourceGroup{Name: "flotilla-fast", Description: "d", Props: map[string]string{storage.PropPolicy: "fast"},
		Filter: storage.Filter{PlaceCount: 2, StoragePoolList: []string{"ssd"}, ReplicasOnSame: []string{}, ReplicasOnDifferent: []string{"Aux/topology.kubernetes.io/zone"}}}
	must("create group", c.CreateResourceGroup(ctx, rg))
	refusedSaying("create the group again", c.CreateResourceGroup(ctx, rg), "already exists")
	groups, err := c.ResourceGroups(ctx)
	must("list groups", err)
	if g := groups["flotilla-fast"]; g.Filter.PlaceCount != 2 || !slices.Equal(g.Filter.ReplicasOnDifferent, rg.Filter.ReplicasOnDifferent) {
		t.Fatalf("group as listed: %+v", g)
	}
	nodes, err := c.Nodes(ctx)
	must("nodes", err)
	if len(nodes) != 3 || len(nodes[0].Pools) != 2 {
		t.Fatalf("nodes: %+v", nodes)
	}

	must("spawn", raw.ResourceGroups.Spawn(ctx, "flotilla-fast", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-1", VolumeSizes: []int64{10 * gib}}))
	refusedSaying("spawn too large", raw.ResourceGroups.Spawn(ctx, "flotilla-fast", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-2", VolumeSizes: []int64{200 * gib}}), "not enough available nodes")
	view, err := raw.Resources.GetResourceView(ctx)
	must("resource view", err)
	if len(view) != 2 {
		t.Fatalf("pvc-1 has %d resources, want 2: %+v", len(view), view)
	}
	volumes, err := c.VolumesOf(ctx, "flotilla-fast")
	must("volumes", err)
	if !slices.Equal(volumes, []string{"pvc-1", "pvc-2"}) { // the refused spawn left its definition, as LINSTOR's does
		t.Fatalf("volumes of the group: %v", volumes)
	}
	must("delete pvc-2", raw.ResourceDefinitions.Delete(ctx, "pvc-2"))

	// Grow to 3 replicas (modify + adjust), then clear the spread (a list LINSTOR only clears
	// when it is sent empty).
	grow := rg
	grow.Filter.PlaceCount = 3
	must("grow", c.ModifyResourceGroup(ctx, "flotilla-fast", storage.Diff(groups["flotilla-fast"].Props, groups["flotilla-fast"].Filter, grow), grow.Filter))
	if n := len(d.Replicas("pvc-1")); n != 3 {
		t.Fatalf("after adjust pvc-1 has %d replicas, want 3", n)
	}
	flat := grow
	flat.Filter.ReplicasOnDifferent = []string{}
	flat.Props = map[string]string{storage.PropPolicy: "fast", storage.PropAutoDiskful: "5"}
	groups, _ = c.ResourceGroups(ctx)
	must("clear spread", c.ModifyResourceGroup(ctx, "flotilla-fast", storage.Diff(groups["flotilla-fast"].Props, groups["flotilla-fast"].Filter, flat), flat.Filter))
	groups, _ = c.ResourceGroups(ctx)
	if g := groups["flotilla-fast"]; len(g.Filter.ReplicasOnDifferent) != 0 || g.Props[storage.PropAutoDiskful] != "5" {
		t.Fatalf("after clearing the spread: %+v", g)
	}
	refused("modify a missing group", c.ModifyResourceGroup(ctx, "flotilla-none", storage.Change{Filter: true}, flat.Filter))

	// golinstor sends the JSON null for a nil *ToggleDiskDiskfulProps, which the document does
	// not allow (the checker found it): callers pass an empty one.
	must("toggle diskless", raw.Resources.Diskless(ctx, "pvc-1", "node-3", ""))
	must("toggle diskful", raw.Resources.Diskful(ctx, "pvc-1", "node-3", "ssd", &lapi.ToggleDiskDiskfulProps{}))
	refusedSaying("toggle diskful twice", raw.Resources.Diskful(ctx, "pvc-1", "node-3", "ssd", &lapi.ToggleDiskDiskfulProps{}), "already diskful")
	must("delete a resource", raw.Resources.Delete(ctx, "pvc-1", "node-3"))
	must("autoplace", raw.Resources.Autoplace(ctx, "pvc-1", lapi.AutoPlaceRequest{SelectFilter: lapi.AutoSelectFilter{PlaceCount: 3}}))
	refusedSaying("delete a group in use", c.DeleteResourceGroup(ctx, "flotilla-fast"), "has resource definitions")
	must("delete pvc-1", raw.ResourceDefinitions.Delete(ctx, "pvc-1"))
	refused("delete a missing definition", raw.ResourceDefinitions.Delete(ctx, "pvc-1"))
	must("delete the group", c.DeleteResourceGroup(ctx, "flotilla-fast"))
	must("delete a missing group (no error: already gone)", c.DeleteResourceGroup(ctx, "flotilla-fast"))

	// Failures of operations that declare a 500 (adjust, spawn, the storage pool view) and of
	// those that declare none (a group modify, the nodes) alike: an ApiCallRc list, as LINSTOR
	// answers every failure, so that its message reaches the caller.
	must("create group", c.CreateResourceGroup(ctx, rg))
	d.SetFaults(linstordouble.Faults{ErrorRate: 1})
	refusedSaying("faulty modify", c.ModifyResourceGroup(ctx, "flotilla-fast", storage.Change{Filter: true}, rg.Filter), "injected fault")
	refusedSaying("faulty adjust", c.ModifyResourceGroup(ctx, "flotilla-fast", storage.Change{Grow: true}, rg.Filter), "injected fault")
	refusedSaying("faulty spawn", raw.ResourceGroups.Spawn(ctx, "flotilla-fast", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-3", VolumeSizes: []int64{gib}}), "injected fault")
	_, err = c.Nodes(ctx)
	refusedSaying("faulty nodes", err, "injected fault")
	_, err = raw.Nodes.GetStoragePoolView(ctx)
	refusedSaying("faulty storage pool view", err, "injected fault")
	d.SetFaults(linstordouble.Faults{HalfApplyRate: 1})
	refusedSaying("half-applied spawn", raw.ResourceGroups.Spawn(ctx, "flotilla-fast", lapi.ResourceGroupSpawn{ResourceDefinitionName: "pvc-4", VolumeSizes: []int64{gib}}), "stopped after the first step")
	d.SetFaults(linstordouble.Faults{})

	for _, v := range check.Violations() {
		t.Error(v)
	}
	seen := d.Requests()
	for _, pattern := range linstordouble.Routes() {
		if seen[pattern] == 0 {
			t.Errorf("%s was never exercised", pattern)
		}
	}
	t.Logf("%d exchanges checked: %v", len(check.Exchanges()), check.Exchanges())
}

// The checker fails on what the document does not allow: a request body of the wrong type, an
// operation that does not exist, and a response of the wrong shape; and on a failure answered
// with a single ApiCallRc, which the document allows but LINSTOR never sends (and golinstor
// cannot read).
func TestContractCheckerFails(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode([]map[string]any{{"name": "n", "type": "Hypervisor"}}) // not in the enum
	})
	mux.HandleFunc("POST /v1/resource-groups/{rg}/spawn", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]any{"ret_code": -4611686018427386904, "message": "no room"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusCreated) })
	c, _, check := serve(t, mux)
	ctx := context.Background()
	_, _ = c.Nodes(ctx)
	_ = c.ModifyResourceGroup(ctx, "g", storage.Change{Filter: true}, storage.Filter{PlaceCount: 1, StoragePoolList: []string{}, ReplicasOnSame: []string{}, ReplicasOnDifferent: []string{}})
	hc := &http.Client{Transport: check.Transport(http.DefaultTransport)}
	base := strings.TrimSuffix(mustURL(t, c), "/")
	for _, req := range []*http.Request{
		newReq(t, http.MethodPost, base+"/v1/resource-groups", `{"name": 5}`),
		newReq(t, http.MethodGet, base+"/v1/no-such-thing", ""),
		newReq(t, http.MethodPost, base+"/v1/resource-groups/g/spawn", `{"resource_definition_name": "r", "volume_sizes": [1024]}`),
	} {
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
		}
	}
	got := strings.Join(check.Violations(), "\n")
	for _, want := range []string{"response GET /v1/nodes 200", "request POST /v1/resource-groups", "no such operation", "response PUT /v1/resource-groups/{resource_group} 201",
		"response POST /v1/resource-groups/{resource_group}/spawn 500"} {
		if !strings.Contains(got, want) {
			t.Errorf("no violation %q among:\n%s", want, got)
		}
	}
}

func mustURL(t *testing.T, c *linstor.Client) string {
	t.Helper()
	return c.BaseURL().String()
}

func newReq(t *testing.T, method, u, body string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}
