package apiserver

import (
	"bytes"
	"encoding/json"
	"io"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// appList is what a LIST returns. Its items share the stored apps' maps rather than copying
// them: nothing on a LIST's way out modifies an item (ConvertToTable, which can, works on a
// copy). Encoded as plain JSON, it is written from each app's memoized JSON instead of being
// encoded again; every other encoding sees the UnstructuredList.
type appList struct {
	*unstructured.UnstructuredList
	items []*converted
}

// writeJSON writes the list as the JSON encoder would, the items last.
func (l *appList) writeJSON(w io.Writer) error {
	envelope, err := json.Marshal(l.Object) // apiVersion, kind, metadata
	if err != nil {
		return err
	}
	items := make([][]byte, len(l.items))
	size := len(envelope) + 16
	for i, c := range l.items {
		if items[i], err = c.json(); err != nil {
			return err
		}
		size += len(items[i]) + 1
	}
	buf := bytes.NewBuffer(make([]byte, 0, size))
	buf.Write(envelope[:len(envelope)-1])
	if len(envelope) > 2 {
		buf.WriteByte(',')
	}
	buf.WriteString(`"items":[`)
	for i, item := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(item)
	}
	buf.WriteString("]}\n")
	_, err = w.Write(buf.Bytes())
	return err
}

// listEncoder hands appLists to the plain JSON encoder's fast path, and to every other encoder
// as the UnstructuredList they know.
type listEncoder struct {
	runtime.Encoder
	plainJSON bool
}

func (e listEncoder) Encode(obj runtime.Object, w io.Writer) error {
	if l, ok := obj.(*appList); ok {
		if e.plainJSON {
			return l.writeJSON(w)
		}
		obj = l.UnstructuredList
	}
	return e.Encoder.Encode(obj, w)
}
