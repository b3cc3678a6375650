package mysql

import (
	"context"
	"database/sql"
)

// Querier is what QueryStrings reads with: *sql.DB, *sql.Tx, *sql.Conn or
// a *DB.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// QueryStrings runs query, which selects one string column, and returns
// that column of every row. The caller bounds the rows (LIMIT, a key).
func QueryStrings(ctx context.Context, q Querier, query string, args ...any) ([]string, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
