package apply

import "testing"

func TestContains(t *testing.T) {
	for _, tc := range []struct {
		name       string
		have, want any
		ok         bool
	}{
		{"more keys live", map[string]any{"a": int64(1), "b": "x"}, map[string]any{"a": int64(1)}, true},
		{"numbers by value", map[string]any{"a": float64(2)}, map[string]any{"a": int64(2)}, true},
		{"changed value", map[string]any{"a": int64(1)}, map[string]any{"a": int64(2)}, false},
		{"missing key", map[string]any{}, map[string]any{"a": "x"}, false},
		{"defaulted item field", []any{map[string]any{"n": "a", "d": true}}, []any{map[string]any{"n": "a"}}, true},
		{"extra item", []any{"a", "b"}, []any{"a"}, false},
		{"type changed", "1", int64(1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Contains(tc.have, tc.want); got != tc.ok {
				t.Errorf("Contains = %v, want %v", got, tc.ok)
			}
		})
	}
}
