package config

import (
	"fmt"
	"reflect"
	"strings"

	"gopkg.in/yaml.v3"
)

// DecodeStrict decodes YAML into out, first checking every mapping key
// against the struct's yaml tags so that an unknown key is reported with its
// full path ("server.exports[1].pahts") and line. yaml.v3's KnownFields
// names only the Go type, which tells a user nothing.
func DecodeStrict(b []byte, out any) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if len(doc.Content) == 0 {
		return nil // empty file: defaults
	}
	if err := checkKeys(doc.Content[0], reflect.TypeOf(out).Elem(), ""); err != nil {
		return err
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	return dec.Decode(out)
}

func checkKeys(n *yaml.Node, t reflect.Type, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode {
		// "*name": check what the anchor holds, against this field's type.
		// Every step descends the Go type, which is not recursive, so even
		// a cyclic alias ("&a [*a]", which yaml.v3 parses) ends.
		return checkKeys(n.Alias, t, path)
	}
	switch t.Kind() {
	case reflect.Struct:
		if t.PkgPath() == "time" {
			return nil
		}
		if n.Kind != yaml.MappingNode {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
				return nil
			}
			return fmt.Errorf("line %d: %s: want a mapping", n.Line, orRoot(path))
		}
		fields := map[string]reflect.StructField{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
			if tag == "" || tag == "-" {
				continue
			}
			fields[tag] = f
			names = append(names, tag)
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Tag == "!!merge" {
				// "<<: *base" (or a list of them) merges keys into this mapping.
				merged := []*yaml.Node{v}
				if v.Kind == yaml.SequenceNode {
					merged = v.Content
				}
				for _, m := range merged {
					if err := checkKeys(m, t, path); err != nil {
						return err
					}
				}
				continue
			}
			f, ok := fields[k.Value]
			if !ok {
				return fmt.Errorf("line %d: %s: unknown key (known: %s)", k.Line, join(path, k.Value), strings.Join(names, ", "))
			}
			if err := checkKeys(v, f.Type, join(path, k.Value)); err != nil {
				return err
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return nil // the decoder reports the type error
		}
		for i, c := range n.Content {
			if err := checkKeys(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(p string) string {
	if p == "" {
		return "(top level)"
	}
	return p
}
