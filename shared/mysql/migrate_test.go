package mysql_test

import (
	"context"
	"reflect"
	"testing"
	"testing/fstest"

	"github.com/agentmesh/agentmesh/shared/mysql"
	"github.com/agentmesh/agentmesh/shared/mysql/mysqltest"
)

// A deploy can fail between a migration's statements (DDL commits one by one
// in MySQL) or after them but before its schema_migrations row: the next
// deploy runs the whole file again, so every statement of every migration
// must succeed on a schema that already has its effect.
func TestEveryMigrationRunsAgainAfterAPartialRun(t *testing.T) {
	db, _ := mysqltest.New(t) // every migration applied
	ctx := context.Background()
	migs, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, db)
	// Forgetting every bookkeeping row is the worst partial run: each file
	// finds all of its own effects (and those of later files) in place.
	if _, err := db.ExecContext(ctx, "DELETE FROM schema_migrations"); err != nil {
		t.Fatal(err)
	}
	applied, err := db.Migrate(ctx)
	if err != nil {
		t.Fatalf("re-running the migrations over their own effects failed: %v", err)
	}
	if len(applied) != len(migs) {
		t.Fatalf("re-run applied %v, want all %d migrations", applied, len(migs))
	}
	after := snapshot(t, db)
	delete(before, "migrations")
	delete(after, "migrations")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("the schema changed on a re-run:\nbefore %v\nafter  %v", before, after)
	}
}

func TestTheMigrationsHashFollowsTheFiles(t *testing.T) {
	base := fstest.MapFS{
		"migrations/0001_init.sql": {Data: []byte("CREATE TABLE a (id INT);\n")},
	}
	h0, err := mysql.HashMigrations(base)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(fstest.MapFS)
	}{
		{"adding a migration changes the hash", func(f fstest.MapFS) {
			f["migrations/0002_more.sql"] = &fstest.MapFile{Data: []byte("CREATE INDEX a_id ON a (id);\n")}
		}},
		{"editing a migration changes the hash", func(f fstest.MapFS) {
			f["migrations/0001_init.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE a (id BIGINT);\n")}
		}},
		{"renaming a migration changes the hash", func(f fstest.MapFS) {
			f["migrations/0002_init.sql"] = f["migrations/0001_init.sql"]
			delete(f, "migrations/0001_init.sql")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := fstest.MapFS{}
			for k, v := range base {
				f[k] = v
			}
			tc.change(f)
			h, err := mysql.HashMigrations(f)
			if err != nil {
				t.Fatal(err)
			}
			if h == h0 {
				t.Fatalf("hash stayed %s", h)
			}
		})
	}
	if again, _ := mysql.HashMigrations(base); again != h0 {
		t.Fatalf("the hash is not stable: %s then %s", h0, again)
	}
}
