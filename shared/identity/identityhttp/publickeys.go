package identityhttp

import (
	"context"

	"github.com/aws/aws-lambda-go/cfn"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/identity"
)

// PublicKeysResourceID names the one set of public keys the custom
// resource Custom::JwtPublicKeys stands for.
const PublicKeysResourceID = "agentmesh-jwt-public-keys"

// PublicKeysResource is the token function's answer to the CloudFormation
// custom resource Custom::JwtPublicKeys: the public halves of its signing
// keys, as attribute Keys in MESH_JWT_PUBLIC_KEYS form. template.yaml hands
// them to every function that verifies agent tokens, so only the token
// function ever reads the private keys. Delete has nothing to undo.
func PublicKeysResource(keys []config.JWTKey) cfn.CustomResourceFunction {
	return func(_ context.Context, ev cfn.Event) (string, map[string]any, error) {
		if ev.RequestType == cfn.RequestDelete {
			return PublicKeysResourceID, nil, nil
		}
		pub, err := identity.FormatPublicKeys(keys)
		if err != nil {
			return PublicKeysResourceID, nil, err
		}
		return PublicKeysResourceID, map[string]any{"Keys": pub}, nil
	}
}
