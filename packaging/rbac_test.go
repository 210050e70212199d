package packaging

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// TestRBACIsReadOnly decodes the manifest as the API server would and
// checks that it grants system:nodes get, list and watch on nodes, get on
// the one ConfigMap kube-system/kured-host, and nothing else.
func TestRBACIsReadOnly(t *testing.T) {
	o, err := DecodeRBAC()
	if err != nil {
		t.Fatal(err)
	}
	kinds := []string{o.NodeReader.Kind, o.NodeReaderBinding.Kind, o.Settings.Kind, o.SettingsBinding.Kind}
	if want := []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}; !slices.Equal(kinds, want) {
		t.Fatalf("kinds %q, want %q", kinds, want)
	}
	if o.Settings.Namespace != "kube-system" || o.SettingsBinding.Namespace != "kube-system" {
		t.Errorf("Role and RoleBinding in %q and %q, want kube-system", o.Settings.Namespace, o.SettingsBinding.Namespace)
	}
	rules := []struct {
		what  string
		rules []rbacv1.PolicyRule
		want  rbacv1.PolicyRule
	}{
		{"ClusterRole", o.NodeReader.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}},
		{"Role", o.Settings.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"kured-host"}, Verbs: []string{"get", "list", "watch"}}},
	}
	for _, r := range rules {
		if len(r.rules) != 1 {
			t.Errorf("%s: want exactly one rule, got %d", r.what, len(r.rules))
			continue
		}
		got := r.rules[0]
		checks := []struct {
			what      string
			got, want []string
		}{
			{"apiGroups", got.APIGroups, r.want.APIGroups},
			{"resources", got.Resources, r.want.Resources},
			{"verbs", got.Verbs, r.want.Verbs},
			{"resourceNames", got.ResourceNames, r.want.ResourceNames},
			{"nonResourceURLs", got.NonResourceURLs, nil},
		}
		for _, c := range checks {
			if !slices.Equal(c.got, c.want) {
				t.Errorf("%s rule %s = %q, want %q", r.what, c.what, c.got, c.want)
			}
		}
	}
	refs := []struct {
		what      string
		ref       rbacv1.RoleRef
		subjects  []rbacv1.Subject
		kind, pin string
	}{
		{"ClusterRoleBinding", o.NodeReaderBinding.RoleRef, o.NodeReaderBinding.Subjects, "ClusterRole", o.NodeReader.Name},
		{"RoleBinding", o.SettingsBinding.RoleRef, o.SettingsBinding.Subjects, "Role", o.Settings.Name},
	}
	want := rbacv1.Subject{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:nodes"}
	for _, r := range refs {
		if r.ref.Kind != r.kind || r.ref.Name != r.pin {
			t.Errorf("%s refers to %s %q, want %s %q", r.what, r.ref.Kind, r.ref.Name, r.kind, r.pin)
		}
		if len(r.subjects) != 1 || r.subjects[0] != want {
			t.Errorf("%s subjects = %+v, want only %+v", r.what, r.subjects, want)
		}
	}
}
