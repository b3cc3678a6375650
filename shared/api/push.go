package api

import "encoding/json"

// PushFrame is one WebSocket message of the push channel, server to meshd.
// It is one of:
//   - a record, byte for byte the value of the Kafka record (envelope v2:
//     {v, key_epoch, sealed});
//   - a nudge {v, seq, fetch: true} telling meshd to read the events up to
//     seq from GET /v1/inbox (for a record larger than a WebSocket message
//     may be, or a burst past what one round posts);
//   - a batch {v, seq, fetch: true, records: [...]}: the values of several
//     records of the agent in seq order, seq the last one's. A meshd that
//     reads records takes them from the frame; one that does not (older
//     than batches) sees a nudge and reads them from the inbox.
//
// Bye, when set, is the server saying why it is about to close the
// connection (replaced, revoked, rate_limited, expired).
type PushFrame struct {
	V        int             `json:"v"`
	KeyEpoch int             `json:"key_epoch,omitempty"`
	Sealed   json.RawMessage `json:"sealed,omitempty"`
	Seq      int64           `json:"seq,omitempty"`
	Fetch    bool            `json:"fetch,omitempty"`
	// Records are the Kafka record values of a batch frame, in seq order.
	Records []json.RawMessage `json:"records,omitempty"`
	Bye     string            `json:"bye,omitempty"`
}

// Push channel close reasons, as PushFrame.Bye.
const (
	ByeReplaced    = "replaced"     // a newer connection of the agent took this one's place
	ByeRevoked     = "revoked"      // the API key behind the connection's token was revoked
	ByeRateLimited = "rate_limited" // the client sent more frames than allowed
	ByeExpired     = "expired"      // the connection reached its maximum age
)
