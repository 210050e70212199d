package marks

import (
	"maps"
	"reflect"
	"testing"
)

func TestChangeMerge(t *testing.T) {
	on, off := "on", "off"
	tests := []struct {
		name    string
		c, o    Change
		want    Change
		wantNil bool
	}{
		{name: "nothing", wantNil: true},
		{name: "labels of one, annotations of the other",
			c:    Change{Annotations: map[string]*string{InProgress: &on}},
			o:    Change{Labels: map[string]string{"rebooting": "true"}},
			want: Change{Labels: map[string]string{"rebooting": "true"}, Annotations: map[string]*string{InProgress: &on}}},
		{name: "the second wins for a key in both, a removal included",
			c:    Change{Labels: map[string]string{"a": "1", "b": "1"}, Annotations: map[string]*string{InProgress: &on, MostRecentNeeded: &off}},
			o:    Change{Labels: map[string]string{"b": "2"}, Annotations: map[string]*string{InProgress: nil}},
			want: Change{Labels: map[string]string{"a": "1", "b": "2"}, Annotations: map[string]*string{InProgress: nil, MostRecentNeeded: &off}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := Change{Labels: maps.Clone(tt.c.Labels)}
			got := tt.c.Merge(tt.o)
			if tt.wantNil {
				if !got.Empty() || got.Labels != nil || got.Annotations != nil {
					t.Errorf("Merge = %+v, want an empty Change", got)
				}
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Merge = %+v, want %+v", got, tt.want)
			}
			if !reflect.DeepEqual(tt.c.Labels, before.Labels) {
				t.Errorf("Merge changed its receiver's labels: %v, was %v", tt.c.Labels, before.Labels)
			}
		})
	}
}
