package apigwlocal

import (
	"reflect"
	"testing"

	"github.com/agentmesh/agentmesh/shared/samtemplate"
)

// routerTemplate mirrors the shapes of template.yaml that make routing
// interesting: a literal segment next to a variable, one path with several
// methods, nested variables.
func routerTemplate() *samtemplate.Template {
	return &samtemplate.Template{Functions: []samtemplate.Function{
		{LogicalID: "GetMeFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/agents/me"}}},
		{LogicalID: "GetAgentFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/agents/{id}"}}},
		{LogicalID: "GoOfflineFunction", Routes: []samtemplate.Route{{Method: "DELETE", Path: "/v1/agents/me/online"}}},
		{LogicalID: "SendFriendRequestFunction", Routes: []samtemplate.Route{{Method: "POST", Path: "/v1/friends/requests"}}},
		{LogicalID: "ListFriendRequestsFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/friends/requests"}}},
		{LogicalID: "RemoveFriendFunction", Routes: []samtemplate.Route{{Method: "DELETE", Path: "/v1/friends/{id}"}}},
		{LogicalID: "RemoveGroupMemberFunction", Routes: []samtemplate.Route{{Method: "DELETE", Path: "/v1/groups/{id}/members/{agent}"}}},
		{LogicalID: "FilesFunction", Routes: []samtemplate.Route{{Method: "GET", Path: "/v1/files/{path+}"}}},
	}}
}

func TestRouterPicksTheRouteAPIGatewayWould(t *testing.T) {
	r, err := NewRouter(routerTemplate())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, method, path string
		want               Match
	}{
		{"a literal segment beats a variable", "GET", "/v1/agents/me",
			Match{Function: "GetMeFunction", Route: samtemplate.Route{Method: "GET", Path: "/v1/agents/me"}}},
		{"a variable takes any other segment", "GET", "/v1/agents/bob",
			Match{Function: "GetAgentFunction", Route: samtemplate.Route{Method: "GET", Path: "/v1/agents/{id}"}, PathParameters: map[string]string{"id": "bob"}}},
		{"path variables are percent-decoded", "GET", "/v1/agents/b%C3%B6b%2Fx",
			Match{Function: "GetAgentFunction", Route: samtemplate.Route{Method: "GET", Path: "/v1/agents/{id}"}, PathParameters: map[string]string{"id": "böb/x"}}},
		{"two variables are both extracted", "DELETE", "/v1/groups/g1/members/alice",
			Match{Function: "RemoveGroupMemberFunction", Route: samtemplate.Route{Method: "DELETE", Path: "/v1/groups/{id}/members/{agent}"}, PathParameters: map[string]string{"id": "g1", "agent": "alice"}}},
		{"the method chooses among routes of one path", "POST", "/v1/friends/requests",
			Match{Function: "SendFriendRequestFunction", Route: samtemplate.Route{Method: "POST", Path: "/v1/friends/requests"}}},
		{"a method only a variable route has falls through to it", "DELETE", "/v1/friends/requests",
			Match{Function: "RemoveFriendFunction", Route: samtemplate.Route{Method: "DELETE", Path: "/v1/friends/{id}"}, PathParameters: map[string]string{"id": "requests"}}},
		{"a greedy variable takes the rest of the path", "GET", "/v1/files/a/b/c.txt",
			Match{Function: "FilesFunction", Route: samtemplate.Route{Method: "GET", Path: "/v1/files/{path+}"}, PathParameters: map[string]string{"path": "a/b/c.txt"}}},
		{"a known path with another method lists the allowed methods", "PUT", "/v1/friends/requests",
			Match{Allow: []string{"DELETE", "GET", "POST"}}},
		{"a literal path with the wrong method is not rerouted", "POST", "/v1/agents/me",
			Match{Allow: []string{"GET"}}},
		{"an unknown path matches nothing", "GET", "/v1/nothing", Match{}},
		{"a trailing slash is another path", "GET", "/v1/agents/me/", Match{}},
		{"an empty variable segment does not match", "GET", "/v1/agents/", Match{}},
		{"a longer path does not match a shorter route", "GET", "/v1/agents/bob/extra", Match{}},
		{"a greedy variable needs at least one segment", "GET", "/v1/files/", Match{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := r.Match(tt.method, tt.path)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Match(%s %s) = %+v, want %+v", tt.method, tt.path, got, tt.want)
			}
		})
	}
}
