package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/vsr-dev/vsr/model"
)

// flagHints say what a flag takes where its type alone says too little,
// for the message about a value it cannot parse.
var flagHints = map[string]string{
	"scale": "2, 3 or 4",
	"gpu":   "a GPU index: 0, 1, ...",
}

// flagError says what a flag takes when its value does not parse, in
// place of pflag's message ("invalid argument "abc" for "-s, --scale"
// flag: strconv.ParseInt: parsing "abc": invalid syntax"). It is every
// command's flag error function (cobra's SetFlagErrorFunc). Other flag
// errors are cobra's.
func flagError(_ *cobra.Command, err error) error {
	var iv *pflag.InvalidValueError
	if !errors.As(err, &iv) {
		return err
	}
	f, v := iv.GetFlag(), iv.GetValue()
	hint := flagHints[f.Name]
	var what string
	switch f.Value.Type() {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64":
		_, ferr := strconv.ParseFloat(v, 64)
		switch {
		case errors.Is(iv.Unwrap(), strconv.ErrRange):
			what = "is out of range"
		case ferr == nil:
			what = "is not a whole number"
		default:
			what = "is not a number"
		}
		if hint == "" {
			hint = "a whole number (default " + f.DefValue + ")"
		}
	case "float32", "float64":
		what = "is not a number"
		if hint == "" {
			hint = "a number (default " + f.DefValue + ")"
		}
	case "duration":
		what = "is not a duration"
		if hint == "" {
			hint = "a duration such as 500ms, 5s or 1m30s (default " + f.DefValue + ")"
		}
	case "bool":
		what, hint = "is not true or false", "--"+f.Name+" alone, or --"+f.Name+"=false"
	default:
		return fmt.Errorf("--%s: %q: %v", f.Name, v, iv.Unwrap())
	}
	return fmt.Errorf("--%s: %q %s: use %s", f.Name, v, what, hint)
}

// flagNamed is err with its message naming parameters by their flags
// (a model.ParamError names request fields): what the command line shows.
// It unwraps to err.
func flagNamed(err error) error {
	var pe *model.ParamError
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	return &shown{strings.Replace(err.Error(), pe.Error(), pe.Flag(), 1), err}
}

// shown is an error with the message the command line shows for it.
type shown struct {
	msg string
	err error
}

func (e *shown) Error() string { return e.msg }
func (e *shown) Unwrap() error { return e.err }

// forCommandLine makes every command of root say flags in its errors:
// flag values that do not parse (flagError) and parameters (flagNamed).
func forCommandLine(root *cobra.Command) {
	root.SetFlagErrorFunc(flagError)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, args []string) error { return flagNamed(run(cmd, args)) }
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
