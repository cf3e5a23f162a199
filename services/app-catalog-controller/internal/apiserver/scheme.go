package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/versioning"
)

// Apps are unstructured objects; the scheme knows only the meta types the generic handlers
// encode beside them (Status, WatchEvent, Table, the option types).
var (
	scheme = runtime.NewScheme()
	// Codecs serve the generic server's own endpoints (discovery, health).
	Codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	unversioned := schema.GroupVersion{Version: "v1"}
	metav1.AddToGroupVersion(scheme, unversioned)
	scheme.AddUnversionedTypes(unversioned, &metav1.Status{}, &metav1.WatchEvent{}, &metav1.APIVersions{},
		&metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	metav1.AddMetaToScheme(scheme)
	metav1beta1.AddMetaToScheme(scheme)
}

// unstructuredCreator creates an Unstructured of any kind.
type unstructuredCreator struct{}

func (unstructuredCreator) New(gvk schema.GroupVersionKind) (runtime.Object, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// converter: apps have one version, so converting one is only setting its apiVersion; anything
// else goes to the scheme.
type converter struct{}

func (converter) Convert(in, out, context any) error { return scheme.Convert(in, out, context) }

func (converter) ConvertToVersion(in runtime.Object, target runtime.GroupVersioner) (runtime.Object, error) {
	switch u := in.(type) {
	case *unstructured.Unstructured:
		if gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()}); ok {
			u.SetGroupVersionKind(gvk)
		}
		return u, nil
	case *unstructured.UnstructuredList:
		if gvk, ok := target.KindForGroupVersionKinds([]schema.GroupVersionKind{u.GroupVersionKind()}); ok {
			u.SetGroupVersionKind(gvk)
		}
		return u, nil
	}
	return scheme.ConvertToVersion(in, target)
}

func (converter) ConvertFieldLabel(gvk schema.GroupVersionKind, label, value string) (string, string, error) {
	return runtime.DefaultMetaV1FieldSelectorConversion(label, value)
}

// negotiatedSerializer serves apps as JSON and YAML (protobuf needs typed objects).
type negotiatedSerializer struct{ infos []runtime.SerializerInfo }

func newNegotiatedSerializer() negotiatedSerializer {
	creator := unstructuredCreator{}
	opts := func(o json.SerializerOptions) *json.Serializer {
		return json.NewSerializerWithOptions(json.DefaultMetaFactory, creator, scheme, o)
	}
	return negotiatedSerializer{infos: []runtime.SerializerInfo{
		{
			MediaType: runtime.ContentTypeJSON, MediaTypeType: "application", MediaTypeSubType: "json", EncodesAsText: true,
			Serializer:       opts(json.SerializerOptions{}),
			PrettySerializer: opts(json.SerializerOptions{Pretty: true}),
			StrictSerializer: opts(json.SerializerOptions{Strict: true}),
			StreamSerializer: &runtime.StreamSerializerInfo{EncodesAsText: true, Serializer: opts(json.SerializerOptions{}), Framer: json.Framer},
		},
		{
			MediaType: runtime.ContentTypeYAML, MediaTypeType: "application", MediaTypeSubType: "yaml", EncodesAsText: true,
			Serializer:       opts(json.SerializerOptions{Yaml: true}),
			StrictSerializer: opts(json.SerializerOptions{Yaml: true, Strict: true}),
		},
	}}
}

func (s negotiatedSerializer) SupportedMediaTypes() []runtime.SerializerInfo { return s.infos }

func (s negotiatedSerializer) EncoderForVersion(e runtime.Encoder, gv runtime.GroupVersioner) runtime.Encoder {
	codec := versioning.NewCodec(e, nil, converter{}, scheme, scheme, scheme, gv, nil, "apps")
	return listEncoder{Encoder: codec, plainJSON: e == s.infos[0].Serializer}
}

func (s negotiatedSerializer) DecoderToVersion(d runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return versioning.NewCodec(nil, d, converter{}, unstructuredCreator{}, scheme, scheme, nil, gv, "apps")
}
