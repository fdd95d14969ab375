package proxy

import (
	"encoding/json"
	"testing"
)

func TestSetField(t *testing.T) {
	tests := []struct {
		name, obj, key, val, want string
	}{
		{"replace keeps order", `{"b":1, "name":"x","a":{"k":[1,2]}}`, "name", `"y"`, `{"b":1, "name":"y","a":{"k":[1,2]}}`},
		{"append", `{"b":1}`, "c", `true`, `{"b":1,"c":true}`},
		{"append to empty", `{ }`, "c", `"v"`, `{ "c":"v"}`},
		{"escaped key and braces in strings", `{"x":"}\"{","y":2}`, "y", `3`, `{"x":"}\"{","y":3}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := setField([]byte(tt.obj), tt.key, []byte(tt.val))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDeleteField(t *testing.T) {
	tests := []struct{ obj, key, want string }{
		{`{"a":1,"branch_id":"b","c":3}`, "branch_id", `{"a":1,"c":3}`},
		{`{"a":1,"branch_id":"b"}`, "branch_id", `{"a":1}`},
		{`{"branch_id":"b"}`, "branch_id", `{}`},
		{`{"branch_id":"b", "a":1}`, "branch_id", `{"a":1}`},
		{`{"a":1}`, "branch_id", `{"a":1}`},
	}
	for _, tt := range tests {
		got, err := deleteField([]byte(tt.obj), tt.key)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("deleteField(%s) = %s, want %s", tt.obj, got, tt.want)
		}
		if !json.Valid(got) {
			t.Errorf("invalid JSON %s", got)
		}
	}
}

func FuzzJSONEdit(f *testing.F) {
	f.Add([]byte(`{"a":1,"name":"x","arguments":{"branch_id":"b","q":[1,{"z":"}"}]}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, obj []byte) {
		if !json.Valid(obj) {
			return
		}
		var probe map[string]json.RawMessage
		if json.Unmarshal(obj, &probe) != nil {
			if _, err := fields(obj); err == nil {
				// Not an object for encoding/json, but fields accepted it:
				// only acceptable for objects with duplicate keys.
			}
			return
		}
		out, err := setField(obj, "name", []byte(`"n"`))
		if err != nil {
			t.Fatalf("setField on valid object: %v", err)
		}
		if !json.Valid(out) || stringField(out, "name") != "n" {
			t.Fatalf("setField produced %s", out)
		}
		out, err = deleteField(out, "name")
		if err != nil || !json.Valid(out) {
			t.Fatalf("deleteField produced %s (%v)", out, err)
		}
		if _, ok := getField(out, "name"); ok && probe["name"] == nil {
			t.Fatalf("name still present in %s", out)
		}
	})
}

func TestParseMessagesRefusesInvalidUTF8ID(t *testing.T) {
	_, _, err := ParseMessages([]byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\xfe\",\"method\":\"ping\"}"))
	if err == nil || err.Code != CodeInvalidRequest {
		t.Fatalf("got %v, want an invalid request error", err)
	}
	if msgs, _, err := ParseMessages([]byte(`{"jsonrpc":"2.0","id":"é1","method":"ping"}`)); err != nil || len(msgs) != 1 {
		t.Fatalf("valid UTF-8 id refused: %v", err)
	}
}
