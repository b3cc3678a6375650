package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// notParameters are platform outputs that no app stack parameter takes; the
// guide's describe-stacks query must leave them out.
var notParameters = []string{"AgentHostSecurityGroupId", "VpcId"}

func TestTheDeployGuideNamesWhatTheTemplatesDeclare(t *testing.T) {
	app := loadTemplate(t, "template.yaml")
	platform := loadTemplate(t, "infra/aws/platform.yaml")
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	if err != nil {
		t.Fatal(err)
	}
	guide := string(raw)
	declared := map[string]bool{}
	for _, tpl := range []cfnTemplate{app, platform} {
		for n := range tpl.Parameters {
			declared[n] = true
		}
		for n := range tpl.Outputs {
			declared[n] = true
		}
		for n := range tpl.Resources {
			declared[n] = true
		}
	}

	t.Run("every app parameter without a default is a platform output of the same name", func(t *testing.T) {
		for name, p := range app.Parameters {
			if _, hasDefault := p.(map[string]any)["Default"]; hasDefault {
				continue
			}
			if _, ok := platform.Outputs[name]; !ok {
				t.Errorf("app parameter %s has no default and no platform output fills it", name)
			}
		}
	})

	t.Run("every platform output is an app parameter or left out by the guide's query", func(t *testing.T) {
		for name := range platform.Outputs {
			_, isParam := app.Parameters[name]
			switch {
			case slices.Contains(notParameters, name):
				if isParam {
					t.Errorf("%s is listed as no parameter but template.yaml declares it", name)
				}
				if !strings.Contains(guide, "OutputKey!='"+name+"'") {
					t.Errorf("the guide's describe-stacks query does not leave out %s", name)
				}
			case !isParam:
				t.Errorf("platform output %s is no app parameter: sam deploy would refuse the override", name)
			}
		}
	})

	t.Run("the guide's table lists every app parameter with the output that fills it", func(t *testing.T) {
		row := regexp.MustCompile("(?m)^\\| `(\\w+)` \\| (`(\\w+)`|\\(default\\)) \\|")
		seen := map[string]bool{}
		for _, m := range row.FindAllStringSubmatch(guide, -1) {
			param, output := m[1], m[3]
			seen[param] = true
			p, ok := app.Parameters[param]
			if !ok {
				t.Errorf("the guide lists %s, which template.yaml does not declare", param)
				continue
			}
			_, hasDefault := p.(map[string]any)["Default"]
			if output == "" && !hasDefault {
				t.Errorf("the guide says %s has a default; template.yaml gives none", param)
			}
			if _, ok := platform.Outputs[output]; output != "" && !ok {
				t.Errorf("the guide fills %s from output %s, which the platform stack does not declare", param, output)
			}
		}
		for name := range app.Parameters {
			if !seen[name] {
				t.Errorf("the guide's table misses app parameter %s", name)
			}
		}
	})

	t.Run("every name the guide quotes is declared by a template", func(t *testing.T) {
		// Parameter overrides (Name=value), output queries and quoted CamelCase names.
		var names []string
		for _, re := range []*regexp.Regexp{
			regexp.MustCompile(`\b([A-Z][a-z][A-Za-z0-9]*)=[^=\s]`), // not the shell variables (CAPS)
			regexp.MustCompile(`OutputKey[!=]='(\w+)'`),
			regexp.MustCompile("`([A-Z][a-z]+(?:[A-Z][A-Za-z0-9]*)+)`"),
		} {
			for _, m := range re.FindAllStringSubmatch(guide, -1) {
				names = append(names, m[1])
			}
		}
		// Property and policy names the guide quotes that are not logical ids.
		other := []string{"MigrationsHash", "DeletionPolicy", "BatchGetSecretValue", "GetSecretValue"}
		checked := 0
		for _, n := range names {
			if slices.Contains(other, n) {
				continue
			}
			checked++
			if !declared[n] {
				t.Errorf("the guide names %s, which neither template declares", n)
			}
		}
		if checked < 20 {
			t.Fatalf("checked only %d names: the patterns no longer match the guide", checked)
		}
	})

	t.Run("samconfig environments have real defaults and override only declared parameters", func(t *testing.T) {
		raw, err := os.ReadFile(filepath.Join("..", "..", "samconfig.toml"))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "REPLACE") {
			t.Error("samconfig.toml holds a REPLACE placeholder")
		}
		var envs []string
		for env, deploy := range samconfigDeploy(string(raw)) {
			envs = append(envs, env)
			tpl := app
			if tf := deploy["template_file"]; tf != "" {
				if tf != "infra/aws/platform.yaml" {
					t.Errorf("%s deploys %s, which this test does not know", env, tf)
					continue
				}
				tpl = platform
			}
			if deploy["region"] == "" {
				t.Errorf("%s has no region", env)
			}
			for _, o := range strings.Fields(deploy["parameter_overrides"]) {
				name, _, _ := strings.Cut(o, "=")
				if _, ok := tpl.Parameters[name]; !ok {
					t.Errorf("%s overrides %s, which its template does not declare", env, name)
				}
			}
			if !strings.Contains(guide, "--config-env "+env) && env != "default" {
				t.Errorf("the guide never uses environment %s", env)
			}
		}
		sort.Strings(envs)
		if len(envs) < 4 {
			t.Errorf("samconfig environments %v, want default, platform, prod and prod-platform", envs)
		}
	})
}

// samconfigDeploy reads the [<env>.deploy.parameters] tables of a
// samconfig.toml: string values as they are, arrays of strings joined by
// spaces. (The project has no TOML parser; the file keeps to these forms.)
func samconfigDeploy(text string) map[string]map[string]string {
	out := map[string]map[string]string{}
	section := regexp.MustCompile(`^\[([\w-]+)\.deploy\.parameters\]$`)
	quoted := regexp.MustCompile(`"([^"]*)"`)
	var cur map[string]string
	var key string // of an array still open
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if key != "" {
			for _, m := range quoted.FindAllStringSubmatch(line, -1) {
				cur[key] = strings.TrimSpace(cur[key] + " " + m[1])
			}
			if strings.Contains(line, "]") {
				key = ""
			}
			continue
		}
		if strings.HasPrefix(line, "[") {
			cur = nil
			if m := section.FindStringSubmatch(line); m != nil {
				cur = map[string]string{}
				out[m[1]] = cur
			}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if cur == nil || !ok || strings.HasPrefix(line, "#") {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var vals []string
		for _, m := range quoted.FindAllStringSubmatch(v, -1) {
			vals = append(vals, m[1])
		}
		cur[k] = strings.Join(vals, " ")
		if strings.HasPrefix(v, "[") && !strings.Contains(v, "]") {
			key = k
		}
	}
	return out
}
