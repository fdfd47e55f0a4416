package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/vsr-dev/vsr/model"
)

// addFamilyFlags adds a flag for each parameter of every registered model
// family (a name that families share is one flag), with the family's
// default and help.
func addFamilyFlags(fl *pflag.FlagSet) { addParamFlags(fl, model.AllParams()) }

// addParamFlags adds a flag for each of params, with its default and
// help.
func addParamFlags(fl *pflag.FlagSet, params []model.Param) {
	for _, p := range params {
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

// fp8Param is the family parameter that --dtype fp8 sets to fp8 (with
// bf16 storage: app.StorageType).
const fp8Param = "dit-dtype"

// dtypeHelp is the help of --dtype, naming the families by what they
// need (model.Family's StorageType) and the owners of fp8Param (which
// --dtype fp8 sets); a list that no family is in is left out.
func dtypeHelp() string {
	f32 := "f32 (float32 without TF32"
	if free := model.Titles(func(f model.Family) bool { return f.StorageType() == "" }); len(free) > 0 {
		f32 += "; " + model.List(free, "and") + " models"
	}
	var needs []string
	for _, f := range model.Families() {
		if t := f.StorageType(); t != "" {
			needs = append(needs, t+" for "+f.About().Title)
		}
	}
	auto := "f16"
	if len(needs) > 0 {
		auto = strings.Join(append(needs, "else f16"), ", ")
	}
	fp8 := model.Titles(func(f model.Family) bool {
		return slices.ContainsFunc(f.Params(), func(p model.Param) bool { return p.Name == fp8Param })
	})
	if len(fp8) == 0 {
		return "GPU storage type: f16, bf16, " + f32 + ") or auto (" + auto + ")"
	}
	return "GPU storage type: f16, bf16, " + f32 + "), auto (" + auto + "), " +
		"or fp8 (" + model.List(fp8, "and") + ": bf16 with the DiT's linear layers in fp8, as --" + fp8Param + " fp8)"
}

// familyValues returns the model parameters set on the command line.
// --dtype fp8 sets fp8Param to fp8 (and app.StorageType makes it bf16
// storage).
func familyValues(fl *pflag.FlagSet) (model.Values, error) {
	if d := fl.Lookup("dtype"); d != nil && d.Value.String() == "fp8" {
		if v := fl.Lookup(fp8Param); v != nil && fl.Changed(fp8Param) && v.Value.String() != "fp8" {
			return nil, fmt.Errorf("--dtype fp8 with --%s %s: give one of them", fp8Param, v.Value.String())
		}
		if err := fl.Set(fp8Param, "fp8"); err != nil {
			return nil, err
		}
	}
	return paramValues(fl, model.AllParams())
}

// paramValues returns the values of params (flags of addParamFlags) set
// on the command line.
func paramValues(fl *pflag.FlagSet, params []model.Param) (model.Values, error) {
	set := model.Values{}
	for _, p := range params {
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
