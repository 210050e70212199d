package config

import (
	"bufio"
	"bytes"
	"regexp"
	"strconv"
	"strings"
)

// aotIndex finds the lines of keys inside arrays of tables written with
// [[headers]]. The TOML decoder records one position per key path, the
// last one, which would point every element's error at the last element.
type aotIndex map[string][]map[string]int // array key -> element -> sub-key -> line

var (
	aotHeader = regexp.MustCompile(`^\s*\[\[\s*([^\]]+?)\s*\]\]`)
	anyHeader = regexp.MustCompile(`^\s*\[`)
	keyLine   = regexp.MustCompile(`^\s*([A-Za-z0-9_-]+)\s*=`)
	elemKey   = regexp.MustCompile(`^(.*)\[(\d+)\](?:\.(.*))?$`)
)

func newAOTIndex(data []byte) aotIndex {
	idx := aotIndex{}
	var cur map[string]int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if m := aotHeader.FindStringSubmatch(line); m != nil {
			name := strings.Join(strings.Fields(strings.ReplaceAll(m[1], ".", " . ")), "")
			cur = map[string]int{"": n}
			idx[name] = append(idx[name], cur)
			continue
		}
		if anyHeader.MatchString(line) {
			cur = nil
			continue
		}
		if m := keyLine.FindStringSubmatch(line); m != nil && cur != nil {
			cur[m[1]] = n
		}
	}
	return idx
}

// line returns the line of key ("lock.groups[1].max" or "lock.groups[1]")
// when it lies in element elem of an array of tables, or 0.
func (idx aotIndex) line(key string, elem int) int {
	m := elemKey.FindStringSubmatch(key)
	if m == nil {
		return 0
	}
	i, err := strconv.Atoi(m[2])
	if err != nil || i != elem {
		return 0
	}
	elems := idx[m[1]]
	if i >= len(elems) {
		return 0
	}
	return elems[i][m[3]]
}
