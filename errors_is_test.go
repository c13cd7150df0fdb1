package velo_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// sentinelCompareAllowed are the == comparisons with a sentinel the tree
// keeps on purpose: the raw io.Reader result in the frame reader (Read
// returns io.EOF itself, by the io.Reader contract, on the per-read path).
var sentinelCompareAllowed = map[string]bool{
	"internal/frame/reader.go: io.EOF": true,
}

// Errors are compared with errors.Is, so a sentinel wrapped with %w still
// matches. This walks every non-test Go file of the module and fails on
// err == ErrX, err != io.EOF and the like, outside an Is method (which must
// compare with ==).
func TestSentinelsComparedWithErrorsIs(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.Name == "Is" {
				continue
			}
			ast.Inspect(decl, func(n ast.Node) bool {
				be, ok := n.(*ast.BinaryExpr)
				if !ok || (be.Op != token.EQL && be.Op != token.NEQ) {
					return true
				}
				for _, side := range []ast.Expr{be.X, be.Y} {
					name := sentinelName(side)
					if name == "" || sentinelCompareAllowed[filepath.ToSlash(path)+": "+name] {
						continue
					}
					t.Errorf("%s: compares with %s by %s; use errors.Is", fset.Position(be.Pos()), name, be.Op)
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sentinelName is the name of an error sentinel (ErrX, errX, pkg.ErrX,
// io.EOF, context.Canceled, context.DeadlineExceeded), or "".
func sentinelName(e ast.Expr) string {
	var name, full string
	switch v := e.(type) {
	case *ast.Ident:
		name, full = v.Name, v.Name
	case *ast.SelectorExpr:
		pkg, ok := v.X.(*ast.Ident)
		if !ok {
			return ""
		}
		name, full = v.Sel.Name, pkg.Name+"."+v.Sel.Name
	default:
		return ""
	}
	switch full {
	case "io.EOF", "io.ErrUnexpectedEOF", "context.Canceled", "context.DeadlineExceeded":
		return full
	}
	for _, prefix := range []string{"Err", "err"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && rest != "" && rest[0] >= 'A' && rest[0] <= 'Z' {
			return full
		}
	}
	return ""
}
