package deploy_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTheREADMELayoutNamesEveryPackage keeps the README's layout section
// true: a package added under shared/ or cmd/ without a line there fails.
func TestTheREADMELayoutNamesEveryPackage(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "## Layout")
	if start < 0 {
		t.Fatal("README.md has no ## Layout section")
	}
	layout := readme[start:]
	if end := strings.Index(layout[len("## Layout"):], "\n## "); end >= 0 {
		layout = layout[:len("## Layout")+end]
	}
	for _, top := range []string{"shared", "cmd"} {
		err := filepath.WalkDir(filepath.Join(root, top), func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() || d.Name() == "testdata" {
				if d != nil && d.IsDir() && d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return err
			}
			goFiles, _ := filepath.Glob(filepath.Join(path, "*.go"))
			if len(goFiles) == 0 {
				return nil
			}
			if !strings.Contains(layout, d.Name()+"/") {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("README.md's layout does not name %s (as %q)", rel, d.Name()+"/")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
