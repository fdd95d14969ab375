package policy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
)

// unknownFieldPath finds where in raw the field named name sits that t
// (a struct type) has no place for, and returns its dotted path such as
// "foldproxy.model.guidance.after", or "" when it cannot be found.
// encoding/json's own error names the field only ("json: unknown field
// \"after\""), which leaves a user of a large settings object to guess
// which of its objects holds the typo.
func unknownFieldPath(raw []byte, t reflect.Type, name string) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return ""
	}
	p, _ := findUnknown(v, t, Key, name)
	return p
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

func findUnknown(v any, t reflect.Type, path, name string) (string, bool) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return "", false
	}
	switch t.Kind() {
	case reflect.Struct:
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		fields := jsonFields(t)
		for k, sub := range obj {
			ft, known := fields[k]
			if !known {
				// encoding/json matches names without regard to case.
				for fk, f := range fields {
					if strings.EqualFold(fk, k) {
						ft, known = f, true
						break
					}
				}
			}
			if !known {
				if k == name {
					return path + "." + k, true
				}
				continue
			}
			if p, ok := findUnknown(sub, ft, path+"."+k, name); ok {
				return p, true
			}
		}
	case reflect.Map:
		obj, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		for k, sub := range obj {
			if p, ok := findUnknown(sub, t.Elem(), path+"."+k, name); ok {
				return p, true
			}
		}
	case reflect.Slice, reflect.Array:
		arr, ok := v.([]any)
		if !ok {
			return "", false
		}
		for i, sub := range arr {
			if p, ok := findUnknown(sub, t.Elem(), path+"["+strconv.Itoa(i)+"]", name); ok {
				return p, true
			}
		}
	}
	return "", false
}

// jsonFields maps the JSON names of t's fields to their types, with the
// fields of embedded structs promoted as encoding/json does.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		n, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && n == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					if _, dup := out[k]; !dup {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if n == "" {
			n = f.Name
		}
		out[n] = f.Type
	}
	return out
}
