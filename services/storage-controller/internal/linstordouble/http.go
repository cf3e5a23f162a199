package linstordouble

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Return codes, shaped as LINSTOR's: the two top bits mark an error.
const (
	maskError    = -0x4000000000000000
	rcCreated    = 1
	rcModified   = 3
	rcDeleted    = 4
	rcFailExists = maskError | 1001
	rcNotFound   = maskError | 1002
	rcInUse      = maskError | 1003
	rcInvalid    = maskError | 1004
	rcNoPlace    = maskError | 1005
	rcFault      = maskError | 1999
)

// apiCallRc is LINSTOR's reply to every change. Replies, successes and failures alike, are
// lists of them (an ApiCallRcList), whatever the status: LINSTOR's REST layer writes every reply
// as a list, and golinstor reads a failure as one (client.ApiCallError), so a single object would
// hide LINSTOR's message behind "cannot unmarshal object".
type apiCallRc struct {
	RetCode   int64             `json:"ret_code"`
	Message   string            `json:"message"`
	Cause     string            `json:"cause,omitempty"`
	ObjRefs   map[string]string `json:"obj_refs,omitempty"`
	CreatedAt string            `json:"created_at,omitempty"`
}

type route struct {
	pattern string
	handle  func(d *Double, r *http.Request) (int, any)
	// steps: the operation has several steps, and HalfApplyRate may stop it after the first.
	steps bool
}

var routes = []route{
	{pattern: "GET /v1/controller/version", handle: (*Double).version},
	{pattern: "GET /v1/nodes", handle: (*Double).listNodes},
	{pattern: "GET /v1/view/storage-pools", handle: (*Double).listPools},
	{pattern: "GET /v1/resource-groups", handle: (*Double).listGroups},
	{pattern: "POST /v1/resource-groups", handle: (*Double).createGroup},
	{pattern: "PUT /v1/resource-groups/{rg}", handle: (*Double).modifyGroup},
	{pattern: "DELETE /v1/resource-groups/{rg}", handle: (*Double).deleteGroup},
	{pattern: "POST /v1/resource-groups/{rg}/adjust", handle: (*Double).adjustGroup, steps: true},
	{pattern: "POST /v1/resource-groups/{rg}/spawn", handle: (*Double).spawn, steps: true},
	{pattern: "GET /v1/view/resources", handle: (*Double).listResources},
	{pattern: "GET /v1/resource-definitions", handle: (*Double).listDefinitions},
	{pattern: "DELETE /v1/resource-definitions/{rd}", handle: (*Double).deleteDefinition},
	{pattern: "POST /v1/resource-definitions/{rd}/autoplace", handle: (*Double).autoplaceDefinition, steps: true},
	{pattern: "PUT /v1/resource-definitions/{rd}/resources/{node}/toggle-disk/diskful/{pool}", handle: (*Double).toggleDiskful},
	{pattern: "PUT /v1/resource-definitions/{rd}/resources/{node}/toggle-disk/diskless", handle: (*Double).toggleDiskless},
	{pattern: "DELETE /v1/resource-definitions/{rd}/resources/{node}", handle: (*Double).deleteResource},
}

// Routes lists the operations the double serves, as "METHOD /path".
func Routes() []string {
	out := make([]string, 0, len(routes))
	for _, rt := range routes {
		out = append(out, rt.pattern)
	}
	return out
}

// halfKey marks a request whose multi-step operation must stop after its first step.
type halfKey struct{}

// Handler serves the LINSTOR REST API.
func (d *Double) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range routes {
		mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) {
			d.serve(w, r, rt)
		})
	}
	return mux
}

func (d *Double) serve(w http.ResponseWriter, r *http.Request, rt route) {
	d.mu.Lock()
	d.requests[rt.pattern]++
	f, roll := d.faults, d.rand.Float64
	drop, fail, half := roll() < f.DropRate, roll() < f.ErrorRate, rt.steps && roll() < f.HalfApplyRate
	var delay time.Duration
	if roll() < f.DelayRate && f.MaxDelay > 0 {
		delay = time.Duration(roll() * float64(f.MaxDelay))
	}
	d.mu.Unlock()

	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
	}
	status, body := http.StatusInternalServerError, any(nil)
	if fail {
		body = []apiCallRc{{RetCode: rcFault, Message: "injected fault: request not applied"}}
	} else {
		if half {
			r = r.WithContext(withHalf(r.Context()))
		}
		status, body = rt.handle(d, r)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	// Without the lock: handlers reply with copies of what they hold.
	_ = json.NewEncoder(w).Encode(body)
}

func ok(code int64, msg string, refs map[string]string) []apiCallRc {
	return []apiCallRc{{RetCode: code, Message: msg, ObjRefs: refs}}
}

func failure(status int, code int64, format string, args ...any) (int, any) {
	return status, []apiCallRc{{RetCode: code, Message: fmt.Sprintf(format, args...)}}
}

func decode(r *http.Request, into any) error {
	if err := json.NewDecoder(r.Body).Decode(into); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	return nil
}

func (d *Double) version(*http.Request) (int, any) {
	return http.StatusOK, map[string]string{"version": "1.28.0", "git_hash": "linstor-double", "build_time": "2024-01-01T00:00:00+00:00", "rest_api_version": "1.28.0"}
}

type nodeJSON struct {
	Name             string            `json:"name"`
	Type             string            `json:"type"`
	Props            map[string]string `json:"props,omitempty"`
	ConnectionStatus string            `json:"connection_status"`
}

func (d *Double) listNodes(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := r.URL.Query()["nodes"]
	out := []nodeJSON{}
	for _, name := range slices.Sorted(maps.Keys(d.nodes)) {
		if len(want) > 0 && !slices.Contains(want, name) {
			continue
		}
		out = append(out, nodeJSON{Name: name, Type: "Satellite", Props: maps.Clone(d.nodes[name].props), ConnectionStatus: "ONLINE"})
	}
	return http.StatusOK, out
}

type poolJSON struct {
	StoragePoolName string            `json:"storage_pool_name"`
	NodeName        string            `json:"node_name"`
	ProviderKind    string            `json:"provider_kind"`
	Props           map[string]string `json:"props,omitempty"`
	FreeCapacity    int64             `json:"free_capacity"`
	TotalCapacity   int64             `json:"total_capacity"`
}

func (d *Double) listPools(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := r.URL.Query()
	out := []poolJSON{}
	for _, nodeName := range slices.Sorted(maps.Keys(d.nodes)) {
		n := d.nodes[nodeName]
		if len(q["nodes"]) > 0 && !slices.Contains(q["nodes"], nodeName) {
			continue
		}
		out = append(out, poolJSON{StoragePoolName: "DfltDisklessStorPool", NodeName: nodeName, ProviderKind: "DISKLESS"})
		for _, name := range slices.Sorted(maps.Keys(n.pools)) {
			if len(q["storage_pools"]) > 0 && !slices.Contains(q["storage_pools"], name) {
				continue
			}
			p := n.pools[name]
			out = append(out, poolJSON{StoragePoolName: name, NodeName: nodeName, ProviderKind: p.Kind, FreeCapacity: p.FreeKiB, TotalCapacity: p.TotalKiB})
		}
	}
	return http.StatusOK, out
}

type groupJSON struct {
	Name         string                     `json:"name"`
	Description  string                     `json:"description,omitempty"`
	Props        map[string]string          `json:"props,omitempty"`
	SelectFilter map[string]json.RawMessage `json:"select_filter,omitempty"`
}

// json is a copy of g: serve writes replies after letting go of the lock, while a modify may
// change g's maps.
func (g *resourceGroup) json() groupJSON {
	return groupJSON{Name: g.name, Description: g.description, Props: maps.Clone(g.props), SelectFilter: maps.Clone(g.filter)}
}

func (d *Double) listGroups(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want := r.URL.Query()["resource_groups"]
	out := []groupJSON{}
	for _, name := range slices.Sorted(maps.Keys(d.groups)) {
		if len(want) > 0 && !slices.Contains(want, name) {
			continue
		}
		out = append(out, d.groups[name].json())
	}
	return http.StatusOK, out
}

// validName is LINSTOR's rule for object names.
func validName(s string) bool {
	if len(s) < 2 || len(s) > 48 {
		return false
	}
	for i, c := range s {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '-')) {
			return false
		}
	}
	return true
}

func (d *Double) createGroup(r *http.Request) (int, any) {
	var in groupJSON
	if err := decode(r, &in); err != nil {
		return failure(http.StatusBadRequest, rcInvalid, "%v", err)
	}
	if !validName(in.Name) {
		return failure(http.StatusBadRequest, rcInvalid, "Invalid name: %q", in.Name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, exists := d.groups[in.Name]; exists {
		return failure(http.StatusBadRequest, rcFailExists, "A resource group with the name '%s' already exists.", in.Name)
	}
	g := &resourceGroup{name: in.Name, description: in.Description, props: maps.Clone(in.Props), filter: maps.Clone(in.SelectFilter)}
	if g.props == nil {
		g.props = map[string]string{}
	}
	if g.filter == nil {
		g.filter = map[string]json.RawMessage{}
	}
	d.groups[in.Name] = g
	return http.StatusCreated, ok(rcCreated, fmt.Sprintf("New resource group '%s' created.", in.Name), map[string]string{"RscGrp": in.Name})
}

type groupModifyJSON struct {
	Description      *string                    `json:"description,omitempty"`
	OverrideProps    map[string]string          `json:"override_props,omitempty"`
	DeleteProps      []string                   `json:"delete_props,omitempty"`
	DeleteNamespaces []string                   `json:"delete_namespaces,omitempty"`
	SelectFilter     map[string]json.RawMessage `json:"select_filter,omitempty"`
}

// modifyGroup applies a ResourceGroupModify. In the select filter, a field that is present
// replaces the stored one (an empty list clears it); an absent field is left as it is.
func (d *Double) modifyGroup(r *http.Request) (int, any) {
	var in groupModifyJSON
	if err := decode(r, &in); err != nil {
		return failure(http.StatusBadRequest, rcInvalid, "%v", err)
	}
	name := r.PathValue("rg")
	d.mu.Lock()
	defer d.mu.Unlock()
	g, found := d.groups[name]
	if !found {
		return failure(http.StatusNotFound, rcNotFound, "Resource group '%s' not found.", name)
	}
	if in.Description != nil {
		g.description = *in.Description
	}
	for _, k := range in.DeleteProps {
		delete(g.props, k)
	}
	for _, ns := range in.DeleteNamespaces {
		for k := range g.props {
			if strings.HasPrefix(k, ns+"/") {
				delete(g.props, k)
			}
		}
	}
	maps.Copy(g.props, in.OverrideProps)
	for k, v := range in.SelectFilter {
		if string(v) == "null" {
			continue
		}
		g.filter[k] = v
	}
	return http.StatusOK, ok(rcModified, fmt.Sprintf("Resource group '%s' modified.", name), map[string]string{"RscGrp": name})
}

func (d *Double) deleteGroup(r *http.Request) (int, any) {
	name := r.PathValue("rg")
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, found := d.groups[name]; !found {
		return failure(http.StatusNotFound, rcNotFound, "Resource group '%s' not found.", name)
	}
	for _, def := range d.defs {
		if def.group == name {
			return failure(http.StatusInternalServerError, rcInUse, "Resource group '%s' has resource definitions (%s): it cannot be deleted.", name, def.name)
		}
	}
	delete(d.groups, name)
	return http.StatusOK, ok(rcDeleted, fmt.Sprintf("Resource group '%s' deleted.", name), map[string]string{"RscGrp": name})
}

// adjustGroup places missing replicas of every resource definition of the group.
func (d *Double) adjustGroup(r *http.Request) (int, any) {
	name := r.PathValue("rg")
	d.mu.Lock()
	defer d.mu.Unlock()
	g, found := d.groups[name]
	if !found {
		return failure(http.StatusNotFound, rcNotFound, "Resource group '%s' not found.", name)
	}
	for _, rd := range slices.Sorted(maps.Keys(d.defs)) {
		if def := d.defs[rd]; def.group == name {
			if err := d.autoplace(def, g.selectFilter(), isHalf(r)); err != nil {
				return failure(http.StatusInternalServerError, rcNoPlace, "Adjusting '%s': %v", rd, err)
			}
		}
	}
	return http.StatusOK, ok(rcModified, fmt.Sprintf("Resource group '%s' adjusted.", name), nil)
}

type spawnJSON struct {
	ResourceDefinitionName string                     `json:"resource_definition_name"`
	VolumeSizes            []int64                    `json:"volume_sizes,omitempty"`
	SelectFilter           map[string]json.RawMessage `json:"select_filter,omitempty"`
	DefinitionsOnly        bool                       `json:"definitions_only,omitempty"`
}

// spawn creates a resource definition of one volume from the group, then places it.
func (d *Double) spawn(r *http.Request) (int, any) {
	var in spawnJSON
	if err := decode(r, &in); err != nil {
		return failure(http.StatusBadRequest, rcInvalid, "%v", err)
	}
	name := r.PathValue("rg")
	if !validName(in.ResourceDefinitionName) || len(in.VolumeSizes) != 1 || in.VolumeSizes[0] <= 0 {
		return failure(http.StatusBadRequest, rcInvalid, "spawn needs a valid resource_definition_name and one positive volume size")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	g, found := d.groups[name]
	if !found {
		return failure(http.StatusNotFound, rcNotFound, "Resource group '%s' not found.", name)
	}
	if _, exists := d.defs[in.ResourceDefinitionName]; exists {
		return failure(http.StatusBadRequest, rcFailExists, "A resource definition with the name '%s' already exists.", in.ResourceDefinitionName)
	}
	def := &resourceDefinition{name: in.ResourceDefinitionName, group: name, props: map[string]string{}, sizeKiB: in.VolumeSizes[0], created: d.clock.Now(), replicas: map[string]*replica{}}
	d.defs[def.name] = def
	if in.DefinitionsOnly {
		return http.StatusCreated, ok(rcCreated, fmt.Sprintf("Resource definition '%s' created.", def.name), nil)
	}
	if isHalf(r) {
		return failure(http.StatusInternalServerError, rcFault, "%v", errHalfApplied)
	}
	f := mergeFilter(g.filter, in.SelectFilter)
	if err := d.autoplace(def, f, false); err != nil {
		return failure(http.StatusInternalServerError, rcNoPlace, "Placing '%s': %v", def.name, err)
	}
	return http.StatusCreated, ok(rcCreated, fmt.Sprintf("Resource '%s' spawned.", def.name), map[string]string{"RscDfn": def.name})
}

func mergeFilter(base, over map[string]json.RawMessage) selectFilter {
	m := maps.Clone(base)
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	for k, v := range over {
		if string(v) != "null" {
			m[k] = v
		}
	}
	return decodeFilter(m)
}

type volumeJSON struct {
	VolumeNumber     int32             `json:"volume_number"`
	StoragePoolName  string            `json:"storage_pool_name"`
	ProviderKind     string            `json:"provider_kind"`
	AllocatedSizeKib int64             `json:"allocated_size_kib"`
	UsableSizeKib    int64             `json:"usable_size_kib"`
	State            map[string]string `json:"state"`
}

type resourceJSON struct {
	Name            string            `json:"name"`
	NodeName        string            `json:"node_name"`
	Props           map[string]string `json:"props,omitempty"`
	Flags           []string          `json:"flags,omitempty"`
	State           map[string]bool   `json:"state"`
	CreateTimestamp int64             `json:"create_timestamp"`
	Volumes         []volumeJSON      `json:"volumes"`
}

func (d *Double) listResources(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	q := r.URL.Query()
	out := []resourceJSON{}
	for _, rd := range slices.Sorted(maps.Keys(d.defs)) {
		if len(q["resources"]) > 0 && !slices.Contains(q["resources"], rd) {
			continue
		}
		def := d.defs[rd]
		for _, nodeName := range slices.Sorted(maps.Keys(def.replicas)) {
			if len(q["nodes"]) > 0 && !slices.Contains(q["nodes"], nodeName) {
				continue
			}
			rep := def.replicas[nodeName]
			res := resourceJSON{Name: rd, NodeName: nodeName, State: map[string]bool{"in_use": rep.inUse}, CreateTimestamp: rep.created.UnixMilli()}
			v := volumeJSON{StoragePoolName: "DfltDisklessStorPool", ProviderKind: "DISKLESS", UsableSizeKib: def.sizeKiB, State: map[string]string{"disk_state": rep.diskState}}
			if rep.diskful() {
				v.StoragePoolName, v.ProviderKind, v.AllocatedSizeKib = rep.pool, d.nodes[nodeName].pools[rep.pool].Kind, def.sizeKiB
			} else {
				res.Flags = []string{"DRBD_DISKLESS", "DISKLESS"}
			}
			res.Volumes = []volumeJSON{v}
			out = append(out, res)
		}
	}
	return http.StatusOK, out
}

type definitionJSON struct {
	Name              string            `json:"name"`
	Props             map[string]string `json:"props,omitempty"`
	ResourceGroupName string            `json:"resource_group_name"`
}

func (d *Double) listDefinitions(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []definitionJSON{}
	for _, name := range slices.Sorted(maps.Keys(d.defs)) {
		out = append(out, definitionJSON{Name: name, Props: maps.Clone(d.defs[name].props), ResourceGroupName: d.defs[name].group})
	}
	return http.StatusOK, out
}

func (d *Double) deleteDefinition(r *http.Request) (int, any) {
	name := r.PathValue("rd")
	d.mu.Lock()
	defer d.mu.Unlock()
	def, found := d.defs[name]
	if !found {
		return failure(http.StatusNotFound, rcNotFound, "Resource definition '%s' not found.", name)
	}
	for nodeName, rep := range def.replicas {
		if rep.inUse {
			return failure(http.StatusInternalServerError, rcInUse, "Resource '%s' is in use on node '%s'.", name, nodeName)
		}
	}
	for nodeName, rep := range def.replicas {
		if rep.diskful() {
			d.nodes[nodeName].pools[rep.pool].FreeKiB += def.sizeKiB
		}
	}
	delete(d.defs, name)
	return http.StatusOK, ok(rcDeleted, fmt.Sprintf("Resource definition '%s' deleted.", name), nil)
}

type autoplaceJSON struct {
	SelectFilter map[string]json.RawMessage `json:"select_filter"`
}

func (d *Double) autoplaceDefinition(r *http.Request) (int, any) {
	var in autoplaceJSON
	if err := decode(r, &in); err != nil {
		return failure(http.StatusBadRequest, rcInvalid, "%v", err)
	}
	name := r.PathValue("rd")
	d.mu.Lock()
	defer d.mu.Unlock()
	def, found := d.defs[name]
	if !found {
		return failure(http.StatusNotFound, rcNotFound, "Resource definition '%s' not found.", name)
	}
	var base map[string]json.RawMessage
	if g, ok := d.groups[def.group]; ok {
		base = g.filter
	}
	if err := d.autoplace(def, mergeFilter(base, in.SelectFilter), isHalf(r)); err != nil {
		return failure(http.StatusInternalServerError, rcNoPlace, "Placing '%s': %v", name, err)
	}
	return http.StatusCreated, ok(rcCreated, fmt.Sprintf("Resource '%s' placed.", name), nil)
}

func (d *Double) replica(r *http.Request) (*resourceDefinition, *replica, string, error) {
	name, nodeName := r.PathValue("rd"), r.PathValue("node")
	def, found := d.defs[name]
	if !found {
		return nil, nil, "", fmt.Errorf("resource definition '%s' not found", name)
	}
	rep, found := def.replicas[nodeName]
	if !found {
		return nil, nil, "", fmt.Errorf("resource '%s' not found on node '%s'", name, nodeName)
	}
	return def, rep, nodeName, nil
}

func (d *Double) toggleDiskful(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	def, rep, nodeName, err := d.replica(r)
	if err != nil {
		return failure(http.StatusBadRequest, rcNotFound, "%v", err)
	}
	if rep.diskful() {
		return failure(http.StatusBadRequest, rcInvalid, "Resource '%s' on node '%s' is already diskful.", def.name, nodeName)
	}
	p, err := d.pool(nodeName, r.PathValue("pool"))
	if err != nil {
		return failure(http.StatusBadRequest, rcNotFound, "%v", err)
	}
	if p.FreeKiB < def.sizeKiB {
		return failure(http.StatusInternalServerError, rcNoPlace, "Not enough free space in storage pool '%s' on node '%s'.", p.Name, nodeName)
	}
	p.FreeKiB -= def.sizeKiB
	rep.pool, rep.diskState = p.Name, Inconsistent
	return http.StatusOK, ok(rcModified, fmt.Sprintf("Resource '%s' on node '%s' is becoming diskful.", def.name, nodeName), nil)
}

func (d *Double) toggleDiskless(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	def, rep, nodeName, err := d.replica(r)
	if err != nil {
		return failure(http.StatusBadRequest, rcNotFound, "%v", err)
	}
	if !rep.diskful() {
		return failure(http.StatusBadRequest, rcInvalid, "Resource '%s' on node '%s' is already diskless.", def.name, nodeName)
	}
	d.nodes[nodeName].pools[rep.pool].FreeKiB += def.sizeKiB
	rep.pool, rep.diskState = "", Diskless
	return http.StatusOK, ok(rcModified, fmt.Sprintf("Resource '%s' on node '%s' is now diskless.", def.name, nodeName), nil)
}

func (d *Double) deleteResource(r *http.Request) (int, any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	def, rep, nodeName, err := d.replica(r)
	if err != nil {
		return failure(http.StatusNotFound, rcNotFound, "%v", err)
	}
	if rep.inUse {
		return failure(http.StatusInternalServerError, rcInUse, "Resource '%s' is in use on node '%s'.", def.name, nodeName)
	}
	if rep.diskful() {
		d.nodes[nodeName].pools[rep.pool].FreeKiB += def.sizeKiB
	}
	delete(def.replicas, nodeName)
	return http.StatusOK, ok(rcDeleted, fmt.Sprintf("Resource '%s' on node '%s' deleted.", def.name, nodeName), nil)
}

func withHalf(ctx context.Context) context.Context { return context.WithValue(ctx, halfKey{}, true) }

func isHalf(r *http.Request) bool {
	v, _ := r.Context().Value(halfKey{}).(bool)
	return v
}
