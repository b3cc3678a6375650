package samlocal

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// LocalTemplate returns template.yaml (src) as a local SAM run builds it:
// CodeUri set to codeURI (the repository, absolute: the derived template
// lives elsewhere) and the Globals' Architectures set to arch, the host's
// (a container of another architecture needs qemu registered with
// binfmt_misc). timeouts sets the Timeout of the named functions. Nothing
// else changes.
func LocalTemplate(src []byte, codeURI, arch string, timeouts map[string]int) ([]byte, error) {
	if arch != "x86_64" && arch != "arm64" {
		return nil, fmt.Errorf("samlocal: architecture %q is not x86_64 or arm64", arch)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if len(doc.Content) != 1 {
		return nil, fmt.Errorf("samlocal: the template is not one YAML document")
	}
	top := doc.Content[0]
	fn, err := path(top, "Globals", "Function")
	if err != nil {
		return nil, err
	}
	uri, err := path(fn, "CodeUri")
	if err != nil {
		return nil, err
	}
	uri.Value = codeURI
	archs, err := path(fn, "Architectures")
	if err != nil {
		return nil, err
	}
	if archs.Kind != yaml.SequenceNode || len(archs.Content) != 1 {
		return nil, fmt.Errorf("samlocal: the Globals' Architectures is not a list of one")
	}
	archs.Content[0].Value = arch
	for id, secs := range timeouts {
		props, err := path(top, "Resources", id, "Properties")
		if err != nil {
			return nil, err
		}
		if t, err := path(props, "Timeout"); err == nil {
			t.Value = fmt.Sprint(secs)
		} else {
			props.Content = append(props.Content,
				&yaml.Node{Kind: yaml.ScalarNode, Value: "Timeout"},
				&yaml.Node{Kind: yaml.ScalarNode, Value: fmt.Sprint(secs), Tag: "!!int"})
		}
	}
	return yaml.Marshal(&doc)
}

// path walks mapping keys from m.
func path(m *yaml.Node, keys ...string) (*yaml.Node, error) {
	for _, k := range keys {
		if m.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("samlocal: the template has no mapping above %s", k)
		}
		var next *yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == k {
				next = m.Content[i+1]
			}
		}
		if next == nil {
			return nil, fmt.Errorf("samlocal: the template has no %s", k)
		}
		m = next
	}
	return m, nil
}
