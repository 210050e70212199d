package config

import (
	"fmt"
	"reflect"
	"strings"
)

// unknownKeyMessage says that name is not a key of the table t, and
// suggests what the user probably meant: a near miss in the same table,
// the same key in another table, or kured's flag of that name.
func unknownKeyMessage(name string, t reflect.Type) string {
	msg := fmt.Sprintf("unknown key %q", name)
	norm := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	best, bestDist := "", 3
	for _, tag := range sortedKeys(fieldsByTag(t)) {
		if d := editDistance(norm, tag); d < bestDist {
			best, bestDist = tag, d
		}
	}
	if best != "" {
		return fmt.Sprintf("%s; did you mean %q?", msg, best)
	}
	if elsewhere := keysNamed(reflect.TypeFor[Config](), "", norm); len(elsewhere) > 0 {
		return fmt.Sprintf("%s; did you mean %s?", msg, strings.Join(elsewhere, " or "))
	}
	for _, o := range KuredOptions {
		if o.Flag == "--"+strings.ReplaceAll(norm, "_", "-") {
			if o.Key == "" {
				return fmt.Sprintf("%s: kured's %s has no equivalent here: %s", msg, o.Flag, o.Note)
			}
			return fmt.Sprintf("%s: kured's %s is %s here", msg, o.Flag, o.Key)
		}
	}
	return msg
}

// keysNamed lists the dotted keys under t whose last part is name.
func keysNamed(t reflect.Type, path, name string) []string {
	var out []string
	byTag := fieldsByTag(t)
	for _, tag := range sortedKeys(byTag) {
		ft, key := t.Field(byTag[tag]).Type, joinKey(path, tag)
		if tag == name {
			out = append(out, fmt.Sprintf("%q", key))
		}
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && !isText(ft) {
			out = append(out, keysNamed(ft, key, name)...)
		}
	}
	return out
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
