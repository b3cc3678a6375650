package identity

import (
	"unicode/utf8"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

func errInvalidAgentID(field string) error {
	return mesh.Errorf(mesh.KindUnprocessable, "invalid_agent_id", "%s must be an agent id matching %s", field, mesh.AgentIDPattern)
}

// MaxNameLength bounds agent and group display names (characters).
const MaxNameLength = 200

func validName(name string) error {
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > MaxNameLength {
		return mesh.Errorf(mesh.KindUnprocessable, "invalid_name", "name must be 1-%d characters", MaxNameLength)
	}
	if !mesh.PrintableName(name) {
		return mesh.Errorf(mesh.KindUnprocessable, "invalid_name", "name must be printable: no control characters, line separators or bidirectional formatting")
	}
	return nil
}

// Page selects one page of a list ordered by id: the items after After
// (exclusive; "" = from the start), at most Limit of them. A list answers
// next_after when more items follow.
type Page struct {
	After string
	Limit int
}

// Page sizes of list routes.
const (
	DefaultPageSize = 100
	MaxPageSize     = 1000
)

// cutPage trims a list read with LIMIT Limit+1 to one page: when the extra
// item came back, more follow, and the cursor is the id of the page's last
// item.
func cutPage[T any](list []T, limit int, id func(T) string) ([]T, string) {
	if len(list) <= limit {
		return list, ""
	}
	list = list[:limit]
	return list, id(list[len(list)-1])
}
