package journal

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Compare tells whether the journal old may be resumed by a run of the input
// id with the settings st. When it may not, why says in one line what
// differs, for the caller to print after "journal set aside: ", as in
// "the input changed (size 123 -> 456)". The input is checked before the
// model, the model before the settings; only the first difference is told.
func Compare(old *Journal, id Identity, st Settings) (ok bool, why string) {
	if old == nil {
		return false, "there is no journal"
	}
	a := old.Input
	switch {
	case a.Size != id.Size:
		return false, fmt.Sprintf("the input changed (size %d -> %d)", a.Size, id.Size)
	case a.ModTime != id.ModTime:
		return false, fmt.Sprintf("the input changed (modified %s -> %s)", stamp(a.ModTime), stamp(id.ModTime))
	case a.Head != id.Head:
		return false, "the input changed (its first MiB differs)"
	case a.Tail != id.Tail:
		return false, "the input changed (its last MiB differs)"
	case a.Probe != id.Probe:
		return false, "the input changed (what probing it finds differs)"
	}
	b := old.Settings
	if b.Model != st.Model {
		return false, fmt.Sprintf("the model changed (%s -> %s)", short(b.Model), short(st.Model))
	}
	if b.Digest == st.Digest {
		return true, ""
	}
	var diffs []string
	keys := map[string]bool{}
	for k := range b.Values {
		keys[k] = true
	}
	for k := range st.Values {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		was, had := b.Values[k]
		is, has := st.Values[k]
		switch {
		case had && !has:
			diffs = append(diffs, fmt.Sprintf("%s %q removed", k, was))
		case !had && has:
			diffs = append(diffs, fmt.Sprintf("%s %q added", k, is))
		case was != is:
			diffs = append(diffs, fmt.Sprintf("%s %q -> %q", k, was, is))
		}
	}
	if len(diffs) == 0 {
		return false, "the settings changed"
	}
	return false, "the settings changed (" + strings.Join(diffs, ", ") + ")"
}

func stamp(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// short shortens a hash for a message.
func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	if h == "" {
		return `""`
	}
	return h
}
