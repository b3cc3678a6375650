// Package samlocal holds what running the functions under the SAM CLI's
// local emulation (`sam local invoke`, `sam local start-api`) needs beyond
// template.yaml: the variables of the --env-vars file. infra/podman.sh
// writes that file for people (through cmd/samlocal); the SAM tier of
// `make test` (this package's tests, run by infra/sam-test.sh) writes its
// own, pointed at its private database and broker.
package samlocal

import (
	"encoding/json"
	"fmt"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/localstack"
)

// Vars returns the variables every function is given locally, the
// "Parameters" section of an --env-vars file. SAM passes a function only
// the variables template.yaml declares for it and ignores the rest, so each
// name here must be declared (a test in shared/deploy checks it).
//
// dsn is the database as the containers reach it; brokers may be empty (the
// HTTP routes link no Kafka client). The secrets are given as plain values
// (as meshlocal gives them), and every *_SECRET_ARN, every AWS-only setting
// the template fills with a reference (the relay function's name, the push
// URLs), is blanked: locally nothing calls AWS.
func Vars(s localstack.Secrets, dsn, brokers string) (map[string]string, error) {
	if dsn == "" {
		return nil, fmt.Errorf("samlocal: no database DSN")
	}
	keys, err := config.ParseJWTKeys(s.JWTKeys)
	if err != nil {
		return nil, err
	}
	pub := make([]config.JWTPublicKey, len(keys))
	for i, k := range keys {
		pub[i] = k.Public()
	}
	return map[string]string{
		"MYSQL_DSN":             dsn,
		"KAFKA_BROKERS":         brokers,
		"KAFKA_PUBLIC_BROKERS":  "",
		"KAFKA_AUTH":            "none",
		"MESH_ADMIN_KEY":        s.AdminKey,
		"MESH_JWT_KEYS":         s.JWTKeys,
		"MESH_JWT_PUBLIC_KEYS":  config.FormatJWTPublicKeys(pub),
		"MESH_INBOX_MASTER_KEY": s.InboxMasterKey,
		// The database comes from MYSQL_DSN, the secrets from the plain
		// values above: no Secrets Manager call.
		"MESH_DB_SECRET_ARN":               "",
		"MESH_ADMIN_KEY_SECRET_ARN":        "",
		"MESH_JWT_KEYS_SECRET_ARN":         "",
		"MESH_INBOX_MASTER_KEY_SECRET_ARN": "",
		// SAM resolves these references to placeholders; a function given one
		// would invoke the relay or post to a WebSocket API on AWS.
		"MESH_PUSH_RELAY_FUNCTION": "",
		"MESH_PUSH_URL":            "",
		"MESH_PUSH_ENDPOINT":       "",
		"MESH_STACK_NAME":          "agent-mesh-local",
	}, nil
}

// EnvFile is the --env-vars file for vars: every function gets them.
func EnvFile(vars map[string]string) ([]byte, error) {
	b, err := json.MarshalIndent(map[string]any{"Parameters": vars}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
