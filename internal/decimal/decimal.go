// Package decimal parses numbers as people write them in flags, query
// strings and parameters: plain decimal notation only.
//
// strconv.ParseFloat also takes Go's literal syntax (underscores between
// digits, hexadecimal mantissas, "Inf", "NaN"), so "1_0" reads as 10 and
// "0x1p3" as 8: a typo becomes a different value instead of an error.
package decimal

import (
	"errors"
	"strconv"
)

// ErrSyntax is returned for anything but an optional sign, digits with at
// most one decimal point, and an optional exponent ("-1.5", ".5", "2e3").
var ErrSyntax = errors.New("not a decimal number")

// Parse returns the value of a decimal number, refusing the literal forms
// strconv.ParseFloat accepts beyond it; out-of-range values fail as they
// do there (strconv.ErrRange).
func Parse(s string) (float64, error) {
	if !plain(s) {
		return 0, ErrSyntax
	}
	return strconv.ParseFloat(s, 64)
}

// plain reports whether s is [+-]digits[.digits][(e|E)[+-]digits], with at
// least one digit in the mantissa.
func plain(s string) bool {
	i, n := 0, len(s)
	if i < n && (s[i] == '+' || s[i] == '-') {
		i++
	}
	digits := 0
	for ; i < n && s[i] >= '0' && s[i] <= '9'; i++ {
		digits++
	}
	if i < n && s[i] == '.' {
		for i++; i < n && s[i] >= '0' && s[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < n && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < n && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := i
		for ; i < n && s[i] >= '0' && s[i] <= '9'; i++ {
		}
		if i == exp {
			return false
		}
	}
	return i == n
}
