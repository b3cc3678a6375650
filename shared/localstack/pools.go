package localstack

import (
	"context"
	"log/slog"

	"github.com/agentmesh/agentmesh/shared/config"
	"github.com/agentmesh/agentmesh/shared/dispatch"
	"github.com/agentmesh/agentmesh/shared/mysql"
)

// APIConns is the size of the database pool the local stack's API
// functions share. On AWS every function instance has a pool of its own and
// serves one request at a time, so the API's connections grow with its
// concurrency; in one local process they are one pool, and mysql.Open's 10
// (one instance's) made every request past the tenth wait in line (at 500
// sends/s, ~500 waits a second of tens of ms each, on every statement of
// sends and inbox reads). Much more than this only adds senders queued on
// the same recipients' counter rows inside MariaDB.
const APIConns = 24

// SizeAPIPool gives the API functions' shared pool APIConns connections.
func SizeAPIPool(db *mysql.DB) {
	db.SetMaxOpenConns(APIConns)
	db.SetMaxIdleConns(APIConns)
}

// NewDispatcher builds the local DispatcherFunction: a Kafka dispatcher on
// a database pool of its own, as the function has on AWS. On the API's pool
// each of its batches (and the push rounds after them) queued behind the
// requests in flight: at 500 sends/s a batch took ~300 ms instead of ~25.
// closeFn closes its Kafka client and its pool.
func NewDispatcher(ctx context.Context, cfg config.Config, log *slog.Logger) (d *dispatch.Dispatcher, closeFn func(), err error) {
	db, err := mysql.OpenWithCredentials(ctx, cfg.MySQLDSN, cfg.DBCredentials)
	if err != nil {
		return nil, nil, err
	}
	if d, err = dispatch.NewKafkaDispatcher(ctx, db, cfg, log); err != nil {
		db.Close()
		return nil, nil, err
	}
	// The client is the one built here, even if a test swaps the
	// publisher later.
	kp, _ := d.Publisher.(dispatch.KafkaPublisher)
	return d, func() {
		if kp.Client != nil {
			kp.Client.Close()
		}
		db.Close()
	}, nil
}
