package accounts_test

import (
	"strings"

	"github.com/agentmesh/agentmesh/shared/mesh"
)

func isCode(err error, code string) bool { return mesh.AsError(err).Code == code }

func contains(s, sub string) bool { return strings.Contains(s, sub) }
