package upstreams_test

import (
	"encoding/json"
	"fmt"

	"github.com/foldproxy/foldproxy/upstreams"
)

func ExampleParseServers() {
	// The mcpServers object of an existing .mcp.json.
	raw := json.RawMessage(`{
		"github": {"type": "http", "url": "https://api.example.com/mcp", "headers": {"Authorization": "Bearer ${GITHUB_TOKEN}"}},
		"fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "${ROOT:-/srv}"]}
	}`)
	env := map[string]string{"GITHUB_TOKEN": "t0ken"}
	entries, err := upstreams.ParseServers(raw, func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range entries {
		fmt.Println(e.Name, e.Type, e.Command, e.Args, e.URL, e.Headers)
	}

	_, err = upstreams.ParseServers(json.RawMessage(`{"web": {"type": "websocket"}}`), nil)
	fmt.Println(err)
	// Output:
	// fs stdio npx [-y @modelcontextprotocol/server-filesystem /srv]  map[]
	// github http  [] https://api.example.com/mcp map[Authorization:Bearer t0ken]
	// invalid mcpServers configuration: mcpServers.web.type: "websocket" is not one of stdio, http, streamable-http, sse
}
