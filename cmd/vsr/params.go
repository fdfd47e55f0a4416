package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/vsr-dev/vsr/model"
)

// addFamilyFlags adds a flag for each parameter of every registered model
// family (a name that families share is one flag), with the family's
// default and help.
func addFamilyFlags(fl *pflag.FlagSet) {
	for _, p := range familyParams() {
		short := p.Short
		if fl.ShorthandLookup(short) != nil {
			short = "" // taken by a flag of the command
		}
		switch p.Kind {
		case model.Int:
			d, _ := p.Default.(int)
			fl.IntP(p.Name, short, d, p.Help)
		case model.Float:
			d, _ := p.Default.(float64)
			fl.Float64P(p.Name, short, d, p.Help)
		default:
			d, _ := p.Default.(string)
			fl.StringP(p.Name, short, d, p.Help)
		}
	}
}

// familyParams lists the parameters of every family, each name once.
func familyParams() []model.Param {
	var out []model.Param
	seen := map[string]bool{}
	for _, f := range model.Families() {
		for _, p := range f.Params() {
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p)
			}
		}
	}
	return out
}

// familyValues returns the model parameters set on the command line.
func familyValues(fl *pflag.FlagSet) (model.Values, error) {
	set := model.Values{}
	for _, p := range familyParams() {
		if !fl.Changed(p.Name) {
			continue
		}
		var v any
		var err error
		switch p.Kind {
		case model.Int:
			v, err = fl.GetInt(p.Name)
		case model.Float:
			v, err = fl.GetFloat64(p.Name)
		default:
			var s string
			if s, err = fl.GetString(p.Name); err == nil {
				v, err = p.Parse(s)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", p.Name, err)
		}
		set[p.Name] = v
	}
	return set, nil
}
