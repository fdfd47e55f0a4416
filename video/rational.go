package video

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/vsr-dev/vsr/internal/decimal"
)

// Rational is an exact frame rate such as 24000/1001 frames per second.
// The zero value is invalid (no rate).
type Rational struct {
	Num int `json:"num"`
	Den int `json:"den"`
}

// String formats r as ffmpeg does, "Num/Den", e.g. "24000/1001" or "24/1".
func (r Rational) String() string { return fmt.Sprintf("%d/%d", r.Num, r.Den) }

// Float returns r as a float64, or 0 when the denominator is 0.
func (r Rational) Float() float64 {
	if r.Den == 0 {
		return 0
	}
	return float64(r.Num) / float64(r.Den)
}

// Valid reports whether r is a positive, finite rate.
func (r Rational) Valid() bool { return r.Num > 0 && r.Den > 0 }

// Reduced returns r in lowest terms with a positive denominator.
func (r Rational) Reduced() Rational {
	if r.Den < 0 {
		r.Num, r.Den = -r.Num, -r.Den
	}
	a, b := r.Num, r.Den
	if a < 0 {
		a = -a
	}
	for b != 0 {
		a, b = b, a%b
	}
	if a > 1 {
		r.Num /= a
		r.Den /= a
	}
	return r
}

// ParseRational parses "30000/1001", "30000:1001", "25" or a decimal such as
// "29.97". Decimals within 0.01 of an NTSC rate (N*1000/1001) give that
// rate; others are converted exactly (12.5 gives 25/2).
func ParseRational(s string) (Rational, error) {
	s = strings.TrimSpace(s)
	bad := fmt.Errorf("invalid frame rate %q: use a fraction like 30000/1001 or a number like 25", s)
	if i := strings.IndexAny(s, "/:"); i >= 0 {
		n, err1 := strconv.Atoi(strings.TrimSpace(s[:i]))
		d, err2 := strconv.Atoi(strings.TrimSpace(s[i+1:]))
		if err1 != nil || err2 != nil || d == 0 {
			return Rational{}, bad
		}
		return Rational{n, d}.Reduced(), nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		return Rational{n, 1}, nil
	}
	f, err := decimal.Parse(s)
	if err != nil || math.IsInf(f, 0) {
		return Rational{}, bad
	}
	return rationalFromDecimal(f, 0.01), nil
}

// rationalFromDecimal turns a rounded decimal rate (as printed by ffmpeg,
// e.g. 29.97 or 23.98) back into the rate it most likely stands for: an
// integer, an NTSC rate N*1000/1001, or the exact decimal.
func rationalFromDecimal(f, tol float64) Rational {
	if r := math.Round(f); math.Abs(f-r) < 1e-9 {
		return Rational{int(r), 1}
	}
	n := math.Round(f * 1001 / 1000)
	if n > 0 && math.Abs(n*1000/1001-f) <= tol && math.Abs(n-f) > tol {
		return Rational{int(n) * 1000, 1001}
	}
	den := 1
	for den < 1000000 && math.Abs(f*float64(den)-math.Round(f*float64(den))) > 1e-6 {
		den *= 10
	}
	return Rational{int(math.Round(f * float64(den))), den}.Reduced()
}
