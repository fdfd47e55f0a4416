package decimal

import (
	"errors"
	"strconv"
	"testing"
)

func TestParse(t *testing.T) {
	for s, want := range map[string]float64{"10": 10, "-1.5": -1.5, "+2": 2, ".5": 0.5, "5.": 5, "2e3": 2000, "1.5E-2": 0.015, "007": 7} {
		if got, err := Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "1_0", "0x1p3", "0x10", "Inf", "-inf", "NaN", "infinity", ".", "-", "e3", "1e", "1e+", "1.2.3", " 1", "1 ", "1,5", "0b1"} {
		if got, err := Parse(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q) = %v, %v; want ErrSyntax", s, got, err)
		}
	}
	if _, err := Parse("1e999"); !errors.Is(err, strconv.ErrRange) {
		t.Errorf("Parse(1e999): %v; want ErrRange", err)
	}
}
