package cuda

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestLaunchArity checks, without a GPU, that every launch of a
// kernels.cu kernel by name (launch, launchOn, launchAs, with the name a
// literal or moves of one, and Launch of a function b.fn looked up by a
// literal name) passes as many arguments as the kernel takes:
// a missing argument is CUDA_ERROR_INVALID_VALUE at best on the GPU host,
// and a shifted one reads the wrong memory.
func TestLaunchArity(t *testing.T) {
	params := kernelParams(kernelSource)
	if len(params) < 40 {
		t.Fatalf("%d kernels read from kernels.cu", len(params))
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		fns := map[string]string{} // f in f, err := b.fn("name", ...) -> name
		ast.Inspect(file, func(n ast.Node) bool {
			if as, ok := n.(*ast.AssignStmt); ok && len(as.Rhs) == 1 && len(as.Lhs) > 0 {
				if c, ok := as.Rhs[0].(*ast.CallExpr); ok && len(c.Args) > 0 {
					if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "fn" {
						if id, ok := as.Lhs[0].(*ast.Ident); ok {
							if name, ok := kernelName(c.Args[0]); ok {
								fns[id.Name] = name
							}
						}
					}
				}
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || call.Ellipsis.IsValid() {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			// the arguments before the kernel's, and where its name is
			skip, at := map[string]int{"launch": 3, "launchAs": 3, "launchOn": 4}[sel.Sel.Name], -1
			if skip > 0 {
				at = skip - 3
			}
			var name string
			if id, ok := sel.X.(*ast.Ident); ok && sel.Sel.Name == "Launch" && fns[id.Name] != "" {
				skip, name = 1, fns[id.Name] // f.Launch(config, args...)
			} else if skip == 0 || len(call.Args) < skip {
				return true
			} else if name, ok = kernelName(call.Args[at]); !ok {
				return true
			}
			want, ok := params[name]
			if !ok {
				t.Errorf("%s: %s launches %q, which kernels.cu does not define", fset.Position(call.Pos()), sel.Sel.Name, name)
				return true
			}
			if got := len(call.Args) - skip; got != want {
				t.Errorf("%s: %s of %s passes %d arguments, the kernel takes %d", fset.Position(call.Pos()), sel.Sel.Name, name, got, want)
			}
			checked++
			return true
		})
	}
	if checked < 30 {
		t.Errorf("only %d launches checked", checked)
	}
}

// kernelParams maps each kernel of src to its parameter count, a kernel
// made by a macro for each type (name_##T) under its name without the
// suffix.
func kernelParams(src string) map[string]int {
	out := map[string]int{}
	re := regexp.MustCompile(`extern "C" __global__ void (\w+?)(?:_##\w+)?\(([^)]*)\)`)
	for _, m := range re.FindAllStringSubmatch(src, -1) {
		decl := strings.TrimSpace(strings.NewReplacer("\\\n", " ", "\n", " ").Replace(m[2]))
		n := 0
		if decl != "" {
			n = strings.Count(decl, ",") + 1
		}
		out[m[1]] = n
	}
	return out
}

// kernelName is the kernel a launch names: a string literal, or
// b.moves of one; ok is false for a name made at run time.
func kernelName(e ast.Expr) (string, bool) {
	if c, ok := e.(*ast.CallExpr); ok {
		if sel, ok := c.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "moves" && len(c.Args) == 1 {
			e = c.Args[0]
		}
	}
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}
