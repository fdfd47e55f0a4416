package model

import "fmt"

// ParamError is an error about a parameter, whose message names it as the
// caller knows it: a request by its field ("sr_ratio 5: ..."), the
// command line by its flag ("--scale 5: ..."). Error gives the field's
// form, Flag the flag's; a command line finds the error with errors.As
// and shows Flag.
type ParamError struct {
	// Name is the parameter's flag, without the dashes ("scale"); Field
	// its request field ("sr_ratio").
	Name, Field string
	text        func(name string) string
}

// Error is the message naming the request field.
func (e *ParamError) Error() string { return e.text(e.Field) }

// Flag is the message naming the command-line flag.
func (e *ParamError) Flag() string { return e.text("--" + e.Name) }

// Refuse is the error for value v of the parameter named name (its flag),
// whose request field is field ("" for name with '_' for '-'): the name,
// the value (quoted when a string) and the reason, reason formatted with
// a as fmt.Sprintf does.
func Refuse(name, field string, v any, reason string, a ...any) *ParamError {
	why := fmt.Sprintf(reason, a...)
	val := fmt.Sprint(v)
	if s, ok := v.(string); ok {
		val = fmt.Sprintf("%q", s)
	}
	return Named(name, field, func(n string) string { return n + " " + val + ": " + why })
}

// Named is an error whose message, text(n), names the parameter named
// name (its flag) where text puts n: "--name" for the command line, the
// request field (field, or "" for name with '_' for '-') for requests.
func Named(name, field string, text func(n string) string) *ParamError {
	if field == "" {
		field = Param{Name: name}.FieldName()
	}
	return &ParamError{Name: name, Field: field, text: text}
}
