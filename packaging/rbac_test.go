package packaging

import (
	"bytes"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// TestRBACIsReadOnlyOnNodes decodes the manifest as the API server would and
// checks that it grants system:nodes get, list and watch on nodes, and
// nothing else.
func TestRBACIsReadOnlyOnNodes(t *testing.T) {
	docs := bytes.Split(RBAC, []byte("\n---\n"))
	if len(docs) != 2 {
		t.Fatalf("want 2 YAML documents, got %d", len(docs))
	}
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	if err := yaml.UnmarshalStrict(docs[0], &role); err != nil {
		t.Fatalf("ClusterRole: %v", err)
	}
	if err := yaml.UnmarshalStrict(docs[1], &binding); err != nil {
		t.Fatalf("ClusterRoleBinding: %v", err)
	}
	if role.Kind != "ClusterRole" || binding.Kind != "ClusterRoleBinding" {
		t.Fatalf("kinds %q, %q", role.Kind, binding.Kind)
	}
	if len(role.Rules) != 1 {
		t.Fatalf("want exactly one rule, got %d", len(role.Rules))
	}
	r := role.Rules[0]
	checks := []struct {
		what      string
		got, want []string
	}{
		{"apiGroups", r.APIGroups, []string{""}},
		{"resources", r.Resources, []string{"nodes"}},
		{"verbs", r.Verbs, []string{"get", "list", "watch"}},
		{"resourceNames", r.ResourceNames, nil},
		{"nonResourceURLs", r.NonResourceURLs, nil},
	}
	for _, c := range checks {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("rule %s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name {
		t.Errorf("binding refers to %s %q, want ClusterRole %q", binding.RoleRef.Kind, binding.RoleRef.Name, role.Name)
	}
	want := rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}
	if len(binding.Subjects) != 1 || binding.Subjects[0] != want {
		t.Errorf("subjects = %+v, want only %+v", binding.Subjects, want)
	}
}
