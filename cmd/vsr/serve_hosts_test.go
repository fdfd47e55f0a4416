package main

import (
	"slices"
	"testing"
)

// TestPublicHosts: the API answers to --public-host's names and to
// --listen's host when that is a name; addresses add nothing (the Host
// check lets every IP address pass).
func TestPublicHosts(t *testing.T) {
	for _, c := range []struct {
		listen string
		flags  []string
		want   []string
	}{
		{"vsr.internal:8000", []string{"a.example", "b.example:8443"}, []string{"a.example", "b.example:8443", "vsr.internal"}},
		{"0.0.0.0:8000", []string{"a.example"}, []string{"a.example"}},
		{"[::]:8000", nil, nil},
		{":8000", nil, nil},
		{"127.0.0.1:0", nil, nil},
	} {
		if got := publicHosts(serveFlags{listen: c.listen, publicHosts: c.flags}); !slices.Equal(got, c.want) {
			t.Errorf("--listen %s --public-host %v: %v, want %v", c.listen, c.flags, got, c.want)
		}
	}
}
