// Package catalogtest checks an ApplicationDefinition and its Helm chart for what the platform
// relies on when it installs a chart with a customer's values:
//
//   - every string a customer may set is bounded by a pattern, an enum or a maximum length
//     (UnboundedStrings);
//   - no string value, however hostile (newlines, "---", template braces, quotes, unicode), changes
//     which objects the chart renders, their shape or their namespace, or breaks the rendered YAML
//     (Check): values are rendered with quote, toYaml or toJson, never bare. A value the chart
//     refuses (fail, required) is fine: nothing would be installed.
//
// Catalog authors call Run from a test of their own, next to their definition and chart:
//
//	func TestCatalog(t *testing.T) {
//		catalogtest.Run(t, catalogtest.Options{Definition: "definition.yaml", Chart: "chart"})
//	}
//
// Rendering uses the helm binary (Options.Helm, else $FLOTILLA_CACHE/bin/helm, else helm on PATH).
package catalogtest

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	catalogv1 "github.com/flotilla-dev/flotilla/services/app-catalog-controller/api/v1alpha1"
)

// Hostile are the strings every string value (and every key of a map a customer fills) is tried
// with. Each would change a bare-rendered manifest: a new document, a new key, a template
// expression, a broken scalar.
var Hostile = []string{
	"x\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: injected\n" +
		"roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\n" +
		"subjects: [{kind: Group, apiGroup: rbac.authorization.k8s.io, name: \"system:authenticated\"}]",
	"x\n  privileged: true\n    hostPID: true\nhostNetwork: true",
	`{{ .Release.Namespace }}{{ fail "template injected" }}`,
	`"double" 'single' \backslash`,
	"key: value",
	"- item",
	"# comment",
	"&anchor *alias !!binary",
	"}{][,:",
	"ünïcødé ✓ \u202e 中文 \u0000",
	"null",
}

// Options name what to check.
type Options struct {
	// Definition is the path of the ApplicationDefinition's YAML.
	Definition string
	// Chart is the chart's directory.
	Chart string
	// Helm is the helm binary; by default $FLOTILLA_CACHE/bin/helm when present, else helm.
	Helm string
	// Namespace the app is rendered into; by default tenant-catalogtest.
	Namespace string
	// Platform are the values the platform sets under "flotilla"; by default those of an app
	// named "catalogtest" in Namespace, with every shared service provided by tenant-root.
	Platform map[string]any
}

// Run reports every problem Check finds as a test error.
func Run(t testing.TB, opts Options) {
	t.Helper()
	for _, err := range Check(opts) {
		t.Error(err)
	}
}

// Check returns the definition's unbounded strings and every hostile value that changed what the
// chart renders. A value the chart refuses (helm fails) is fine: nothing would be installed.
func Check(opts Options) []error {
	def, err := ReadDefinition(opts.Definition)
	if err != nil {
		return []error{err}
	}
	var errs []error
	for _, p := range UnboundedStrings(def) {
		errs = append(errs, fmt.Errorf("%s: a string without pattern, enum or maxLength", p))
	}
	r, err := newRenderer(def, opts)
	if err != nil {
		return append(errs, err)
	}
	return append(errs, r.tryAll(stringPaths(def))...)
}

// ReadDefinition reads an ApplicationDefinition, refusing unknown fields.
func ReadDefinition(path string) (*catalogv1.ApplicationDefinition, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	def := &catalogv1.ApplicationDefinition{}
	if err := yaml.UnmarshalStrict(raw, def); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return def, nil
}

// step is one step of a path into the values: a property, the items of an array ("[*]") or the
// values of a map ("{*}").
type step = string

const (
	items  step = "[*]"
	values step = "{*}"
)

// leaf is a place in the values a customer fills with a string: a string value, or a map's key.
type leaf struct {
	path  []step
	key   bool // the keys of the map at path
	bound bool // the schema bounds it
}

func (l leaf) String() string {
	s := "spec"
	for _, p := range l.path {
		if p == items || p == values {
			s += p
		} else {
			s += "." + p
		}
	}
	if l.key {
		s += " (keys)"
	}
	return s
}

func schemaOf(def *catalogv1.ApplicationDefinition) (*apiextensionsv1.JSONSchemaProps, error) {
	s := &apiextensionsv1.JSONSchemaProps{}
	if err := json.Unmarshal(def.Spec.Schema.Raw, s); err != nil {
		return nil, fmt.Errorf("spec.schema: %w", err)
	}
	return s, nil
}

// stringPaths lists every string a customer may set in the definition's schema.
func stringPaths(def *catalogv1.ApplicationDefinition) []leaf {
	s, err := schemaOf(def)
	if err != nil {
		return nil
	}
	var out []leaf
	var walk func(s *apiextensionsv1.JSONSchemaProps, path []step)
	walk = func(s *apiextensionsv1.JSONSchemaProps, path []step) {
		switch {
		case s.Type == "string" || s.XIntOrString:
			out = append(out, leaf{path: path, bound: len(s.Enum) > 0 || s.Pattern != "" || s.MaxLength != nil})
		case s.Type == "array" && s.Items != nil && s.Items.Schema != nil:
			walk(s.Items.Schema, append(slices.Clone(path), items))
		case s.Type == "object":
			for _, name := range sortedKeys(s.Properties) {
				p := s.Properties[name]
				walk(&p, append(slices.Clone(path), name))
			}
			if ap := s.AdditionalProperties; ap != nil && ap.Schema != nil {
				// Keys are bounded by the apiserver's own limits and CEL rules; they are tried
				// for injection all the same.
				out = append(out, leaf{path: path, key: true, bound: true})
				walk(ap.Schema, append(slices.Clone(path), values))
			}
		}
	}
	walk(s, nil)
	return out
}

// UnboundedStrings returns the schema's string values with neither a pattern, an enum nor a
// maxLength.
func UnboundedStrings(def *catalogv1.ApplicationDefinition) []string {
	if _, err := schemaOf(def); err != nil {
		return []string{err.Error()}
	}
	var out []string
	for _, l := range stringPaths(def) {
		if !l.bound {
			out = append(out, l.String())
		}
	}
	return out
}

type renderer struct {
	helm, chart, namespace, release string
	platform                        map[string]any
}

func newRenderer(def *catalogv1.ApplicationDefinition, opts Options) (*renderer, error) {
	r := &renderer{helm: opts.Helm, chart: opts.Chart, namespace: opts.Namespace, platform: opts.Platform}
	if r.helm == "" {
		r.helm = "helm"
		cache := os.Getenv("FLOTILLA_CACHE")
		if cache == "" {
			home, _ := os.UserHomeDir()
			cache = filepath.Join(home, ".cache", "flotilla")
		}
		if bin := filepath.Join(cache, "bin", "helm"); fileExists(bin) {
			r.helm = bin
		}
	}
	if r.namespace == "" {
		r.namespace = "tenant-catalogtest"
	}
	const name = "catalogtest"
	prefix := cmp.Or(def.Spec.Names.Singular, strings.ToLower(def.Spec.Names.Kind)) + "-" // as the platform names releases
	if p := def.Spec.Release.Prefix; p != nil {
		prefix = *p
	}
	r.release = prefix + name
	if r.platform == nil {
		r.platform = map[string]any{
			"app":       map[string]any{"kind": def.Spec.Names.Kind, "name": name, "release": r.release},
			"namespace": r.namespace,
			"tenant":    "catalogtest",
			"host":      "catalogtest.example.org",
			"services":  map[string]any{"ingress": "tenant-root", "monitoring": "tenant-root", "etcd": "tenant-root"},
		}
	}
	return r, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// marker stands in for a benign customer string: what a hostile string must not render
// differently from.
const marker = "catalogtest"

// tryAll renders, for each leaf, the chart with a benign value there, then with each hostile one,
// and compares the shapes. Renders run a few at a time.
func (r *renderer) tryAll(leaves []leaf) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 4)
	)
	for _, l := range leaves {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := r.try(l); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

func (r *renderer) try(l leaf) error {
	ref, err := r.render(valuesWith(l, marker))
	loose := false
	if err != nil {
		// The chart refuses the benign value too (a host that must lie below the tenant's,
		// say): compare with the chart's defaults, object by object.
		if ref, err = r.render(map[string]any{}); err != nil {
			return fmt.Errorf("the chart does not render with its defaults: %w", err)
		}
		loose = true
	}
	var errs []error
	for _, h := range Hostile {
		got, err := r.render(valuesWith(l, h))
		if err != nil {
			// A chart that refuses a value (fail, required) installs nothing. A value that
			// breaks the manifest's YAML is written bare: another one would not break it.
			if strings.Contains(err.Error(), "YAML parse error") {
				errs = append(errs, fmt.Errorf("%s = %q breaks the rendered YAML (the value is written bare): %w", l, h, err))
			}
			continue
		}
		renamed := ""
		if l.key {
			renamed = h // the key itself is printed: it stands where the benign one did
		}
		if err := r.sameShape(ref, got, renamed, loose); err != nil {
			errs = append(errs, fmt.Errorf("%s = %q changes what the chart renders: %w", l, h, err))
		}
	}
	return errors.Join(errs...)
}

// valuesWith builds customer values holding s at the leaf (the chart's defaults elsewhere).
func valuesWith(l leaf, s string) map[string]any {
	var v any = s
	if l.key {
		v = map[string]any{s: "1"}
	}
	for i := len(l.path) - 1; i >= 0; i-- {
		switch l.path[i] {
		case items:
			v = []any{v}
		case values:
			v = map[string]any{"k": v}
		default:
			v = map[string]any{l.path[i]: v}
		}
	}
	if m, ok := v.(map[string]any); ok {
		return m
	}
	return map[string]any{}
}

func (r *renderer) render(vals map[string]any) ([]byte, error) {
	vals["flotilla"] = r.platform
	raw, err := json.Marshal(vals)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.helm, "template", r.release, r.chart, "--namespace", r.namespace, "--values", "-")
	cmd.Stdin = bytes.NewReader(raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// sameShape compares two renders: the same documents (apiVersion, kind), each in the app's
// namespace, with the same keys at the same places and lists of the same lengths. Scalar values
// may differ: they hold the customer's string.
// A key equal to renamed counts as the benign marker. loose compares only the objects (apiVersion,
// kind), not their keys.
func (r *renderer) sameShape(want, got []byte, renamed string, loose bool) error {
	ws, err := r.shapes(want, "")
	if err != nil {
		return fmt.Errorf("the benign render: %w", err)
	}
	gs, err := r.shapes(got, renamed)
	if err != nil {
		return err
	}
	if len(ws) != len(gs) {
		return fmt.Errorf("%d objects instead of %d: %s", len(gs), len(ws), strings.Join(gs, " | "))
	}
	for i := range ws {
		wkeys, gkeys := strings.Fields(ws[i]), strings.Fields(gs[i])
		if wkeys[0] != gkeys[0] {
			return fmt.Errorf("object %d is a %s, not a %s", i, gkeys[0], wkeys[0])
		}
		if loose {
			continue
		}
		if extra, missing := difference(gkeys, wkeys), difference(wkeys, gkeys); len(extra)+len(missing) > 0 {
			return fmt.Errorf("%s: keys added %v, keys missing %v", wkeys[0], extra, missing)
		}
	}
	return nil
}

// difference lists the elements of a that b lacks.
func difference(a, b []string) []string {
	var out []string
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// shapes parses a multi-document render into one signature per object.
func (r *renderer) shapes(render []byte, renamed string) ([]string, error) {
	var out []string
	for _, doc := range splitDocuments(render) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("does not parse: %w", err)
		}
		if obj == nil {
			continue
		}
		var ns string
		if m, ok := obj["metadata"].(map[string]any); ok {
			ns, _ = m["namespace"].(string)
		}
		if ns != "" && ns != r.namespace {
			return nil, fmt.Errorf("an object in namespace %q, not the app's %q", ns, r.namespace)
		}
		var keys []string
		shape(obj, "", renamed, &keys)
		out = append(out, fmt.Sprintf("%v/%v %s", obj["apiVersion"], obj["kind"], strings.Join(keys, " ")))
	}
	return out, nil
}

func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	for _, d := range bytes.Split(append([]byte("\n"), b...), []byte("\n---")) {
		if len(bytes.TrimSpace(d)) > 0 {
			docs = append(docs, d)
		}
	}
	return docs
}

func shape(v any, at, renamed string, keys *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(v) {
			name := k
			if renamed != "" && k == renamed {
				name = marker
			}
			p := at + "/" + name
			*keys = append(*keys, p)
			shape(v[k], p, renamed, keys)
		}
	case []any:
		*keys = append(*keys, fmt.Sprintf("%s[%d]", at, len(v)))
		for i, e := range v {
			shape(e, fmt.Sprintf("%s[%d]", at, i), renamed, keys)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
