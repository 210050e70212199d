// Package packaging holds the files that ship in the .deb and .rpm and that
// the binary also needs, so that both come from one copy.
package packaging

import _ "embed"

// RBAC is the ClusterRole and ClusterRoleBinding that give the group
// system:nodes read access to Nodes (installed as
// /usr/share/kured-host/rbac.yaml and printed by `kured-host rbac`).
//
//go:embed rbac.yaml
var RBAC []byte
