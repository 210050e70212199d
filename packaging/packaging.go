// Package packaging holds the files that ship in the .deb and .rpm and that
// the binary also needs, so that both come from one copy.
package packaging

import (
	"bytes"
	_ "embed"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"
)

// RBAC is the ClusterRole and ClusterRoleBinding that give the group
// system:nodes read access to Nodes, and the Role and RoleBinding that let
// it read the ConfigMap kube-system/kured-host (installed as
// /usr/share/kured-host/rbac.yaml and printed by `kured-host rbac`).
//
//go:embed rbac.yaml
var RBAC []byte

// RBACObjects are the objects of RBAC, in its order.
type RBACObjects struct {
	NodeReader        rbacv1.ClusterRole
	NodeReaderBinding rbacv1.ClusterRoleBinding
	Settings          rbacv1.Role
	SettingsBinding   rbacv1.RoleBinding
}

// DecodeRBAC decodes RBAC strictly, as the API server would.
func DecodeRBAC() (RBACObjects, error) {
	var o RBACObjects
	docs := bytes.Split(RBAC, []byte("\n---\n"))
	into := []any{&o.NodeReader, &o.NodeReaderBinding, &o.Settings, &o.SettingsBinding}
	if len(docs) != len(into) {
		return o, fmt.Errorf("rbac manifest: want %d YAML documents, got %d", len(into), len(docs))
	}
	for i, d := range docs {
		if err := yaml.UnmarshalStrict(d, into[i]); err != nil {
			return o, fmt.Errorf("rbac manifest, document %d: %w", i+1, err)
		}
	}
	return o, nil
}
